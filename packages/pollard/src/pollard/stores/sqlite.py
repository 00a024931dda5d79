"""``SQLiteStore``: a file store (WAL) safe across threads and processes, with the full ledger."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pollard.errors import PollardError
from pollard.stores._sql import Dialect, SqlStore

__all__ = ["SQLiteStore"]


class SQLiteStore(SqlStore):
    """A SQLite file store: nodes, interned blobs and the budget ledger in one database.

    Writes run in ``BEGIN IMMEDIATE`` transactions, so reservations and settlements from many
    threads and processes on one host never overspend an exact budget. Each thread gets its own
    connection (WAL mode, ``synchronous=NORMAL``, 30 s busy timeout). Long payload and result
    strings are interned (stored once); node ids are identical with interning on or off.

    Args:
        path: The database file (created when missing, unless ``read_only``).
        store_id: The logical ledger namespace (informational for SQLite: one file is one store).
        intern_payloads: Intern strings of at least ``intern_threshold`` UTF-8 bytes.
        intern_threshold: The interning threshold in bytes.
        read_only: Open without write access (used for replay); writes raise `PollardError`.
        clock: The wall clock for leases and windows (injectable for tests).

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "runs.db"
        >>> with SQLiteStore(path) as store:
        ...     store.roots()
        []
    """

    dialect = Dialect()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        store_id: str = "default",
        intern_payloads: bool = True,
        intern_threshold: int = 1024,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            store_id=store_id,
            intern_payloads=intern_payloads,
            intern_threshold=intern_threshold,
            clock=clock,
        )
        self.path = Path(path)
        self.read_only = read_only
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        if read_only and not self.path.exists():
            raise FileNotFoundError(f"no SQLite store at {self.path}")
        if not read_only:
            self._init_schema()
        else:
            self._connection()

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise PollardError(f"the SQLite store {self.path} is closed")
            conn = self._connect()
            with self._lock:
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        if self.read_only:
            raise PollardError(
                f"the SQLite store {self.path} is open read-only",
                hint="open it without read_only=True to record",
            )
        conn = self._connection()
        cur = conn.cursor()
        cur.execute(self.dialect.begin)
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            cur.close()
            raise
        cur.execute("COMMIT")
        cur.close()

    def compact(self) -> int:
        """Sweep expired reservations and unreferenced blobs, then VACUUM; return blobs removed."""
        removed = super().compact()
        self._connection().execute("VACUUM")
        return removed

    def close(self) -> None:
        """Close every connection this store opened (idempotent)."""
        self._closed = True
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"
