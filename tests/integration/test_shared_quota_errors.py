"""`SharedQuota` tells an unreachable store from a faulty one.

Only an outage (a lost or refused connection, a SQLite file that cannot be opened or is locked)
fails closed with a retryable error or engages the local share. Any other store failure (a bug,
a damaged ledger, a read-only store) fails the attempt with a non-retryable error naming it,
and never engages the local share, which would hide the fault behind a warning.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

import pollux
from pollard import IntegrityError, MemoryStore, PollardError, PostgresStore, SQLiteStore
from pollard.adapters.pollux import SharedQuota
from pollard.adapters.pollux._quota_errors import describe, store_unreachable
from pollux import APIError, Config, ConfigurationError, RetryPolicy
from pollux.quota import QuotaRequest
from pollux.testing import Emulator
from tests.pollard._postgres import fresh_schema

QUOTA_LOG = "pollard.adapters.pollux.quota"


class FaultyStore(MemoryStore):
    """A store whose every reservation raises ``fault`` (a bug, a damaged ledger)."""

    def __init__(self, fault: Exception) -> None:
        super().__init__()
        self.fault = fault
        self.reserves = 0

    def reserve(self, claims: Sequence[Any], windows: Sequence[Any] = (), **kwargs: Any) -> Any:
        self.reserves += 1
        raise self.fault


def _faults() -> list[Exception]:
    return [
        TypeError("reserve() got an unexpected keyword argument 'lease'"),
        IntegrityError("the ledger row of scope 'q' does not match its digest"),
    ]


def _request() -> QuotaRequest:
    return QuotaRequest("openai", "gpt-5-nano", None, 10, None)


def _quota(store: Any, mode: Literal["fail", "local"], **kwargs: Any) -> SharedQuota:
    if mode == "local":
        kwargs.setdefault("workers", 4)
    kwargs.setdefault("window_s", 30)
    return SharedQuota(store, requests_per_minute=8, name="fleet", on_unreachable=mode, **kwargs)


@pytest.mark.parametrize("mode", ["fail", "local"])
@pytest.mark.parametrize("fault", _faults(), ids=["bug", "damaged-ledger"])
async def test_a_store_fault_is_not_an_outage_and_never_reaches_the_provider(
    fault: Exception,
    mode: Literal["fail", "local"],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = FaultyStore(fault)
    with Emulator() as emu, _quota(store, mode) as quota:
        monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
        config = Config(
            provider="openai",
            model="gpt-5-nano",
            api_key="k",
            quota=quota,
            retry=RetryPolicy(max_attempts=3),
        )
        with caplog.at_level(logging.DEBUG, logger=QUOTA_LOG):
            outputs = await pollux.run_many(["Hi?"], config=config)
        assert emu.requests == []  # not sent, on the local share or otherwise
    error = outputs.outputs[0].diagnostics.error
    assert error is not None
    assert error["error_category"] == "quota_store_error" and error["retryable"] is False
    assert store.reserves == 1  # not retried: waiting does not fix it
    name = type(fault).__name__
    assert "quota 'fleet'" in error["message"] and name in error["message"]
    assert str(fault) in error["message"] and f"on_unreachable={mode!r}" in error["message"]
    if isinstance(fault, PollardError):
        assert error["hint"] == fault.hint  # pollard's own hint: `pollard verify`
    else:
        assert "bug" in error["hint"]
    # The local share was not engaged, and nothing said it was.
    assert quota._local is None and not quota._on_local
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("mode", ["fail", "local"])
async def test_a_store_fault_is_raised_with_its_cause(mode: Literal["fail", "local"]) -> None:
    fault = IntegrityError("the ledger row of scope 'q' does not match its digest")
    with _quota(FaultyStore(fault), mode) as quota:
        with pytest.raises(APIError) as caught:
            await quota.acquire(_request())
        # A 429's pause is not swallowed into the local share either.
        with pytest.raises(APIError) as paused:
            await quota.pause(_request(), 5.0)
    for error in (caught.value, paused.value):
        assert error.error_category == "quota_store_error" and error.retryable is False
        assert error.__cause__ is fault and error.hint


async def test_a_read_only_store_is_a_fault_not_an_outage(tmp_path: Path) -> None:
    path = tmp_path / "quota.db"
    SQLiteStore(path).close()
    store = SQLiteStore(path, read_only=True)
    try:
        with _quota(store, "local") as quota, pytest.raises(APIError) as caught:
            await quota.acquire(_request())
    finally:
        store.close()
    assert caught.value.error_category == "quota_store_error"
    assert "read-only" in str(caught.value) and caught.value.hint == "open it without " + (
        "read_only=True to record"
    )


async def test_a_failed_settlement_keeps_the_worst_case_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FailsOnSettle(MemoryStore):
        settle = False

        def reserve(self, claims: Sequence[Any], windows: Sequence[Any] = (), **kw: Any) -> Any:
            if self.settle:
                raise TypeError("a bug in the settlement")
            return super().reserve(claims, windows, **kw)

    store = FailsOnSettle()
    with _quota(store, "fail") as quota:
        permit = await quota.acquire(_request())
        store.settle = True
        with caplog.at_level(logging.WARNING, logger=QUOTA_LOG):
            await permit.settle(12)  # the answer is in: not thrown away
    assert any(
        "kept the worst case" in r.getMessage() and "a bug in the settlement" in r.getMessage()
        for r in caplog.records
    )


async def test_a_postgresql_server_that_is_down_is_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dsn = "postgresql://pollard@127.0.0.1:1/pollard?connect_timeout=2"  # nothing listens there
    with pytest.raises(PollardError) as opened:
        PostgresStore(dsn)
    assert store_unreachable(opened.value)
    with _quota(f"{dsn}#down", "fail") as quota, pytest.raises(APIError) as caught:
        await quota.acquire(_request())
    assert caught.value.error_category == "quota_unavailable" and caught.value.retryable
    assert "'down'" in str(caught.value)
    assert "is the PostgreSQL server up?" in (caught.value.hint or "")
    with (
        caplog.at_level(logging.WARNING, logger=QUOTA_LOG),
        _quota(f"{dsn}#down", "local", window_s=0.2, workers=1) as local,
    ):
        await (await local.acquire(_request())).settle(10)  # on the local share
    assert any("unreachable" in r.getMessage() for r in caplog.records)


async def test_a_redis_server_that_is_down_is_unreachable_and_its_refusals_are_faults() -> None:
    redis = pytest.importorskip("redis")
    with _quota("redis://127.0.0.1:1/0", "fail") as quota, pytest.raises(APIError) as caught:
        await quota.acquire(_request())
    assert caught.value.error_category == "quota_unavailable"
    assert "is the Redis server up?" in (caught.value.hint or "")  # not "is PostgreSQL up?"
    with _quota("redis://127.0.0.1:1/0", "local") as quota:
        assert quota._redis is not None

        def read_only(*args: Any, **kwargs: Any) -> Any:
            raise redis.exceptions.ReadOnlyError("You can't write against a read only replica.")

        quota._redis.admit = read_only  # type: ignore[method-assign]
        with pytest.raises(APIError) as refused:
            await quota.acquire(_request())
    assert refused.value.error_category == "quota_store_error"
    assert "redis.ReadOnlyError" in str(refused.value) and "Redis" in (refused.value.hint or "")


def test_what_counts_as_unreachable(tmp_path: Path) -> None:
    import redis.exceptions

    locked = tmp_path / "locked.db"
    holder = sqlite3.connect(locked)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        sqlite3.connect(locked, timeout=0).execute("SELECT * FROM t")
    except sqlite3.OperationalError as exc:
        busy: Exception = exc
    finally:
        holder.rollback()
        holder.close()
    try:
        SQLiteStore(tmp_path)  # a folder: cannot be opened
    except sqlite3.OperationalError as exc:
        folder: Exception = exc
    unreachable = [
        busy,
        folder,
        sqlite3.OperationalError("unable to open database file"),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
        OSError(113, "No route to host"),
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379."),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
    ]
    faults = [
        TypeError("bug"),
        AttributeError("bug"),
        AssertionError(),
        IntegrityError("damaged ledger"),
        PollardError("the store format is newer"),
        PermissionError(13, "Permission denied"),
        sqlite3.OperationalError("attempt to write a readonly database"),
        sqlite3.OperationalError("no such table: ledger"),
        sqlite3.DatabaseError("database disk image is malformed"),
        redis.exceptions.ResponseError("WRONGTYPE"),
        redis.exceptions.AuthenticationError("invalid username-password pair"),
    ]
    assert [e for e in unreachable if not store_unreachable(e)] == []
    assert [e for e in faults if store_unreachable(e)] == []


async def test_a_closed_quota_says_so(tmp_path: Path) -> None:
    quota = _quota(str(tmp_path / "quota.db"), "local")
    quota.close()
    quota.close()  # idempotent
    # Neither an outage (the local share) nor a fault of the store: the caller's mistake.
    with pytest.raises(ConfigurationError, match="is closed") as caught:
        await quota.acquire(_request())
    assert caught.value.hint and quota._local is None


async def test_a_missing_driver_is_a_setting_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with (
        _quota("postgresql://127.0.0.1:1/pollard#q", "local") as quota,
        pytest.raises(ConfigurationError, match="psycopg") as caught,
    ):
        await quota.acquire(_request())
    assert caught.value.hint == 'pip install "pollard[pg]"' and quota._local is None


def test_a_store_error_quoting_a_dsn_never_shows_its_password() -> None:
    for text in (
        "cannot reach postgresql://worker:s3cret-pw@db.internal/quota",
        "bad conninfo: host=db password=s3cret-pw user=worker",
        "bad conninfo: host=db password = 's3cret-pw with spaces' user=worker",
        "bad conninfo: password='it''s s3cret-pw' user=worker",
        "redis://db:6379/0?password=s3cret-pw&ssl=true",
    ):
        shown = describe(RuntimeError(text))
        assert "s3cret" not in shown and "spaces" not in shown, shown
        assert shown.startswith("RuntimeError: ") and "***" in shown


class _PasswordRefusingServer:
    """A PostgreSQL server on loopback that asks for a password and refuses every one.

    Speaks just enough of the protocol (SSL refused, cleartext password requested, then the
    server's own FATAL 28P01), so a wrong password is tested without touching the real server's
    authentication settings.
    """

    def __init__(self) -> None:
        import socket
        import threading

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.logins = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import struct

        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    while True:
                        size, code = struct.unpack("!ii", _read(conn, 8))
                        if code == 80877103:  # SSLRequest
                            conn.sendall(b"N")
                            continue
                        _read(conn, size - 8)  # the startup message's parameters
                        break
                    conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # cleartext password, please
                    kind = _read(conn, 1)
                    if kind != b"p":
                        continue  # libpq hung up: it has no password to send
                    (size,) = struct.unpack("!i", _read(conn, 4))
                    _read(conn, size - 4)
                    self.logins += 1
                    fields = b"".join(
                        tag + text.encode() + b"\0"
                        for tag, text in (
                            (b"S", "FATAL"),
                            (b"V", "FATAL"),
                            (b"C", "28P01"),
                            (b"M", 'password authentication failed for user "worker"'),
                        )
                    )
                    body = fields + b"\0"
                    conn.sendall(b"E" + struct.pack("!i", len(body) + 4) + body)
                except (OSError, EOFError):
                    continue

    def dsn(self, password: str | None) -> str:
        secret = f":{password}" if password is not None else ""
        return (
            f"postgresql://worker{secret}@127.0.0.1:{self.port}/quota"
            "?sslmode=disable&connect_timeout=5&passfile=/nonexistent"
        )

    def close(self) -> None:
        self.listener.close()


def _read(conn: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


@pytest.mark.parametrize("password", ["wrong-s3cret", None])
async def test_a_refused_password_is_a_fault_not_an_outage(
    password: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    # Every worker of a fleet meets a wrong password again on every retry: waiting does not
    # fix it, and running on the local share would hide it behind a warning.
    server = _PasswordRefusingServer()
    try:
        with pytest.raises(PollardError) as opened:
            PostgresStore(server.dsn(password))
        assert getattr(opened.value, "login_refused", False)
        assert not store_unreachable(opened.value)
        assert "rejected the DSN" in str(opened.value)
        assert "password" in (opened.value.hint or "")
        with (
            caplog.at_level(logging.WARNING, logger=QUOTA_LOG),
            _quota(f"{server.dsn(password)}#fleet", "local") as quota,
            pytest.raises(APIError) as caught,
        ):
            await quota.acquire(_request())
        assert caught.value.error_category == "quota_store_error"
        assert not caught.value.retryable and quota._local is None
        assert "rejected the DSN" in str(caught.value)
        shown = " ".join([str(caught.value), *(r.getMessage() for r in caplog.records)])
        assert "wrong-s3cret" not in shown
        assert server.logins == (2 if password else 0)
    finally:
        server.close()


@pytest.mark.postgres
@pytest.mark.parametrize("part", ["user", "database"])
async def test_a_dsn_naming_an_unknown_user_or_database_is_a_fault(part: str, pg_dsn: str) -> None:
    import psycopg

    given = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    given["user" if part == "user" else "dbname"] = "pollard_no_such_" + part
    dsn = psycopg.conninfo.make_conninfo(**given)
    with pytest.raises(PollardError) as opened:
        PostgresStore(dsn)
    assert "does not exist" in str(opened.value) and not store_unreachable(opened.value)
    with _quota(dsn, "local") as quota, pytest.raises(APIError) as caught:
        await quota.acquire(_request())
    assert caught.value.error_category == "quota_store_error" and quota._local is None


@pytest.mark.postgres
def test_a_login_refused_after_a_restart_keeps_the_step_and_is_no_outage(pg_dsn: str) -> None:
    # A password rotated (here: the role barred from logging in) while a store was connected:
    # the reconnect is refused. It is still a lost connection to the step machine (the commit
    # is kept to retry), but not an outage to a shared quota.
    import uuid

    import psycopg

    role = f"pollard_rotated_{uuid.uuid4().hex[:8]}"
    with fresh_schema(pg_dsn) as schema_dsn, psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
        try:
            given = psycopg.conninfo.conninfo_to_dict(schema_dsn)
            given["user"] = role
            store = PostgresStore(psycopg.conninfo.make_conninfo(**given))
            try:
                store.node_count()  # connected
                admin.execute(f"ALTER ROLE {role} NOLOGIN")
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (role,),
                )
                refused: BaseException | None = None
                for _ in range(3):  # the first call may meet the dead connection first
                    with pytest.raises(PollardError) as lost:
                        store.node_count()
                    assert getattr(lost.value, "connection_lost", False)
                    if getattr(lost.value, "login_refused", False):
                        refused = lost.value
                        break
                assert refused is not None
                assert "not permitted to log in" in str(refused)
                assert not store_unreachable(refused)
            finally:
                store.close()
        finally:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(f"DROP OWNED BY {role}")  # what it made in the fresh schema
            admin.execute(f"DROP ROLE {role}")


def test_a_keyword_dsn_is_postgresql_never_a_sqlite_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``host=db dbname=quota`` once opened a SQLite file of that name in the working folder:
    # every host its own window, so N hosts sent N times the quota.
    from pollard.adapters.pollux import _quota
    from pollard.stores._spec import parse_store_spec

    monkeypatch.chdir(tmp_path)
    spec = parse_store_spec("host=127.0.0.1 port=1 dbname=quota connect_timeout=2#fleet")
    assert (spec.kind, spec.store_id, spec.label) == ("postgres", "fleet", "postgresql#fleet")
    assert spec.dsn() == "host=127.0.0.1 port=1 dbname=quota connect_timeout=2"
    quoted = parse_store_spec("host=db password='a#b c'")  # a '#' inside a value is the value's
    assert (quoted.store_id, quoted.dsn()) == ("default", "host=db password='a#b c'")
    with pytest.raises(PollardError) as opened:
        _quota._open("host=127.0.0.1 port=1 dbname=quota connect_timeout=2", spec)
    assert store_unreachable(opened.value)  # nothing listens: an outage, not a file
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigurationError, match="unsupported URL scheme 'mysql'") as refused:
        _quota_for("mysql://db/quota")
    # The advice is the quota's (a Redis URL included), not the runtime's store parser's.
    assert "redis://" in refused.value.hint and "MemoryStore" not in str(refused.value)


def _quota_for(store: str) -> SharedQuota:
    return SharedQuota(store, requests_per_minute=8, name="fleet")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("window_s", 1e300),
        ("window_s", 86_401),
        ("poll_s", float("nan")),
        ("poll_s", 0),
        ("queue_lease_s", -1),
        ("queue_lease_s", True),
    ],
)
def test_a_bad_duration_is_named_by_its_own_parameter(option: str, value: object) -> None:
    # poll_s=nan was reported as "window_s must be ...", naming a parameter the user never set.
    with pytest.raises(ConfigurationError) as caught:
        SharedQuota(":memory:", requests_per_minute=8, **{option: value})  # type: ignore[arg-type]
    assert str(caught.value).startswith(f"{option} must be a number of seconds > 0")
    assert option in (caught.value.hint or "")


@pytest.mark.parametrize("kind", ["folder", "device", "fifo", "blank"])
def test_a_store_path_that_can_never_be_a_file_is_refused_at_once(
    kind: str, tmp_path: Path
) -> None:
    # Once accepted, then reported at every call as an outage (retryable, or the local share).
    import os

    target = {"folder": str(tmp_path), "device": "/dev/null", "blank": "   "}.get(kind)
    if target is None:
        target = str(tmp_path / "quota.fifo")
        os.mkfifo(target)
    with pytest.raises(ConfigurationError) as caught:
        SharedQuota(target, requests_per_minute=8, on_unreachable="local", workers=2)
    assert caught.value.hint
    expected = {"folder": "is a folder", "blank": "empty store spec"}.get(kind, "not a regular")
    assert expected in str(caught.value)
