"""``PostgresStore``: the shared store for worker teams and several hosts (``pollard[pg]``).

Requires psycopg 3 (``pip install "pollard[pg]"``); it is imported when a store is created, never
by ``import pollard``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pollard.errors import PollardError
from pollard.stores._sql import Dialect, SqlStore, check_store_id

__all__ = ["PostgresStore"]

_INSTALL = 'PostgresStore needs psycopg 3: pip install "pollard[pg]"'


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key, identical in every process."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


_SCHEMA_LOCK = _lock_key("pollard", "schema")


def _psycopg() -> Any:
    try:
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise ImportError(_INSTALL) from exc


class PostgresStore(SqlStore):
    """A PostgreSQL store: nodes, interned blobs and the budget ledger shared by many workers.

    Every table is prefixed ``pollard_`` and carries ``store_id`` in its primary key, so one
    database holds many independent stores (a logical namespace, not an access boundary).
    Workers that share a budget or a rate window must use the same database and ``store_id``.

    Reservations and settlements are transactions that take a transaction-scoped advisory lock
    per ledger scope, so exact step and request budgets hold across threads, processes and hosts.
    Leases and windows use the server's ``clock_timestamp()``, so hosts need not agree on time.
    Amounts are stored as exact decimal text. The first store to open a database creates the
    tables under an advisory lock (later opens need no CREATE privilege).

    Threads: the store is safe to share. Each thread gets its own autocommit connection, opened
    on first use and closed by `close`. A forked child opens its own connections.

    Args:
        conninfo: A libpq connection string or ``postgresql://`` URL. It is never printed or
            included in ``repr``.
        store_id: The logical store: 1-128 letters, digits, ``_``, ``.``, ``:`` or ``-``.
        intern_payloads: Intern strings of at least ``intern_threshold`` UTF-8 bytes.
        intern_threshold: The interning threshold in bytes.
        clock: A wall clock for leases and windows instead of the server's (for tests).

    Raises:
        ImportError: Naming ``pip install "pollard[pg]"`` when psycopg is missing.
        ValueError: If ``store_id`` is not a valid store id.

    Example:
        Share one step budget between every worker of a team::

            store = PostgresStore(os.environ["POLLARD_PG_DSN"], store_id="support-prod")
            with Runtime(store).run("triage", budget=Budget(steps=1_000)) as run:
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
    )

    def __init__(
        self,
        conninfo: str,
        *,
        store_id: str = "default",
        intern_payloads: bool = True,
        intern_threshold: int = 1024,
        clock: Callable[[], float] | None = None,
    ) -> None:
        check_store_id(store_id)
        self._psycopg = _psycopg()
        super().__init__(
            store_id=store_id,
            intern_payloads=intern_payloads,
            intern_threshold=intern_threshold,
            clock=self._server_clock if clock is None else clock,
        )
        self._conninfo = conninfo
        self._local = threading.local()
        self._connections: list[tuple[int, Any]] = []  # (process id, connection)
        self._lock = threading.Lock()
        self._closed = False
        self._tables_exist = False
        try:
            self._init_schema()
        except BaseException:
            self.close()
            raise

    # -- connections ---------------------------------------------------------------------------

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid != os.getpid():
            conn = None  # forked: a child never uses (or closes) its parent's connections
        if conn is None or conn.closed:
            if self._closed:
                raise PollardError(
                    f"the PostgreSQL store {self._store_id!r} is closed",
                    hint="open a new PostgresStore",
                )
            conn = self._psycopg.connect(self._conninfo, autocommit=True)
            pid = os.getpid()
            with self._lock:
                self._connections.append((pid, conn))
            self._local.conn, self._local.pid = conn, pid
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        conn = self._connection()
        with conn.transaction(), conn.cursor() as cur:
            yield cur

    def _server_clock(self) -> float:
        # Runs on the calling thread's connection, so inside a transaction it sees that clock.
        row = self._connection().execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
        return float(row[0])

    def _lock_ledger(self, cursor: Any, keys: Sequence[str]) -> None:
        # One transaction-scoped advisory lock per (store, scope), taken in a global order.
        for key in sorted({_lock_key("pollard", "ledger", self._store_id, k) for k in keys}):
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (key,))

    # -- schema --------------------------------------------------------------------------------

    def _init_schema(self) -> None:
        conn = self._connection()
        names = list(self._t.values())
        row = conn.execute(
            "SELECT count(to_regclass(name)) FROM unnest(%s::text[]) AS name", (names,)
        ).fetchone()
        # An existing schema needs no DDL, so a role without CREATE privilege can open it.
        self._tables_exist = row is not None and row[0] == len(names)
        super()._init_schema()

    def _schema(self) -> list[str]:
        return [] if self._tables_exist else super()._schema()

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
