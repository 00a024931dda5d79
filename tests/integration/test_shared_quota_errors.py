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
