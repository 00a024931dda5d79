"""``PostgresStore``: the shared store for worker teams and several hosts (``pollard[pg]``).

Requires psycopg 3 (``pip install "pollard[pg]"``); it is imported when a store is created, never
by ``import pollard``.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from pollard._core._ledger import (
    ZERO,
    Admission,
    BudgetClaim,
    Shortfall,
    WindowClaim,
    WindowEvent,
    active_totals,
    admit,
    held_amounts,
)
from pollard._core._node import Node
from pollard.errors import IntegrityError, PollardError
from pollard.stores._common import check_new_node, mark_unreachable, meta_text
from pollard.stores._legacy08 import LEGACY_PREFIX, LEGACY_TABLES, copy_legacy
from pollard.stores._pgtext import (
    COMMIT_NAME,
    FUNCTION_NAMES,
    FUNCTIONS,
    RESERVE_NAME,
    literals,
    text_params,
)
from pollard.stores._sql import (
    KIND_CODES,
    LEDGER_HINT,
    SCHEMA_VERSION,
    Dialect,
    SqlStore,
    check_schema_version,
    check_store_id,
    dump_held,
    load_held,
    stored_amount,
)

__all__ = ["PostgresStore", "check_store_format", "is_legacy_schema"]

_INSTALL = 'PostgresStore needs psycopg 3: pip install "pollard[pg]"'


@functools.lru_cache(maxsize=4096)  # a run's scopes repeat on every step
def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key, identical in every process."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


_SCHEMA_LOCK = _lock_key("pollard", "schema")
_SERVER_NOW = "extract(epoch FROM clock_timestamp())::float8"
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE
_SQLSTATE = ord("C")  # libpq's PG_DIAG_SQLSTATE field of an error result
_ADMIT_TRIES = 10
_MAX_TRACKED_HOLDS = 4096
_MAX_ENCODED_CLAIMS = 256  # distinct claim sets whose reservation parameters are kept encoded
_NO_ROWS = (b"{}", b"{}", b"{}")  # a commit's ledger arrays without charges
_NO_EVENTS: list[bytes | None] = [b"{}", b"{}", b"{}"]  # its window arrays without events
_KIND_TEXT = {kind: str(code).encode("ascii") for kind, code in KIND_CODES.items()}
# The hot-path transactions are acknowledged before their WAL flush (see `PostgresStore`). A
# durable store then forces the flush with a transaction of its own that holds no lock, so
# concurrent writers share one disk flush instead of queueing on a row lock through each.
_NO_FLUSH = "SET LOCAL synchronous_commit = off"
# Turns the flush back on for the transaction (unless the DSN asks for more, e.g. remote_apply).
_FLUSH_ON = (
    "SELECT set_config('synchronous_commit', CASE current_setting('synchronous_commit') "
    "WHEN 'off' THEN 'on' ELSE current_setting('synchronous_commit') END, true)"
)
# The flush, as a transaction of its own (one statement after the step's COMMIT). It must write
# WAL to wait for the flush (one that only takes an xid commits asynchronously): a transactional
# logical message is the smallest write, touches no table and needs no privilege. Logical
# decoders see it under the prefix "pollard". It returns the message's WAL position.
_FLUSH = f"{_FLUSH_ON}, pg_logical_emit_message(true, 'pollard', 'flush')"


# How many forks this process descends from (bumped in every child): a connection check per
# store call compares this counter instead of asking the kernel for the process id each time.
_forks = [0]


def _forked() -> None:
    _forks[0] += 1
    _random_ids.clear()  # the parent's: a child draws its own


# Reservation ids read ahead from the OS's random source: one system call per 256 steps instead of
# one per step (the same 128 random bits each, as unique as a uuid4). Emptied in a forked child.
_random_ids: list[str] = []
_IDS_AHEAD = 256


def _random_id() -> str:
    """32 hex digits of fresh OS randomness (`os.urandom`)."""
    try:
        return _random_ids.pop()
    except IndexError:  # once per `_IDS_AHEAD` ids
        text = os.urandom(16 * _IDS_AHEAD).hex()
        _random_ids.extend([text[i : i + 32] for i in range(32, len(text), 32)])
        return text[:32]


os.register_at_fork(after_in_child=_forked)


def _psycopg() -> Any:
    try:
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise ImportError(_INSTALL) from exc


# Seconds a connection attempt may take when neither the DSN nor ``PGCONNECT_TIMEOUT`` says:
# libpq's own default waits forever, so a server whose packets are dropped (a host down behind
# a firewall, a half-open network) would hang a step, a quota's admission or a CLI command
# instead of failing with the store's "unreachable" error.
CONNECT_TIMEOUT_S = 10


def _connect(psycopg: Any, conninfo: str) -> Any:
    """An autocommit connection, bounded by `CONNECT_TIMEOUT_S` unless the DSN sets its own."""
    try:
        given = "connect_timeout" in psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        given = True  # malformed: connect() reports it with libpq's message
    if given or os.environ.get("PGCONNECT_TIMEOUT"):
        return psycopg.connect(conninfo, autocommit=True)
    return psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


# The server's (or libpq's) words for a login it refused: a setting to fix, not an outage. libpq
# gives no SQLSTATE for a failed connection, so the English texts are matched; a server with
# translated messages is read as unreachable, as every failed connection was before.
_LOGIN_REFUSED = re.compile(
    r"authentication failed|(?:role|database) \".*\" does not exist|no pg_hba\.conf entry"
    r"|pg_hba\.conf rejects|permission denied for database|is not permitted to log in"
    r"|no password supplied"
)


def _login_refused(exc: BaseException) -> bool:
    """Whether a failed connection is the server refusing the DSN's login or database.

    A wrong password, user or database name answers the same on every retry, so a shared quota
    must report it rather than wait or fall back to its local share as for a server that is down.
    """
    pgconn = getattr(exc, "pgconn", None)
    if pgconn is not None and getattr(pgconn, "needs_password", False):
        return True  # the server asked for a password and the DSN has none
    return _LOGIN_REFUSED.search(str(exc)) is not None


def _dsn_durable(psycopg: Any, conninfo: str) -> bool:
    """Durable unless the DSN (or ``PGOPTIONS``) sets ``synchronous_commit`` to ``off``."""
    try:
        options = psycopg.conninfo.conninfo_to_dict(conninfo).get("options") or ""
    except psycopg.ProgrammingError:
        options = ""  # the connect reports a malformed DSN, with libpq's message
    options = f"{os.environ.get('PGOPTIONS', '')} {options}"
    found = re.findall(r"synchronous_commit\s*=\s*([A-Za-z_]+)", options)
    return not found or found[-1].lower() != "off"


def _numbered(sql: str) -> str:
    """``%s`` placeholders as ``$1, $2, ...`` (the statements hold no other ``%``)."""
    parts = sql.split("%s")
    return "".join(
        part + (f"${i}" if i < len(parts) else "") for i, part in enumerate(parts, start=1)
    )


def _placeholders(function: str, count: int) -> str:
    """``SELECT * FROM function($1, ..., $count)``."""
    return f"SELECT * FROM {function}({', '.join(f'${i}' for i in range(1, count + 1))})"


class _Queue:
    """Statements collected for one `PostgresStore._batch` (a cursor stand-in for writers)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Sequence[Any]]] = []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.items.append((sql, params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.items.extend((sql, row) for row in rows)


class _Encoded(list):  # type: ignore[type-arg]
    """A lone step function's parameters already in text form (`text_params`), for `_batch`.

    ``raw()`` gives the values themselves, for a batch that quotes them as literals instead (a
    connection whose client encoding is not UTF-8).
    """

    __slots__ = ("raw",)
    raw: Callable[[], Sequence[Any]]


def _encoded(params: list[bytes | None], raw: Callable[[], Sequence[Any]]) -> _Encoded:
    encoded = _Encoded(params)  # list's own constructor: no Python-level __init__
    encoded.raw = raw
    return encoded


class _Wire:
    """One connection's batches sent and read below psycopg's cursor (the same libpq calls).

    A cursor's ``execute`` and ``fetchall`` cost more client CPU per round trip than the rest
    of a budgeted step's bookkeeping (query conversion, result descriptions, row factories);
    a batch is already one finished simple query, so it is sent as it is and its rows are
    loaded by psycopg's own `Transformer` (the same loaders, so the same Python values).
    """

    def __init__(self, psycopg: Any, conn: Any) -> None:
        pq = psycopg.pq
        self._conn = conn
        self._pgconn = conn.pgconn
        self._execute = importlib.import_module("psycopg.generators").execute
        self._error = psycopg.errors.error_from_result
        self._internal = psycopg.errors.InternalError
        self._encoding = conn.info.encoding
        self._tuples = pq.ExecStatus.TUPLES_OK
        self._empty = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.EMPTY_QUERY)
        self._loader = psycopg.adapt.Transformer(conn)
        # Statements `call` prepared on this session (cleared when the session may have lost
        # them, as behind a pooling proxy).
        self.prepared: set[str] = set()
        self.utf8 = self._encoding == "utf-8"
        # Reservation ids held on this session (see `PostgresStore._session_holds`).
        self.holds: set[str] = set()
        self.cursor: Any = None  # the store's `ClientCursor` for batches on this connection

    def run(self, text: str) -> list[list[Any] | None]:
        """Send ``text`` as one simple query; the rows of each statement (None: no rows).

        Raises the error psycopg's cursor raises for the first failed statement.
        """
        conn = self._conn
        with conn.lock:
            self._pgconn.send_query(text.encode(self._encoding))
            results = conn.wait(self._execute(self._pgconn))
        out: list[list[Any] | None] = []
        loader = self._loader
        for res in results:
            status = res.status
            if status == self._tuples:
                loader.set_pgresult(res)
                out.append(loader.load_rows(0, res.ntuples, tuple))
            elif status in self._empty:
                out.append(None)
            else:
                raise self._error(res, encoding=self._encoding)
        if not out:
            raise self._internal("got no result from the query")
        return out

    def call(self, name: str, sql: str, params: Sequence[bytes | None]) -> list[Any]:
        """Run the prepared statement ``name`` (``sql``, prepared on first use); its rows.

        One extended-protocol round trip: the server neither parses nor plans the call again
        and the parameters travel as text without SQL quoting.
        """
        conn, pgconn = self._conn, self._pgconn
        key = name.encode("ascii")
        with conn.lock:
            if name not in self.prepared:
                pgconn.send_prepare(key, sql.encode(self._encoding))
                (res,) = conn.wait(self._execute(pgconn))
                # Already prepared on this server session (behind a pooling proxy, by another
                # client of the same version): the name fixes the text, so it is the same one.
                duplicate = res.error_field(_SQLSTATE) == b"42P05"
                if res.status not in self._empty and not duplicate:
                    raise self._error(res, encoding=self._encoding)
                self.prepared.add(name)
            pgconn.send_query_prepared(key, params)
            (res,) = conn.wait(self._execute(pgconn))
        if res.status != self._tuples:
            if res.status not in self._empty:
                raise self._error(res, encoding=self._encoding)
            return []
        count = res.ntuples
        if not count:  # an admitted reservation: no column loaders to set up
            return []
        self._loader.set_pgresult(res)
        rows: list[Any] = self._loader.load_rows(0, count, tuple)
        return rows


class PostgresStore(SqlStore):
    """A PostgreSQL store: nodes, interned blobs and the budget ledger shared by many workers.

    Every table is prefixed ``pollard_`` and carries ``store_id`` in its primary key, so one
    database holds many independent stores (a logical namespace, not an access boundary).
    Workers that share a budget or a rate window must use the same database and ``store_id``.

    Reservations and settlements are transactions that take a transaction-scoped advisory lock
    per ledger scope, so exact step and request budgets hold across threads, processes and hosts.
    Leases and windows use the server's ``clock_timestamp()``, so hosts need not agree on time.
    Amounts are stored as exact decimal text. The first store to open a database creates the
    tables and the two step functions under an advisory lock (later opens need no CREATE
    privilege; a store an older version made gets the functions on its first writable open,
    and a role that may not create them keeps multi-statement batches over the same rows).

    Threads: the store is safe to share. Each thread gets its own autocommit connection, opened
    on first use and closed by `close`. A forked child opens its own connections.

    Args:
        conninfo: A libpq connection string or ``postgresql://`` URL. It is never printed or
            included in ``repr``.
        store_id: The logical store: 1-128 letters, digits, ``_``, ``.``, ``:`` or ``-``.
        intern_payloads: Intern strings of at least ``intern_threshold`` UTF-8 bytes.
        intern_threshold: The interning threshold in bytes.
        read_only: Open an existing store for reading only: nothing is created (the tables and
            ``store_id`` must exist, else `PollardError` names what is missing) and writes raise
            `PollardError`.
        clock: A wall clock for leases and windows instead of the server's (for tests).
        durable: Whether a step is acknowledged only after the server flushed it to disk.
            ``True`` waits for the flush (for ``synchronous_commit = remote_apply`` and the
            like, set it in the DSN too). ``False`` acknowledges before the flush, which is
            faster: a step survives any client crash and a clean server restart, but a server
            or OS crash may lose the last fraction of a second of steps. ``None`` (the
            default) reads the DSN: not durable only when its ``options`` (or ``PGOPTIONS``)
            set ``synchronous_commit=off``, else durable. In every mode a budget never
            overspends: holds, charges and confirmations stay consistent after a crash.

    A lost connection (a server restart, a dropped network) raises `PollardError` with a hint,
    never the driver's error; the next operation reconnects. A budgeted step costs two round
    trips, one statement each: the reservation function, the commit function (a durable commit
    forces its disk flush in the same round trip, after its row locks are released, so
    concurrent writers share one flush). A hold is acknowledged before its flush; a commit on
    another session than its hold's writes nothing unless the hold still exists, so a server
    crash that loses a hold refuses that step's record instead of letting its charge past the
    limit. A hold on a rate window (`WindowMeter`, a `SharedQuota`) of a durable store is
    flushed before it is acknowledged: the call it admits leaves before any commit, so a lost
    one would let the window admit that call again.

    Raises:
        ImportError: Naming ``pip install "pollard[pg]"`` when psycopg is missing.
        ValueError: If ``store_id`` is not a valid store id.
        PollardError: If the server cannot be reached, or ``read_only`` and the store does not
            exist.

    Example:
        Share one step budget between every worker of a team (each opens the run shared)::

            store = PostgresStore(os.environ["POLLARD_PG_DSN"], store_id="support-prod")
            with Runtime(store).run("triage", budget=Budget(steps=1_000), shared=True) as run:
                run.note({"status": "ready"})
            store.close()
    """

    dialect = Dialect(
        param="%s",
        blob="BYTEA",
        real="DOUBLE PRECISION",
        table_options="",
        begin="BEGIN",
        prefix="pollard_",
        namespaced=True,
        for_update=" FOR UPDATE",
        schema_lock=f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})",
        array_params=True,
    )

    def __init__(
        self,
        conninfo: str,
        *,
        store_id: str = "default",
        intern_payloads: bool = True,
        intern_threshold: int = 1024,
        read_only: bool = False,
        clock: Callable[[], float] | None = None,
        durable: bool | None = None,
    ) -> None:
        check_store_id(store_id)
        if durable is not None and not isinstance(durable, bool):
            raise TypeError(f"durable must be True, False or None, got {durable!r}")
        self._psycopg = _psycopg()
        self.durable = _dsn_durable(self._psycopg, conninfo) if durable is None else durable
        super().__init__(
            store_id=store_id,
            intern_payloads=intern_payloads,
            intern_threshold=intern_threshold,
            clock=self._server_clock if clock is None else clock,
        )
        self._conninfo = conninfo
        self.read_only = read_only
        self._fixed_clock = clock
        self._local = threading.local()
        self._connections: list[tuple[int, Any]] = []  # (process id, connection)
        self._lock = threading.Lock()
        # Bumped when any thread loses its connection: a server restart kills every connection,
        # so the other threads replace theirs before their next use instead of each failing
        # one operation of its own first.
        self._epoch = 0
        self._ever_connected = False
        self._closed = False
        self._tables_exist = False
        self._kv_seen = False  # whether pollard_kv existed when the store was opened
        self._has_version = False  # whether this store id's schema_version row did
        self._functions = False  # whether the database holds the step functions (on open)
        # The 0.8 tables kept when this open migrated them ("pollard08_*"), else None.
        self.migration_backup: str | None = None
        # Reservation parameters by claim set (see `_reserve_params`).
        self._encoded_claims: dict[tuple[Any, ...], list[bytes | None]] = {}
        # A commit's scope and meter arrays by (scopes, meters) (see `_ledger_arrays`).
        self._ledger_keys: dict[tuple[Any, ...], tuple[bytes | None, bytes | None, int]] = {}
        self._store_id_text = store_id.encode("utf-8")
        self._prepare_statements()
        try:
            self._init_schema()
        except BaseException:
            self.close()
            raise

    # -- connections ---------------------------------------------------------------------------

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.fork != _forks[0]:
            conn = None  # forked: a child never uses (or closes) its parent's connections
        elif conn is not None and self._local.epoch != self._epoch:
            self._discard(lost=False)  # another thread lost its connection: likely this one too
            conn = None
        if conn is None or conn.closed:
            if self._closed:
                raise PollardError(
                    f"the PostgreSQL store {self._store_id!r} is closed",
                    hint="open a new PostgresStore",
                )
            try:
                conn = _connect(self._psycopg, self._conninfo)
            except self._psycopg.OperationalError as exc:
                if _login_refused(exc):
                    raise self._refused(exc) from None
                if not self._ever_connected:
                    raise self._unreachable(exc) from None
                raise self._lost(exc, "connect") from None
            self._ever_connected = True
            pid = os.getpid()
            with self._lock:
                self._connections.append((pid, conn))
            self._local.conn, self._local.fork, self._local.epoch = conn, _forks[0], self._epoch
        return conn

    def _check_open(self) -> None:
        if self._closed:
            raise PollardError(
                f"the PostgreSQL store {self._store_id!r} is closed",
                hint="open a new PostgresStore",
            )

    def _discard(self, *, lost: bool = True) -> None:
        """Forget this thread's connection after a failure (the next operation reconnects).

        Args:
            lost: The connection failed (so every thread's connection is suspect and is
                replaced before its next use), rather than being retired because another failed.
        """
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with self._lock:
                self._connections = [(p, c) for p, c in self._connections if c is not conn]
                if lost:
                    self._epoch += 1
            with contextlib.suppress(Exception):
                conn.close()

    def _unreachable(self, exc: BaseException) -> PollardError:
        """The error for a first connection that fails (a wrong DSN more often than a restart)."""
        detail = " ".join(str(exc).split()) or type(exc).__name__
        # Marked, so a shared quota tells it from a fault in the store (store_unreachable).
        return mark_unreachable(
            PollardError(
                f"cannot connect to the PostgreSQL server for the store {self._store_id!r}: "
                f"{detail}",
                hint="check the DSN (host, port, database name, user, password) and that the "
                "server is running; pollard never creates a database, so the one named must exist",
            )
        )

    def _refused(self, exc: BaseException) -> PollardError:
        """The error for a login the server refused (not marked unreachable: retrying fails too).

        A refusal after a restart (a rotated password) is still a lost connection for the step
        machine, which keeps the step's commit to retry once the DSN is fixed.
        """
        detail = " ".join(str(exc).split()) or type(exc).__name__
        error = PollardError(
            f"the PostgreSQL server rejected the DSN of the store {self._store_id!r}: {detail}",
            hint="fix the DSN's user, password or database name (or the server's pg_hba.conf); "
            "retrying with the same DSN fails the same way, and pollard never creates a database",
        )
        if self._ever_connected:
            error.connection_lost = True  # type: ignore[attr-defined]
        error.login_refused = True  # type: ignore[attr-defined]
        return error

    def _lost(self, exc: BaseException, during: str, hint: str = "") -> PollardError:
        """The pollard error for a failed connection (the driver's message, never the DSN)."""
        detail = " ".join(str(exc).split()) or type(exc).__name__
        error = PollardError(
            f"lost the connection to the PostgreSQL store {self._store_id!r} during {during}: "
            f"{detail}",
            hint=hint
            or "the server restarted or the network dropped; nothing is held by this operation. "
            "The next store operation reconnects, so retrying the step is safe",
        )
        # The step machine keeps (and later retries) a commit that failed this way.
        error.connection_lost = True  # type: ignore[attr-defined]
        return error

    @contextmanager
    def _guard(self, during: str) -> Iterator[None]:
        """Turn a lost connection into a `PollardError` and drop the broken connection."""
        try:
            yield
        except self._psycopg.OperationalError as exc:
            self._discard()
            raise self._lost(exc, during) from None

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        if self.read_only:
            raise PollardError(
                f"the PostgreSQL store {self._store_id!r} is open read-only",
                hint="open it without read_only=True to record",
            )
        with self._guard("a write"):
            conn = self._connection()
            with conn.transaction(), conn.cursor() as cur:
                yield cur

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self._guard("a read"):
            conn = self._connection()
            with conn.cursor() as cur:
                yield cur

    def _server_clock(self) -> float:
        # Runs on the calling thread's connection, so inside a transaction it sees that clock.
        with self._guard("a clock read"):
            row = (
                self._connection()
                .execute("SELECT extract(epoch FROM clock_timestamp())")
                .fetchone()
            )
        return float(row[0])

    def _lock_keys(self, keys: Iterable[str]) -> list[int]:
        return sorted({_lock_key("pollard", "ledger", self._store_id, k) for k in keys})

    def _lock_ledger(self, cursor: Any, keys: Sequence[str]) -> None:
        # One transaction-scoped advisory lock per (store, scope), taken in a global order.
        for key in self._lock_keys(keys):
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (key,))

    def _batch_text(self, conn: Any, cur: Any, queue: _Queue) -> str:
        """The batch as one string; the ledger statements run as server-side prepared ones.

        A prepared statement is parsed and planned once per connection instead of once per
        step. Its ``PREPARE`` leads the first batch that uses it (no extra round trip).
        """
        prepared: set[str] | None = getattr(self._local, "prepared", None)
        same: bool = getattr(self._local, "prepared_for", None) is conn
        if prepared is None or not same:
            prepared = set()
            if same:  # after a failed batch: read what the session holds
                rows = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
                prepared = {row[0] for row in rows}
            self._local.prepared, self._local.prepared_for = prepared, conn
        head: list[str] = []
        body: list[str] = []
        quote = self._quotes(conn)
        for sql, params in queue.items:
            if sql in self._calls:  # a step function: ``SELECT * FROM name(literals)``
                args = literals(params) if quote else None
                if args is None:
                    args = cur.mogrify(", ".join(["%s"] * len(params)), params)
                body.append(f"{sql}({args})")
                continue
            name = self._prepared_names.get(sql)
            if name is None:
                # Statements without parameters (BEGIN, SET LOCAL, COMMIT) go as they are:
                # quoting nothing still costs a pass through the driver's query parser.
                body.append(cur.mogrify(sql, params) if params else sql)
                continue
            if name not in prepared:
                head.append(f"PREPARE {name} AS {_numbered(sql)}")
                prepared.add(name)
            if not params:
                body.append(f"EXECUTE {name}")
                continue
            args = literals(params) if quote else None
            if args is None:  # a value only the driver quotes (or the server's rules differ)
                marks = ", ".join(["%s"] * len(params))
                args = cur.mogrify(marks, params)
            body.append(f"EXECUTE {name}({args})")
        return "; ".join(head + body)

    def _quotes(self, conn: Any) -> bool:
        """Whether `literals` may quote for this connection (standard-conforming strings)."""
        if getattr(self._local, "quotes_for", None) is not conn:
            status = conn.info.parameter_status("standard_conforming_strings")
            self._local.quotes = status == "on"
            self._local.quotes_for = conn
        return bool(self._local.quotes)

    def _check_writable(self) -> None:
        if self.read_only:
            raise PollardError(
                f"the PostgreSQL store {self._store_id!r} is open read-only",
                hint="open it without read_only=True to record",
            )

    def _wire(self) -> _Wire:
        """This thread's current connection's `_Wire` (made with the connection's batch cursor)."""
        conn = self._connection()
        wire: _Wire | None = getattr(self._local, "wire", None)
        if wire is None or wire._conn is not conn:  # one per connection, kept open
            wire = self._local.wire = _Wire(self._psycopg, conn)
            wire.cursor = self._psycopg.ClientCursor(conn)
        return wire

    def _call(self, wire: _Wire, sql: str, params: list[bytes | None]) -> list[Any]:
        """A lone step function on ``wire``: one prepared extended-protocol call; its rows."""
        try:
            try:
                return wire.call(*self._calls[sql], params)
            except self._psycopg.errors.InvalidSqlStatementName:
                wire.prepared.clear()  # the session lost it (a pooling proxy)
                return wire.call(*self._calls[sql], params)
        except self._psycopg.OperationalError:
            self._discard()
            raise
        except BaseException:
            wire.prepared.clear()
            raise

    def _batch(self, queue: _Queue) -> list[list[Any] | None]:
        """Send queued statements as one simple query (one round trip); rows per statement.

        Parameters are bound client-side as SQL literals (`literals`, or psycopg's quoting for
        a value it does not cover), so several statements, ``BEGIN`` to ``COMMIT``, travel in
        one message. A failed statement aborts the rest; an open transaction is then rolled
        back.
        """
        self._check_writable()
        wire = self._wire()
        conn, cur = wire._conn, wire.cursor
        errors = self._psycopg.errors
        if len(queue.items) == 1 and queue.items[0][0] in self._calls and wire.utf8:
            # A lone step function (no BEGIN/COMMIT): a prepared extended-protocol call.
            sql, values = queue.items[0]
            params = values if type(values) is _Encoded else text_params(values)
            if params is not None:
                return [self._call(wire, sql, params)]
        for i, (sql, values) in enumerate(queue.items):
            if type(values) is _Encoded:
                queue.items[i] = (sql, values.raw())
        try:
            try:
                return wire.run(self._batch_text(conn, cur, queue))
            except (errors.InvalidSqlStatementName, errors.DuplicatePreparedStatement):
                # The session lost (or already holds) a prepared statement, as behind a pooling
                # proxy: the batch was rolled back whole, so it is sent again after a resync.
                if conn.info.transaction_status != _IDLE:
                    conn.execute("ROLLBACK")
                self._local.prepared = None
                return wire.run(self._batch_text(conn, cur, queue))
        except self._psycopg.OperationalError:
            self._discard()
            raise
        except BaseException:
            self._local.prepared = None  # which PREPAREs ran is unknown: read them next time
            if not conn.closed and conn.info.transaction_status != _IDLE:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
            raise

    # -- one-round-trip ledger operations ------------------------------------------------------

    def _prepare_statements(self) -> None:
        t = self._t
        lit = f"'{self._store_id}'"
        now = "%s::float8" if self._fixed_clock is not None else _SERVER_NOW
        self._now_param = self._fixed_clock is not None
        cols = "id, parent, kind, attempt, payload, result, result_digest, meta, interned"
        self._pg = {
            "sweep": f"DELETE FROM {t['reservations']} WHERE store_id = {lit} AND expires <= {now}",
            "trim": f"DELETE FROM {t['window_events']} e USING unnest(%s::text[], %s::text[], "
            f"%s::float8[]) AS x(k, m, s) WHERE e.store_id = {lit} AND e.wkey = x.k AND "
            f"e.meter = x.m AND e.at <= {now} - x.s",
            # A durable window hold's flush (`_flushes_hold`), sent after the reservation in the
            # same round trip: it writes (and waits for the disk) only when the hold was
            # written, so a refused attempt (a waiting quota's poll) costs no disk flush.
            "flush_hold": f"{_FLUSH_ON}, CASE WHEN EXISTS (SELECT 1 FROM {t['reservations']} "
            f"WHERE store_id = {lit} AND id = %s) "
            "THEN pg_logical_emit_message(true, 'pollard', 'flush') END",
            # Everything the admission rule reads, in one statement (one snapshot).
            # Skipped (one-time filter) when this batch wrote its hold: only a refusal or an
            # unheld admission needs the figures.
            "state": f"WITH n AS (SELECT {now} AS now), "
            f"go AS (SELECT NOT EXISTS (SELECT 1 FROM {t['reservations']} WHERE "
            f"store_id = {lit} AND id = %s) AS go) "
            "SELECT * FROM (SELECT 'now', (SELECT now FROM n)::text, NULL, NULL "
            f"UNION ALL SELECT 'r', claims, NULL, NULL FROM {t['reservations']} "
            f"WHERE store_id = {lit} AND expires > (SELECT now FROM n) "
            f"UNION ALL SELECT 't', scope, meter, total FROM {t['ledger']} "
            f"WHERE store_id = {lit} AND scope = ANY(%s::text[]) "
            "UNION ALL SELECT 'w', x.i::text, NULL, sum(e.amount::numeric)::text "
            "FROM unnest(%s::text[], %s::text[], %s::float8[]) WITH ORDINALITY AS x(k, m, s, i) "
            f"JOIN {t['window_events']} e ON e.store_id = {lit} AND e.wkey = x.k AND "
            "e.meter = x.m AND e.at > (SELECT now FROM n) - x.s GROUP BY x.i) AS f(tag, a, b, c) "
            "WHERE (SELECT go FROM go)",
            # The hold, written only when every claim fits: the rule of `judge` (refuse when
            # ``settled >= limit`` or when a positive request exceeds ``limit - settled -
            # active``), evaluated on the server so admission costs one round trip. `admit`
            # still explains a refusal from the figures of "state".
            "hold": f"WITH n AS (SELECT {now} AS now), "
            "held AS (SELECT x->>0 AS kind, x->>1 AS key, x->>2 AS meter, "
            f"(x->>3)::numeric AS amount FROM {t['reservations']} r CROSS JOIN LATERAL "
            f"jsonb_array_elements(r.claims::jsonb) AS x WHERE r.store_id = {lit} AND "
            "r.expires > (SELECT now FROM n)), "
            "c AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::numeric[], %s::numeric[]) "
            "AS c(scope, meter, lim, req)), "
            "w AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::numeric[], %s::float8[], "
            "%s::numeric[]) AS w(k, m, lim, secs, req)), "
            "figures AS (SELECT c.lim, c.req, coalesce((SELECT l.total::numeric FROM "
            f"{t['ledger']} l WHERE l.store_id = {lit} AND l.scope = c.scope AND "
            "l.meter = c.meter), 0) AS settled, coalesce((SELECT sum(h.amount) FROM held h "
            "WHERE h.kind = 'b' AND h.key = c.scope AND h.meter = c.meter), 0) AS active FROM c "
            "UNION ALL SELECT w.lim, w.req, coalesce((SELECT sum(e.amount::numeric) FROM "
            f"{t['window_events']} e WHERE e.store_id = {lit} AND e.wkey = w.k AND "
            "e.meter = w.m AND e.at > (SELECT now FROM n) - w.secs), 0), coalesce((SELECT "
            "sum(h.amount) FROM held h WHERE h.kind = 'w' AND h.key = w.k AND h.meter = w.m), 0) "
            "FROM w) "
            f"INSERT INTO {t['reservations']} (store_id, id, expires, claims) "
            f"SELECT {lit}, %s, (SELECT now FROM n) + %s, %s WHERE NOT EXISTS (SELECT 1 FROM "
            "figures f WHERE NOT (f.settled < f.lim AND (f.req = 0 OR "
            "f.req <= f.lim - f.settled - f.active))) RETURNING 1",
            # The node, its charges on every scope, its window events and the reservation's
            # release, in one statement: nothing but the node check is written for a known id.
            # ``hold`` is the lost-hold guard: given a reservation id (a commit on another
            # session than its hold's, so a server crash may have come between), nothing is
            # written unless that reservation still exists.
            "commit": "WITH par AS (SELECT %s::bytea IS NULL OR EXISTS (SELECT 1 FROM "
            f"{t['nodes']} WHERE store_id = {lit} AND id = %s::bytea) AS ok), "
            "hold AS (SELECT %s::text IS NULL OR EXISTS (SELECT 1 FROM "
            f"{t['reservations']} WHERE store_id = {lit} AND id = %s::text) AS ok), "
            f"ins AS (INSERT INTO {t['nodes']} (store_id, {cols}) SELECT {lit}, %s::bytea, "
            "%s::bytea, %s::int, %s::int, %s::text, %s::text, %s::bytea, %s::text, %s::int "
            "WHERE (SELECT ok FROM par) AND (SELECT ok FROM hold) ON CONFLICT DO NOTHING "
            "RETURNING 1), "
            f"led AS (INSERT INTO {t['ledger']} AS l (store_id, scope, meter, total) "
            f"SELECT {lit}, x.s, x.m, x.a FROM unnest(%s::text[], %s::text[], %s::text[]) "
            "AS x(s, m, a) WHERE EXISTS (SELECT 1 FROM ins) ON CONFLICT (store_id, scope, meter) "
            "DO UPDATE SET total = (l.total::numeric + excluded.total::numeric)::text "
            "RETURNING 1), "
            f"win AS (INSERT INTO {t['window_events']} (store_id, wkey, meter, at, amount) "
            f"SELECT {lit}, x.k, x.m, {now}, x.a FROM unnest(%s::text[], %s::text[], "
            "%s::text[]) AS x(k, m, a) WHERE EXISTS (SELECT 1 FROM ins) RETURNING 1), "
            f"rel AS (DELETE FROM {t['reservations']} WHERE store_id = {lit} AND id = %s "
            "AND EXISTS (SELECT 1 FROM ins) RETURNING 1) "
            "SELECT (SELECT ok FROM par), (SELECT count(*) FROM ins), "
            "(SELECT count(*) FROM led), (SELECT count(*) FROM win), (SELECT count(*) FROM rel), "
            "(SELECT ok FROM hold)",
            "held": f"SELECT 1 FROM {t['reservations']} WHERE store_id = {lit} AND id = %s",
        }
        self._reserve_call = f"SELECT * FROM {RESERVE_NAME}"
        self._commit_call = f"SELECT * FROM {COMMIT_NAME}"
        # Each function's call as a prepared statement: (name, text with $n parameters).
        self._calls = {
            self._reserve_call: (f"{RESERVE_NAME}_call", _placeholders(RESERVE_NAME, 15)),
            self._commit_call: (f"{COMMIT_NAME}_call", _placeholders(COMMIT_NAME, 19)),
        }
        # Prepared per connection under names unique to this store (one connection may serve
        # several PostgresStore objects).
        tag = hashlib.sha256(self._store_id.encode("utf-8")).hexdigest()[:12]
        self._prepared_names = {
            self._pg[name]: f"pollard_{name}_{'p' if self._now_param else 's'}_{tag}"
            for name in ("sweep", "trim", "hold", "state", "commit")
        }

    def _now(self) -> tuple[Any, ...]:
        return (self._clock(),) if self._now_param else ()

    def reserve(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim] = (),
        *,
        lease_seconds: float,
        hold: bool = True,
        owner: str | None = None,
    ) -> Admission:
        """Atomically check claims and hold their positive amounts (see `pollard.Store`).

        One round trip: under the scopes' advisory locks the server writes the hold when every
        claim fits (the rule of `judge`) and returns the figures; a refusal is explained by
        `admit` over those figures, as on every store.
        """
        if not claims and not windows:
            return Admission(None, None)
        rid = _random_id()  # as unique as a uuid4 (128 random bits), at a tenth the cost
        if owner is not None:  # whose hold it is, for release_gone
            rid = f"{owner}.{rid}"
        try:
            return self._reserve(claims, windows, lease_seconds, hold, rid)
        except self._psycopg.OperationalError as exc:
            # The hold may have been committed just before the connection went: release it by
            # its id on a fresh connection when the server answers again.
            with contextlib.suppress(Exception):
                self.release(rid)
            raise self._lost(exc, "a reservation") from None

    def _reserve(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim],
        lease_seconds: float,
        hold: bool,
        rid: str,
    ) -> Admission:
        held = held_amounts(claims, windows) if hold else []
        for _ in range(_ADMIT_TRIES):
            try:
                if self._functions:
                    inserted, state = self._admit_call(claims, windows, lease_seconds, held, rid)
                else:
                    inserted, state = self._admit_batch(claims, windows, lease_seconds, held, rid)
            except self._psycopg.DataError as exc:
                # Every value a reservation sends is one pollard made; the server failing to
                # read a figure means a ledger row was written behind pollard's back.
                raise self._damaged(exc) from None
            if inserted:
                return Admission(rid, None)
            short = self._explain(claims, windows, state)
            if short is not None or not held:
                return Admission(None, short)
            # The server refused, but the figures read a moment later fit (a settlement landed
            # in between): ask again.
        raise PollardError(
            f"the PostgreSQL store {self._store_id!r} could not settle a reservation",
            hint="the ledger changed under every attempt; retry the step",
        )

    def _admit_call(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim],
        lease_seconds: float,
        held: Sequence[Any],
        rid: str,
    ) -> tuple[bool, list[Any]]:
        """One statement: the server-side reservation function (see `RESERVE_FUNCTION`)."""
        queue = _Queue()
        # Its own transaction: no BEGIN/COMMIT.
        queue.execute(
            self._reserve_call, self._reserve_params(claims, windows, lease_seconds, held, rid)
        )
        if self._flushes_hold(windows, held):
            queue.execute(self._pg["flush_hold"], (rid,))
        try:
            rows = self._batch(queue)[0] or []
        except self._psycopg.errors.UndefinedFunction:
            # Dropped behind the store (a restored dump, a hand-made schema): the batch path
            # reads and writes the same rows.
            self._functions = False
            return self._admit_batch(claims, windows, lease_seconds, held, rid)
        inserted = bool(held) and not rows
        if inserted:
            self._track_hold(rid, self._local.wire.holds)  # the session that took the hold
        return inserted, rows

    def _reserve_values(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim],
        lease_seconds: float,
        held: Sequence[Any],
        rid: str,
    ) -> tuple[Any, ...]:
        """The reservation function's arguments."""
        scopes = sorted({c.scope for c in claims})
        wk = [w.key for w in windows]

        def req(amount: Decimal | None) -> Decimal:
            return amount if amount is not None and amount > 0 else ZERO

        return (
            self._store_id,
            self._clock() if self._now_param else None,
            self._lock_keys([*scopes, *wk]),
            [c.scope for c in claims],
            [c.meter for c in claims],
            [c.limit for c in claims],
            [req(c.amount) for c in claims],
            wk,
            [w.meter for w in windows],
            [w.limit for w in windows],
            [float(w.window_seconds) for w in windows],
            [req(w.amount) for w in windows],
            rid,
            float(lease_seconds),
            dump_held(held) if held else None,
        )

    def _reserve_params(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim],
        lease_seconds: float,
        held: Sequence[Any],
        rid: str,
    ) -> Sequence[Any]:
        """The reservation's arguments as text parameters (`_Encoded`), or as values.

        Values (`_reserve_values`) when one of them has no text form (`text_params`). A run's
        claims are the same on every step (scopes, meters, limits, estimates), so all but the
        reservation id are encoded once per distinct claim set, keyed on the texts and types
        every encoded byte comes from (the lock keys, the arrays, the held JSON).
        """
        raw = functools.partial(self._reserve_values, claims, windows, lease_seconds, held, rid)
        if self._now_param or "\x00" in rid:  # a test's clock per call; NUL: the driver refuses
            values = raw()
            params = text_params(values)
            return values if params is None else _encoded(params, raw)
        key = (
            lease_seconds,
            bool(held),
            tuple(
                [
                    (c.scope, c.meter, type(c.limit), str(c.limit), type(c.amount), str(c.amount))
                    for c in claims
                ]
            ),
            tuple(
                [
                    (
                        w.key,
                        w.meter,
                        type(w.limit),
                        str(w.limit),
                        type(w.window_seconds),
                        str(w.window_seconds),
                        type(w.amount),
                        str(w.amount),
                    )
                    for w in windows
                ]
            ),
        )
        cached = self._encoded_claims.get(key)
        if cached is None:
            values = raw()
            params = text_params(values)
            if params is None:
                return values
            if len(self._encoded_claims) >= _MAX_ENCODED_CLAIMS:
                self._encoded_claims.clear()
            self._encoded_claims[key] = params
            return _encoded(params, raw)
        params = _encoded(cached, raw)
        params[12] = rid.encode("utf-8")
        return params

    def _admit_batch(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim],
        lease_seconds: float,
        held: Sequence[Any],
        rid: str,
    ) -> tuple[bool, list[Any]]:
        """One round trip: lock the scopes, sweep, write the hold if everything fits, read."""
        scopes = sorted({c.scope for c in claims})
        wk = [w.key for w in windows]
        wm = [w.meter for w in windows]
        ws = [float(w.window_seconds) for w in windows]
        now = self._now()
        queue = _Queue()
        # A hold is acknowledged before its WAL flush, in every mode. A server crash that loses
        # it ends this session, so its commit then goes on another one and carries the
        # lost-hold guard (see `_commit`): a lost hold never lets a charge past the limit.
        queue.execute("BEGIN")
        queue.execute(_NO_FLUSH)
        for key in self._lock_keys([*scopes, *wk]):
            queue.execute(f"SELECT pg_advisory_xact_lock({int(key)})")  # an int: no quoting
        queue.execute(self._pg["sweep"], now)
        if windows:
            queue.execute(self._pg["trim"], (wk, wm, ws, *now))
        if held:

            def req(amount: Decimal | None) -> Decimal:
                return amount if amount is not None and amount > 0 else ZERO

            queue.execute(
                self._pg["hold"],
                (
                    *now,
                    [c.scope for c in claims],
                    [c.meter for c in claims],
                    [c.limit for c in claims],
                    [req(c.amount) for c in claims],
                    wk,
                    wm,
                    [w.limit for w in windows],
                    ws,
                    [req(w.amount) for w in windows],
                    rid,
                    lease_seconds,
                    dump_held(held),
                ),
            )
        queue.execute(self._pg["state"], (*now, rid, scopes, wk, wm, ws))
        queue.execute("COMMIT")
        flushed = self._flushes_hold(windows, held)
        if flushed:
            queue.execute(self._pg["flush_hold"], (rid,))
        results = self._batch(queue)
        end = len(results) - flushed  # the COMMIT's place + 1
        inserted = bool(held and results[end - 3])
        if inserted:
            self._track_hold(rid)
        return inserted, results[end - 2] or []

    def _flushes_hold(self, windows: Sequence[WindowClaim], held: Sequence[Any]) -> bool:
        """Whether a hold is flushed before it is acknowledged: a durable hold on a window.

        A budget's lost hold is caught at the commit (the lost-hold guard refuses the record),
        but a window counts calls that already left: a hold a server crash loses would let
        every worker admit that call again inside the window (10 of 20 holds taken in a burst
        were gone after an immediate shutdown). The flush is its own transaction, sent in the
        same round trip, so the hold's locks are not held across it, and it writes only when
        the hold was written: a refusal costs no disk flush.
        """
        return self.durable and bool(windows) and bool(held)

    def _damaged(self, exc: BaseException) -> IntegrityError:
        """The error for a ledger row the server cannot read (its first line, never the DSN)."""
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return IntegrityError(
            f"the PostgreSQL store {self._store_id!r} holds a damaged ledger row (a total, "
            f"reservation or window event that is not what pollard wrote): {detail}",
            hint=LEDGER_HINT,
        )

    def _session_holds(self) -> set[str]:
        """Reservation ids held on this thread's current session (reset with the session).

        Kept on the session's `_Wire`, which a new connection replaces.
        """
        return self._wire().holds

    def _track_hold(self, rid: str, holds: set[str] | None = None) -> None:
        if holds is None:
            holds = self._session_holds()
        if len(holds) >= _MAX_TRACKED_HOLDS:
            holds.clear()  # released elsewhere; forgetting one only adds the guard's check
        holds.add(rid)

    def release(self, reservation_id: str) -> None:
        """Drop a reservation without charging (idempotent)."""
        wire: _Wire | None = getattr(self._local, "wire", None)
        if wire is not None:
            wire.holds.discard(reservation_id)
        super().release(reservation_id)

    def _explain(
        self, claims: Sequence[BudgetClaim], windows: Sequence[WindowClaim], state: list[Any]
    ) -> Shortfall | None:
        """The admission rule (`admit`, as on every store) over the figures of "state"."""
        reservations = []
        totals: dict[tuple[str, str], Decimal] = {}
        in_window: dict[int, Decimal] = {}
        for tag, a, b, c in state:
            if tag == "r":
                reservations.append(load_held(a))
            elif tag == "t":
                totals[a, b] = stored_amount(c, f"the ledger total of {b!r} on {a!r}")
            elif tag == "w":
                in_window[int(a) - 1] = stored_amount(c, "a window event's sum")
        index = {id(w): i for i, w in enumerate(windows)}
        return admit(
            claims,
            windows,
            settled=lambda cl: totals.get((cl.scope, cl.meter), ZERO),
            window_settled=lambda w: in_window.get(index[id(w)], ZERO),
            active=active_totals(reservations),
        )

    def claim(self, key: str, owner: str) -> str:
        """Claim ``key`` for ``owner`` unless already claimed; return the winning owner.

        Always flushed before it is acknowledged, whatever ``durable`` and the DSN say: a
        confirmed action runs once its claim is won, so a claim a crash could lose would let a
        second claimer run it again.
        """
        if not isinstance(key, str) or not isinstance(owner, str):
            raise TypeError("claim key and owner must be str")
        with self._transaction() as cur:
            cur.execute(_FLUSH_ON)
            cur.execute(self._sql["kv_init"], (f"claim:{key}", owner))
            cur.execute(self._sql["kv_get"], (f"claim:{key}",))
            row = cur.fetchone()
        assert row is not None
        return str(row[0])

    def put(self, node: Node) -> bool:
        """Store a node; True when it was new (see `pollard.Store.put`).

        A new node is one round trip (the commit statement without charges); a node that is
        already stored takes the shared path that compares identities and records a differing
        result.
        """
        check_new_node(node)
        try:
            if self._commit(node, (), {}, (), None):
                return True
        except self._psycopg.OperationalError as exc:
            raise self._lost(exc, "a write") from None
        return super().put(node)

    def commit(
        self,
        node: Node,
        *,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent] = (),
        reservation_id: str | None = None,
    ) -> bool:
        """Insert a node and settle its charges in one round trip; False if the id exists.

        When the connection is lost, the store reconnects once: a commit that landed (the node
        is stored and its reservation gone) returns True, one that did not is sent again, so
        a dispatch is charged exactly once. If the server does not answer, `PollardError`
        says so and the reservation stays held until its lease ends (the budget still counts
        it).
        """
        check_new_node(node)
        try:
            return self._commit(node, scopes, charges, windows, reservation_id)
        except self._psycopg.OperationalError as first:
            try:
                with self._cursor() as cur:
                    if self._exists(cur, node.id):
                        if reservation_id is None:
                            return True
                        cur.execute(self._pg["held"], (reservation_id,))
                        if cur.fetchone() is None:
                            return True  # landed: the commit released its reservation
                return self._commit(node, scopes, charges, windows, reservation_id)
            except (self._psycopg.OperationalError, PollardError):
                raise self._lost(
                    first,
                    "a commit",
                    hint="the server restarted or the network dropped and did not answer a "
                    "reconnect: the step ran but is not recorded yet. Its reservation stays held "
                    "(renewed; after a crash, until its lease ends) "
                    "and the runtime records the step before it admits another one",
                ) from None

    def _commit(
        self,
        node: Node,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent],
        reservation_id: str | None,
    ) -> bool:
        now = self._now()
        # The lost-hold guard: a hold taken on this very session cannot have been lost without
        # ending it (a server crash closes every session), and a commit after it is later in
        # the WAL, so the two survive a crash together or not at all. A hold from another
        # session (a reconnect, another thread) is checked by the statement itself.
        holds = self._session_holds()
        guard = None
        if reservation_id is not None and reservation_id not in holds:
            guard = reservation_id
        params = None
        if self._functions and not self.durable:  # a lone call: its own transaction
            params = self._commit_params(node, scopes, charges, windows, now, guard, reservation_id)
        if params is not None:
            queue = _Queue()
            queue.execute(self._commit_call, params)
            at = 0
        else:
            queue, at = self._commit_queue(
                node, scopes, charges, windows, now, guard, reservation_id
            )
        try:
            results = self._batch(queue)
        except self._psycopg.errors.InvalidTextRepresentation as exc:
            # The node's texts are bound as text and its ids as bytes the store made, so what
            # fails to parse is a stored ledger total the commit adds its charge to.
            raise self._damaged(exc) from None
        except self._psycopg.errors.UndefinedFunction:
            if not self._functions:
                raise
            self._functions = False  # dropped behind the store: the batch writes the same rows
            return self._commit(node, scopes, charges, windows, reservation_id)
        result = results[at - len(queue.items)]  # from the end: PREPAREs may lead the batch
        row = result[0] if result else None
        assert row is not None
        if self._functions:
            parent_ok, inserted, hold_ok = row
        else:
            parent_ok, inserted, hold_ok = row[0], row[1], row[5]
        if reservation_id is not None:
            holds.discard(reservation_id)
        if not inserted and not parent_ok:
            raise KeyError(f"parent {node.parent} of node {node.id} is not stored")
        if not inserted and not hold_ok:
            with self._cursor() as cur:
                if self._exists(cur, node.id):
                    return False
            raise PollardError(
                f"the reservation of step {node.id[:12]} in the PostgreSQL store "
                f"{self._store_id!r} no longer exists, so the step is not recorded",
                hint="the server crashed after the hold was acknowledged (or the lease ended "
                "while the store was unreachable): the step ran but its charges are not "
                "counted, so the budget cannot be overspent. Inspect the run (`pollard show`) "
                "and retry the step",
            )
        return bool(inserted)

    def _commit_params(
        self,
        node: Node,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent],
        now: tuple[Any, ...],
        guard: str | None,
        reservation_id: str | None,
    ) -> _Encoded | None:
        """The commit function's arguments as text parameters, or None for `_commit_queue`.

        The bytes `text_params` makes of `_commit_queue`'s values, without building them: for a
        node this process built (`Node.content_checked`: its ids and digest are lowercase hex,
        which is bytea's hex input as it is) with nothing to intern. A run's scopes and meters
        are the same on every step, so their arrays are encoded once.
        """
        payload_text, result_text = node.payload_text, node.result_text
        if (
            not node.content_checked
            or payload_text is None
            or (result_text is None and node.result is not None)
        ):
            return None
        payload = payload_text.encode("utf-8")
        result = None if result_text is None else result_text.encode("utf-8")
        meta = meta_text(node.meta).encode("utf-8")
        if self.intern_payloads and (
            len(payload) >= self.intern_threshold
            or (result is not None and len(result) >= self.intern_threshold)
        ):
            return None  # `_encode` decides what to intern
        if b"\x00" in payload or b"\x00" in meta or (result is not None and b"\x00" in result):
            return None  # never in JSON text; the driver refuses it with its usual error
        ids = [guard, reservation_id]
        if now:
            ids.append(now[0])
        texts = text_params(ids)
        if texts is None:
            return None
        ledger = self._ledger_arrays(scopes, charges)
        if ledger is None:
            return None
        if windows:
            events = text_params(
                (
                    [e.key for e in windows],
                    [e.meter for e in windows],
                    [str(e.amount) for e in windows],
                )
            )
            if events is None:
                return None
        else:
            events = _NO_EVENTS
        digest = node.result_digest
        params = [
            self._store_id_text,
            texts[2] if now else None,
            texts[0],
            b"\\x" + node.id.encode("ascii"),
            None if node.parent is None else b"\\x" + node.parent.encode("ascii"),
            _KIND_TEXT[node.kind],
            str(node.attempt).encode("ascii"),
            payload,
            result,
            None if digest is None else b"\\x" + digest.encode("ascii"),
            meta,
            b"0",
            *ledger,
            *events,
            texts[1],
        ]
        raw = functools.partial(
            self._commit_queue, node, scopes, charges, windows, now, guard, reservation_id
        )
        return _encoded(params, lambda: raw()[0].items[0][1])

    def _ledger_arrays(
        self, scopes: Sequence[str], charges: Mapping[str, Decimal]
    ) -> tuple[bytes | None, ...] | None:
        """The commit's ledger rows as three array parameters (scopes, meters, amounts).

        One row per (scope, meter), scopes outer, as `_commit_queue` lists them; the scope and
        meter arrays of a run repeat on every step, so they are encoded once.
        """
        if not charges:
            return _NO_ROWS
        key = (tuple(scopes), tuple(charges))
        cached = self._ledger_keys.get(key)
        if cached is None:
            unique = list(dict.fromkeys(scopes))
            arrays = text_params(
                ([s for s in unique for _ in charges], [m for _ in unique for m in charges])
            )
            if arrays is None:
                return None
            if len(self._ledger_keys) >= _MAX_ENCODED_CLAIMS:
                self._ledger_keys.clear()
            cached = self._ledger_keys[key] = (arrays[0], arrays[1], len(unique))
        amounts = text_params(([str(a) for a in charges.values()] * cached[2],))
        if amounts is None:
            return None
        return cached[0], cached[1], amounts[0]

    def _commit_queue(
        self,
        node: Node,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent],
        now: tuple[Any, ...],
        guard: str | None,
        reservation_id: str | None,
    ) -> tuple[_Queue, int]:
        """The commit's batch, and the index of its commit statement."""
        parent = None if node.parent is None else bytes.fromhex(node.parent)
        unique = list(dict.fromkeys(scopes))
        rows = [(s, m, str(a)) for s in unique for m, a in charges.items()] if charges else []
        events = [(e.key, e.meter, str(e.amount)) for e in windows]
        queue = _Queue()
        # No ledger lock: a reservation reads every figure in one statement (one snapshot), so
        # it sees this commit's node, charges and release all or not at all, which is the order
        # reserve-then-commit. Concurrent commits on one scope meet only on its total's row.
        blobs = _Queue()
        encoded = self._encode(node, blobs)
        # One transaction, acknowledged before its WAL flush so the ledger row's lock is never
        # held through a disk flush (the function turns the flush off itself). A lone function
        # call needs no BEGIN/COMMIT: it is its own transaction.
        explicit = bool(blobs.items) or self.durable or not self._functions
        if explicit:
            queue.execute("BEGIN")
            if not self._functions:  # the function turns the flush off for the transaction
                queue.execute(_NO_FLUSH)
        queue.items.extend(blobs.items)
        at = len(queue.items)
        if self._functions:
            queue.execute(
                self._commit_call,
                (
                    self._store_id,
                    *(now or (None,)),
                    guard,
                    *encoded,
                    [r[0] for r in rows],
                    [r[1] for r in rows],
                    [r[2] for r in rows],
                    [e[0] for e in events],
                    [e[1] for e in events],
                    [e[2] for e in events],
                    reservation_id,
                ),
            )
        else:
            queue.execute(
                self._pg["commit"],
                (
                    parent,
                    parent,
                    guard,
                    guard,
                    *encoded,
                    [r[0] for r in rows],
                    [r[1] for r in rows],
                    [r[2] for r in rows],
                    *now,
                    [e[0] for e in events],
                    [e[1] for e in events],
                    [e[2] for e in events],
                    reservation_id,
                ),
            )
        if explicit:
            queue.execute("COMMIT")
        if self.durable:
            queue.execute(_FLUSH)  # its own transaction: a durable step waits for the disk here
        return queue, at

    # -- schema --------------------------------------------------------------------------------

    def _init_schema(self) -> None:
        with self._guard("opening the store"):
            conn = self._connection()
            names = list(self._t.values())
            row = conn.execute(
                "SELECT count(to_regclass(name)), (SELECT bool_and(to_regproc(f) IS NOT NULL) "
                "FROM unnest(%s::text[]) AS f), to_regclass(%s) IS NOT NULL "
                "FROM unnest(%s::text[]) AS name",
                (list(FUNCTION_NAMES), self._t["kv"], names),
            ).fetchone()
        # An existing schema needs no DDL, so a role without CREATE privilege can open it.
        self._tables_exist = row is not None and row[0] == len(names)
        self._functions = row is not None and bool(row[1])
        self._kv_seen = row is not None and bool(row[2])
        # This store id's format, read before anything else (the 0.8 check, a migration, DDL):
        # a newer release's store is refused before this one writes or creates anything.
        self._has_version = False
        if self._kv_seen:
            with self._cursor() as cur:
                self._has_version = self._versions_checked(cur, check_schema_version)
        legacy = self._is_legacy()
        if self.read_only:
            if legacy:
                raise PollardError(
                    "the pollard_* tables in this PostgreSQL schema were written by pollard 0.8 "
                    "and are not migrated yet; a writable open (or `pollard migrate STORE`) "
                    "migrates them",
                    hint="open the store once without read_only=True: it is migrated in one "
                    "transaction, the 0.8 tables are kept as pollard08_*",
                )
            self._check_readable()
            return
        if legacy:
            self._migrate_legacy()
        super()._init_schema()
        if not self._functions:
            self._create_functions()

    def _is_legacy(self) -> bool:
        """Whether this schema's ``pollard_nodes`` is pollard 0.8's (it has no ``interned``)."""
        with self._cursor() as cur:
            return self._is_legacy_in(cur)

    def _migrate_legacy(self) -> None:
        """Migrate every store of pollard 0.8's tables to this layout, in one transaction.

        The 0.8 tables (and their indexes) are renamed to ``pollard08_*`` and kept, as the backup;
        a concurrent opener waits on the schema lock and then finds the migrated layout.
        """
        with self._transaction() as cur:
            cur.execute(self.dialect.schema_lock)
            if not self._is_legacy_in(cur):
                return
            renamed: dict[str, str] = {}
            for name in LEGACY_TABLES:
                old, new = f"pollard_{name}", f"{LEGACY_PREFIX}{name}"
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", (old,))
                found = cur.fetchone()
                if not (found and found[0]):
                    continue
                cur.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                    "AND tablename = %s",
                    (old,),
                )
                for (index,) in cur.fetchall():
                    target = LEGACY_PREFIX + index.removeprefix("pollard_")
                    cur.execute(f'ALTER INDEX "{index}" RENAME TO "{target}"')
                cur.execute(f"ALTER TABLE {old} RENAME TO {new}")
                renamed[name] = new
            for statement in SqlStore._schema(self):
                cur.execute(statement)
            ids: set[str] = set()
            for name in ("nodes", "budget_state", "window_events"):
                if name in renamed:
                    cur.execute(f"SELECT DISTINCT store_id FROM {renamed[name]}")
                    ids.update(row[0] for row in cur.fetchall())
            for store_id in sorted(ids):
                writer = _Statements(store_id, self.intern_payloads, self.intern_threshold)
                writer.copy_from(cur, renamed)
        self.migration_backup = ", ".join(sorted(renamed.values()))
        self._tables_exist = False  # the new tables exist now; _init_schema re-checks nothing

    def _is_legacy_in(self, cur: Any) -> bool:
        cur.execute(
            "SELECT count(*) FILTER (WHERE column_name = 'interned'), count(*) FROM "
            "information_schema.columns WHERE table_schema = current_schema() AND table_name = %s",
            (self._t["nodes"],),
        )
        row = cur.fetchone()
        return row is not None and row[1] > 0 and row[0] == 0

    def _create_functions(self) -> None:
        """Add the step functions to a new store or to one an older version created.

        A role that may not create them keeps the multi-statement batches (the same rows and
        round trips, more work per step on both sides).
        """
        try:
            with self._transaction() as cur:
                cur.execute(self.dialect.schema_lock)
                for name, function in zip(FUNCTION_NAMES, FUNCTIONS, strict=True):
                    cur.execute("SELECT to_regproc(%s) IS NOT NULL", (name,))
                    found = cur.fetchone()
                    if not (found and found[0]):
                        cur.execute(function)
            self._functions = True
        except self._psycopg.errors.InsufficientPrivilege:
            self._functions = False

    def _check_readable(self) -> None:
        """A read-only open never creates anything: the tables and the store id must exist."""
        if not self._tables_exist:
            raise PollardError(
                "no pollard store in this PostgreSQL database (its pollard_* tables do not exist)",
                hint="check the database name in the DSN (a DSN without one means libpq's "
                "default database); reading never creates a store",
            )
        if self._has_version:  # read (and checked) by _init_schema
            return
        with self._cursor() as cur:
            cur.execute(f"SELECT DISTINCT store_id FROM {self._t['kv']} LIMIT 100000")
            known = sorted(r[0] for r in cur.fetchall() if r[0])  # '': the schema-wide format
        close = difflib.get_close_matches(self._store_id, known, n=3, cutoff=0.6)
        if close:
            hint = f"did you mean {', '.join(map(repr, close))}? ({len(known)} store id(s) here)"
        elif known:
            hint = f"this database holds {len(known)} other store id(s); reading never creates one"
        else:
            hint = "this database has no pollard stores yet; reading never creates one"
        raise PollardError(f"no store {self._store_id!r} in this PostgreSQL database", hint=hint)

    def _schema(self) -> list[str]:
        return [] if self._tables_exist else super()._schema()

    def _where(self) -> str:
        return f"the PostgreSQL store {self._store_id!r}"

    def _versions_checked(self, cur: Any, check: Callable[[object, str], None]) -> bool:
        """Check this store id's format and the schema-wide one; whether the store id has one.

        One statement, two primary-key lookups: the store id's row, and the row of the store id
        ``''`` (which no store can have: see `KNOWN_SCHEMA_VERSIONS`), where a release that
        changes the tables every store id shares records their format, so a store id it never
        saw is refused too.
        """
        cur.execute(
            f"SELECT store_id, value FROM {self._t['kv']} WHERE store_id IN "
            f"('{self._store_id}', '') AND key = 'schema_version'"
        )
        found = dict(cur.fetchall())
        schema_wide = found.get("")
        if schema_wide is not None:
            check(schema_wide, f"the PostgreSQL schema of the store {self._store_id!r}")
        check(found.get(self._store_id), self._where())
        return self._store_id in found

    def _check_schema_version(self, cur: Any) -> None:
        if self._kv_exists(cur):
            self._versions_checked(cur, check_schema_version)

    def _kv_exists(self, cur: Any) -> bool:
        if self._kv_seen:  # a table pollard never drops
            return True
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (self._t["kv"],))
        row = cur.fetchone()
        return row is not None and bool(row[0])

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection this store opened (idempotent)."""
        self._closed = True
        with self._lock:
            connections, self._connections = self._connections, []
        pid = os.getpid()
        for owner, conn in connections:
            if owner == pid:
                conn.close()
        self._local = threading.local()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore(store_id={self._store_id!r})"


def is_legacy_schema(conninfo: str) -> bool:
    """Whether the schema ``conninfo`` searches holds pollard 0.8's tables (read only).

    Raises:
        ImportError: psycopg is not installed.
    """
    psycopg = _psycopg()
    with _connect(psycopg, conninfo) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE column_name = 'interned'), count(*) FROM "
            "information_schema.columns WHERE table_schema = current_schema() AND "
            "table_name = 'pollard_nodes'"
        ).fetchone()
    return row is not None and row[1] > 0 and row[0] == 0


def check_store_format(conninfo: str, store_id: str) -> None:
    """Refuse a store id whose stored format this release does not know (read only).

    Raises:
        PollardError: The store id holds a newer release's store format.
        ImportError: psycopg is not installed.
    """
    kv = f"{PostgresStore.dialect.prefix}kv"
    psycopg = _psycopg()
    with _connect(psycopg, conninfo) as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (kv,)).fetchone()
        if not (row and row[0]):
            return
        rows = dict(
            conn.execute(
                f"SELECT store_id, value FROM {kv} WHERE store_id IN (%s, '') "
                "AND key = 'schema_version'",
                (check_store_id(store_id),),
            ).fetchall()
        )
    if "" in rows:
        check_schema_version(rows[""], f"the PostgreSQL schema of the store {store_id!r}")
    check_schema_version(rows.get(store_id), f"the PostgreSQL store {store_id!r}")


class _Statements(SqlStore):
    """PostgreSQL statements and row encoding for one store id, without a connection.

    A migration writes every 0.8 store of the schema inside one transaction of the store being
    opened; this gives it each store id's statements (the id is a literal in them).
    """

    dialect = PostgresStore.dialect

    def __init__(self, store_id: str, intern_payloads: bool, intern_threshold: int) -> None:
        super().__init__(
            store_id=store_id,
            intern_payloads=intern_payloads,
            intern_threshold=intern_threshold,
            clock=time.time,
        )

    def copy_from(self, cur: Any, tables: dict[str, str]) -> int:
        """Copy this store id's rows of the renamed 0.8 ``tables`` through ``cur``."""
        cur.execute(self._sql["kv_init"], ("schema_version", SCHEMA_VERSION))
        cur.execute(self._sql["kv_init"], ("migrated_from", "pollard 0.8"))
        return copy_legacy(
            cur, tables, self._sql, self._encode, cur, store_id=self._store_id, param="%s"
        )

    def close(self) -> None:
        """Nothing to close."""
