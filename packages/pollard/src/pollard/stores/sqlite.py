"""``SQLiteStore``: a file store (WAL) safe across threads and processes, with the full ledger."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pollard.errors import PollardError
from pollard.stores._io_thread import IoThread, Outcome, run_each
from pollard.stores._legacy08 import LEGACY_PREFIX, LEGACY_TABLES, copy_legacy
from pollard.stores._sql import SCHEMA_VERSION, Dialect, SqlStore, check_schema_version

__all__ = ["SQLiteStore", "read_only_uri"]

_STORES: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()  # stores whose I/O thread may run


def _forget_io_threads() -> None:
    """In a forked child: the parent's I/O threads do not exist here (a new one starts)."""
    for store in list(_STORES):
        store._forget_io()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_io_threads)


def read_only_uri(path: Path) -> str:
    """A URI that opens ``path`` read-only without creating ``-wal``/``-shm`` files beside it.

    SQLite opens a WAL database read-only by creating its shared-memory and log files, which
    leaves empty side files next to a store that was only read. When no log or journal exists,
    every committed write is in the main file and no writer is attached, so the file is opened
    ``immutable`` (no side files, no locks); otherwise a writer is (or was) there and its log
    must be read, so the usual ``mode=ro`` is used. A ``-wal`` without its ``-shm`` (a copy or a
    backup of a store, never a live writer, which keeps both) would get a ``-shm`` created
    beside it: such a store is read from a private snapshot instead (see `_snapshot`).
    """
    base = path.resolve()
    wal, shm = Path(f"{base}-wal"), Path(f"{base}-shm")
    if wal.exists() and not shm.exists():
        # A file gone meanwhile means not a copy but a live writer between its files: one
        # opening (its -wal made, its -shm not yet) or closing (SQLite deletes the -wal as the
        # last connection ends). Its files are SQLite's to manage: read the store itself.
        with contextlib.suppress(FileNotFoundError):
            base = _snapshot(base, wal)
    uri = f"{base.as_uri()}?mode=ro"
    if not any(Path(f"{base}{suffix}").exists() for suffix in ("-wal", "-journal")):
        uri += "&immutable=1"
    return uri


_snapshots: dict[tuple[Path, int, int, int, int], Path] = {}
_snapshots_lock = threading.Lock()


def _snapshot(base: Path, wal: Path) -> Path:
    """The database and its ``-wal`` linked (or copied) into a private folder, read from there.

    The ``-shm`` a read-only open creates then lands in that folder, which is removed at exit;
    nothing is written beside the store. Hard links cost nothing; across file systems the two
    files are copied. A changed file gets a new snapshot.
    """
    db_stat, wal_stat = base.stat(), wal.stat()
    key = (base, db_stat.st_size, db_stat.st_mtime_ns, wal_stat.st_size, wal_stat.st_mtime_ns)
    with _snapshots_lock:
        found = _snapshots.get(key)
        if found is not None:
            return found
        folder = Path(tempfile.mkdtemp(prefix="pollard-read-"))
        if not _snapshots:
            atexit.register(_remove_snapshots)
        target = folder / base.name
        try:
            for source, copy in ((base, target), (wal, Path(f"{target}-wal"))):
                try:
                    os.link(source, copy)
                except OSError:
                    shutil.copyfile(source, copy)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # a file gone meanwhile: no snapshot
            raise
        _snapshots[key] = target
        return target


def _remove_snapshots() -> None:
    with _snapshots_lock:
        for target in _snapshots.values():
            shutil.rmtree(target.parent, ignore_errors=True)
        _snapshots.clear()


def has_pollard_tables(path: Path) -> bool:
    """Whether the SQLite file at ``path`` holds pollard's node table, read without writing.

    Raises:
        sqlite3.DatabaseError: The file cannot be read as a SQLite database.
    """
    connection = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'nodes'"
        return connection.execute(query).fetchone() is not None
    finally:
        connection.close()


def _refuse_special(path: Path) -> None:
    """Refuse a path that exists but is not a regular file, before SQLite opens it.

    SQLite would block forever reading a FIFO, and on a device (``/dev/null``) it writes its
    ``-journal`` file beside it. A missing path is left to the caller (created, or refused by
    a read-only open).

    Raises:
        sqlite3.OperationalError: A FIFO, socket, device or directory, or a symlink loop.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:  # a symlink loop, a name too long, a component that is a file
        raise _sqlite_error(f"cannot open {path}: {exc.strerror or exc}", _CANTOPEN) from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO, socket or device"
        raise _sqlite_error(f"{path} is not a regular file ({kind})", _CANTOPEN)


# How long a first open retries SQLITE_BUSY returned without a wait (see `_init_schema_racing`).
_OPEN_RACE_S = 30.0
# SQLite's result codes for the errors pollard raises in its stead (``sqlite3.SQLITE_*`` from
# Python 3.11): a file it cannot open, and one it cannot write.
_CANTOPEN = (14, "SQLITE_CANTOPEN")
_READONLY = (8, "SQLITE_READONLY")


def _sqlite_error(message: str, code: tuple[int, str]) -> sqlite3.OperationalError:
    """SQLite's error for ``message``, with the result code SQLite itself would have given it.

    Callers tell "cannot open" from "damaged" by that code (a shared quota tells an outage
    from a fault so), as they do for the errors SQLite raises.
    """
    error = sqlite3.OperationalError(message)
    # Attributes of sqlite3.Error from Python 3.11 (the typing targets 3.10).
    error.sqlite_errorcode, error.sqlite_errorname = code  # type: ignore[attr-defined]
    return error


_LEGACY_NODE_COLUMNS = frozenset(
    ("id", "parent", "kind", "attempt", "payload", "result", "result_digest", "meta")
)


def inspect_file(path: Path) -> tuple[bool, str | None]:
    """Whether ``path`` is a pollard 0.8 store, and its stored format (read without writing).

    Returns:
        ``(legacy, version)``: ``legacy`` for pollard 0.8's layout; ``version`` is the stored
        ``schema_version`` of this release's layout (``None`` for a missing or empty file, a 0.8
        store, another application's database or a file SQLite cannot read: the open reports
        those as before).
    """
    if not path.is_file() or path.stat().st_size == 0:
        return False, None
    connection = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(nodes)")}
        kv = {row[1] for row in connection.execute("PRAGMA table_info(kv)")}
        # 0.8's exact layout, so another application's "nodes" table is never taken for one.
        if columns == _LEGACY_NODE_COLUMNS and kv == {"k", "v"}:
            return True, None
        if not {"key", "value"} <= kv:
            return False, None
        row = connection.execute("SELECT value FROM kv WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError:
        return False, None  # not a database: the normal open reports it
    finally:
        connection.close()
    return False, None if row is None else row[0]


def is_legacy_store(path: Path) -> bool:
    """Whether ``path`` is a SQLite store written by pollard 0.8 (read without writing)."""
    return inspect_file(path)[0]


def check_file_format(path: Path) -> None:
    """Refuse a SQLite store whose format this release does not know (read without writing).

    Raises:
        PollardError: The file holds a newer release's store format.
    """
    check_schema_version(inspect_file(path)[1], f"the SQLite store {path}")


def _legacy_tables(cur: Any, prefix: str = "") -> dict[str, str]:
    cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    present = {row[0] for row in cur.fetchall()}
    return {name: f"{prefix}{name}" for name in LEGACY_TABLES if f"{prefix}{name}" in present}


def _legacy_version(cur: Any, kv: str | None) -> str:
    if kv is None:
        return "pollard 0.8"
    cur.execute(f"SELECT v FROM {kv} WHERE k = 'schema_version'")
    row = cur.fetchone()
    return f"pollard 0.8 (schema_version {row[0] if row else '?'})"


def backup_path(path: Path) -> Path:
    """The first free ``<file>.pollard-0.8.bak[.N]`` name beside ``path``."""
    candidate = Path(f"{path}.pollard-0.8.bak")
    n = 1
    while candidate.exists():
        candidate = Path(f"{path}.pollard-0.8.bak.{n}")
        n += 1
    return candidate


def copy_legacy_file(src_path: Path, store: SQLiteStore) -> int:
    """Copy the pollard 0.8 store at ``src_path`` (read only) into ``store`` in one transaction.

    Returns:
        The number of nodes copied.
    """
    return store._copy_legacy_file(src_path)


def _refuse_unwritable(path: Path) -> None:
    """Refuse to record into an existing file this process cannot write, before SQLite opens it.

    SQLite opens a write-protected file read-only, and a WAL database (every pollard store) still
    gets its ``-wal`` and ``-shm`` files created beside it before the first write fails, so a
    failed open for recording would leave them behind. The error is SQLite's own, so every caller
    maps it as before (`pollard.Runtime` to `PollardError` with the permissions hint). A folder
    that cannot be written already fails without side files: SQLite cannot create them there.

    Raises:
        sqlite3.OperationalError: The file exists and is not writable.
    """
    effective = os.access in os.supports_effective_ids
    if path.is_file() and not os.access(path, os.W_OK, effective_ids=effective):
        raise _sqlite_error(
            "attempt to write a readonly database (the file is not writable by this process)",
            _READONLY,
        )


class SQLiteStore(SqlStore):
    """A SQLite file store: nodes, interned blobs and the budget ledger in one database.

    Writes run in ``BEGIN IMMEDIATE`` transactions, so reservations and settlements from many
    threads and processes on one host never overspend an exact budget. Each thread gets its own
    connection (WAL mode, ``synchronous=NORMAL``, 30 s busy timeout). Long payload and result
    strings are interned (stored once); node ids are identical with interning on or off.

    `io_executor` is the store's own I/O thread, on one connection, where an `AsyncRuntime`
    runs its store I/O: operations queued while it is busy run as one batch in one transaction
    (group commit), each acknowledged only once the batch has committed.

    Args:
        path: The database file (created when missing, unless ``read_only``).
        store_id: The logical ledger namespace (informational for SQLite: one file is one store).
        intern_payloads: Intern strings of at least ``intern_threshold`` UTF-8 bytes.
        intern_threshold: The interning threshold in bytes.
        read_only: Open without write access (used for replay); writes raise `PollardError`. A
            read-only store never creates the file or ``-wal``/``-shm`` files beside it.
        clock: The wall clock for leases and windows (injectable for tests).

    Raises:
        sqlite3.OperationalError: Not ``read_only`` and the file exists but is not writable
            (refused before SQLite opens it, so no ``-wal``/``-shm`` files are left beside it),
            or the path is not a regular file (a FIFO would block, a device gets a journal).
        FileNotFoundError: ``read_only`` and there is no file.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "runs.db"
        >>> with SQLiteStore(path) as store:
        ...     store.roots()
        []
    """

    dialect = Dialect()
    _close_timeout: float = 60.0  # how long close() waits for other threads' operations
    # Operations of the I/O thread between two checkpoints (SQLite's own default is every 1,000
    # WAL pages; a governed step writes about four).
    _checkpoint_every: int = 256
    # Whether an idle I/O thread's operations may run at once on the event loop (_run_now); a
    # subclass whose operations wait on purpose (tests) keeps them all on the thread.
    _at_once: bool = True

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
        # In-flight operations: thread ident -> (nesting depth, the connection it uses). A
        # connection is only ever closed while no operation uses it.
        self._ops = threading.Condition()
        self._busy: dict[int, tuple[int, sqlite3.Connection | None]] = {}
        self._orphans: set[sqlite3.Connection] = set()  # closed by their thread when done
        self._closed = False
        self._io: IoThread | None = None
        self._io_conn: sqlite3.Connection | None = None  # the I/O thread's one connection
        self._io_ops = 0  # operations of the I/O thread since its last checkpoint
        self._checkpointer: threading.Thread | None = None
        # The event loop's connection for operations run at once (see _run_now), and its thread.
        self._now_conn: sqlite3.Connection | None = None
        self._now_thread: int | None = None
        _refuse_special(self.path)
        # What connections open: the file itself, or for a read-only open of a pollard 0.8
        # store a migrated copy in a temporary folder (reading never writes the store).
        self._data_path = self.path
        self._scratch: str | None = None
        # The backup copy kept when this open migrated a pollard 0.8 file in place.
        self.migration_backup: Path | None = None
        if read_only and not self.path.exists():
            raise FileNotFoundError(f"no SQLite store at {self.path}")
        legacy, version = inspect_file(self.path)
        # A newer release's store is refused before any writable connection exists (which would
        # create -wal/-shm files beside it); _init_schema checks again under the write lock.
        check_schema_version(version, self._where())
        if not read_only:
            if legacy:
                effective = os.access in os.supports_effective_ids
                if not os.access(self.path, os.W_OK, effective_ids=effective):
                    raise PollardError(
                        f"{self.path} was written by pollard 0.8 and is not writable, so it "
                        "cannot be migrated in place; copy it with "
                        f"`pollard migrate {self.path} NEW.db`",
                        hint="open it read-only to read it as it is, make the file writable, "
                        f"or copy it with `pollard migrate {self.path} NEW.db`",
                    )
            _refuse_unwritable(self.path)
            if legacy:
                self.migration_backup = self._migrate_in_place()
            self._init_schema_racing()
        else:
            if legacy:
                self._open_migrated_copy()
            with self._use():
                pass

    def _init_schema_racing(self) -> None:
        """Create the schema, retrying while another process creates the same new file.

        Two processes opening a new file at once (two workers starting on one quota file) can
        meet ``SQLITE_BUSY`` with no wait at all: one switches the file to WAL, which takes an
        exclusive lock, and SQLite answers the other at once rather than risk a deadlock, so
        the busy timeout never applies. Waiting a moment and trying again is all it takes;
        any other error is raised at once.
        """
        deadline = time.monotonic() + _OPEN_RACE_S
        pause = 0.002
        while True:
            try:
                self._init_schema()
                return
            except sqlite3.OperationalError as exc:
                code = getattr(exc, "sqlite_errorcode", None)
                busy = code & 0xFF == 5 if isinstance(code, int) else "locked" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _migrate_in_place(self) -> Path | None:
        """Migrate a pollard 0.8 file to this layout in one transaction, after a backup copy.

        Returns:
            The backup file (``None`` when another process migrated it first).
        """
        backup = backup_path(self.path)
        source = sqlite3.connect(read_only_uri(self.path), uri=True)
        try:
            target = sqlite3.connect(backup)
            try:
                source.backup(target)  # a consistent copy, the 0.8 WAL included
            finally:
                target.close()
        finally:
            source.close()
        try:
            return self._migrate_tables(backup)
        except BaseException:
            self.close()  # the constructor fails: nobody else will close its connection
            backup.unlink(missing_ok=True)  # nothing was migrated: the file is the backup
            raise

    def _migrate_tables(self, backup: Path) -> Path | None:
        with self._transaction() as cur:
            cur.execute("PRAGMA table_info(nodes)")
            if "interned" in {row[1] for row in cur.fetchall()}:
                backup.unlink()  # migrated meanwhile by another process
                return None
            tables = _legacy_tables(cur)
            version = _legacy_version(cur, tables.get("kv"))
            renamed = {}
            for name, table in tables.items():
                cur.execute(f"ALTER TABLE {table} RENAME TO {LEGACY_PREFIX}{name}")
                renamed[name] = f"{LEGACY_PREFIX}{name}"
            for statement in self._schema():
                cur.execute(statement)
            cur.execute(self._sql["kv_init"], ("schema_version", SCHEMA_VERSION))
            cur.execute(self._sql["kv_init"], ("migrated_from", version))
            copy_legacy(cur, renamed, self._sql, self._encode, cur)
            for table in renamed.values():
                cur.execute(f"DROP TABLE {table}")
        return backup

    def _copy_legacy_file(self, src_path: Path) -> int:
        source = sqlite3.connect(read_only_uri(src_path), uri=True)
        try:
            src = source.cursor()
            tables = _legacy_tables(src)
            version = _legacy_version(src, tables.get("kv"))
            with self._transaction() as cur:
                cur.execute(self._sql["kv_init"], ("migrated_from", version))
                return copy_legacy(src, tables, self._sql, self._encode, cur)
        finally:
            source.close()

    def _open_migrated_copy(self) -> None:
        """Read a pollard 0.8 file through a migrated copy in a temporary folder."""
        scratch = tempfile.mkdtemp(prefix="pollard-0.8-")
        self._scratch = scratch
        weakref.finalize(self, shutil.rmtree, scratch, True)
        copy = SQLiteStore(Path(scratch) / "migrated.db")
        try:
            copy_legacy_file(self.path, copy)
        finally:
            copy.close()
        self._data_path = copy.path

    def _where(self) -> str:
        return f"the SQLite store {self.path}"

    def _connect(self) -> sqlite3.Connection:
        # check_same_thread=False only so that close() may close connections of other threads;
        # each connection is used by the thread that opened it, and close() never closes one
        # while an operation is running on it (see _use).
        if self.read_only:
            conn = sqlite3.connect(
                read_only_uri(self._data_path),
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
        else:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            if not self.read_only:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            conn.close()  # not kept anywhere yet: closed here, not leaked
            raise
        return conn

    def _closed_error(self) -> PollardError:
        return PollardError(
            f"the SQLite store {self.path} is closed",
            hint="open a new SQLiteStore (or Runtime) on the file; a closed store refuses "
            "new operations",
        )

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            with self._ops:
                if self._closed:  # closed while this thread was connecting
                    conn.close()
                    raise self._closed_error()
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    @contextmanager
    def _use(self) -> Iterator[sqlite3.Connection]:
        """Run one operation on this thread's connection; close() waits for it to end."""
        me = threading.get_ident()
        with self._ops:
            if self._closed:
                raise self._closed_error()
            depth, conn = self._busy.get(me, (0, getattr(self._local, "conn", None)))
            self._busy[me] = (depth + 1, conn)
        try:
            if conn is None:
                conn = self._connection()  # a new connection: nobody else can close it yet
                with self._ops:
                    self._busy[me] = (depth + 1, conn)
            yield conn
        finally:
            orphan: sqlite3.Connection | None = None
            with self._ops:
                held = self._busy.pop(me)[1]
                if depth:
                    self._busy[me] = (depth, held)
                else:
                    if held is not None and held in self._orphans:
                        self._orphans.discard(held)
                        orphan = held
                    self._ops.notify_all()
            if orphan is not None:
                orphan.close()

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self._use() as conn:
            cur = conn.cursor()
            try:
                yield cur
            finally:
                cur.close()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        if self.read_only:
            raise PollardError(
                f"the SQLite store {self.path} is open read-only",
                hint="open it without read_only=True to record",
            )
        # Inside a batch of the I/O thread (see _run_batch) the operation is a savepoint of the
        # batch's transaction: it is undone alone when it fails, committed with the batch. The
        # batch already holds the connection in use (close() waits for it), so the operation
        # takes it as it is.
        grouped: sqlite3.Connection | None = getattr(self._local, "grouped", None)
        if grouped is not None:
            cur = grouped.cursor()
            cur.execute("SAVEPOINT operation")
            try:
                yield cur
            except BaseException:
                if grouped.in_transaction:  # SQLite may have rolled back already (I/O error)
                    cur.execute("ROLLBACK TO operation")
                    cur.execute("RELEASE operation")
                cur.close()
                raise
            cur.execute("RELEASE operation")
            cur.close()
            return
        with self._use() as conn:
            cur = conn.cursor()
            cur.execute(self.dialect.begin)
            try:
                yield cur
            except BaseException:
                if conn.in_transaction:  # SQLite may have rolled back already (an I/O error)
                    cur.execute("ROLLBACK")
                cur.close()
                raise
            cur.execute("COMMIT")
            cur.close()

    @property
    def io_executor(self) -> Executor:
        """The store's I/O thread: an `Executor` running operations on one connection, batched.

        What is queued while the thread is busy runs as one batch (at most 64 operations) in one
        ``BEGIN IMMEDIATE`` transaction: each operation's writes are a savepoint (a failing
        operation is undone alone and raises to its caller), and the batch commits once. Every
        operation's future completes only after that commit, so an acknowledged step is exactly
        as durable as one committed alone (WAL, ``synchronous=NORMAL``: it survives a crash or
        kill of the process, not of the OS). `AsyncRuntime` offloads its store I/O here (an
        operation submitted from an event loop while the thread is idle may run at once on the
        loop instead, in a transaction that never waits: see `IoThread.try_now`); a read-only
        store runs the batch's operations one by one. The thread exits after a second without
        work and starts again on demand; `close` runs what is queued first.

        Raises:
            PollardError: The store is closed.
        """
        with self._ops:
            if self._closed:
                raise self._closed_error()
            if self._io is None:
                _STORES.add(self)
                self._io = IoThread(
                    self._run_batch,
                    closed_error=self._closed_error,
                    on_start=self._bind_io_connection,
                    name=f"pollard-sqlite-io:{self.path.name}",
                    run_now=None if self.read_only else self._run_now,
                )
            return self._io

    def _forget_io(self) -> None:
        # The child must not use the parent's connection either: its thread opens its own.
        self._io = None
        self._io_conn = None
        self._checkpointer = None
        self._now_conn = None
        self._now_thread = None

    def _bind_io_connection(self) -> None:
        """Give the (new) I/O thread the store's one I/O connection (kept across restarts)."""
        with self._ops:
            conn, closed = self._io_conn, self._closed
        if closed:
            raise self._closed_error()
        if conn is None:
            conn = self._connect()
            if not self.read_only:
                # Its commits never checkpoint: a checkpoint (two fsyncs) would hold up every
                # step queued behind it; `_checkpoint_soon` runs them beside this thread.
                conn.execute("PRAGMA wal_autocheckpoint=0")
            with self._ops:
                if self._closed:
                    conn.close()
                    raise self._closed_error()
                self._connections.append(conn)
                self._io_conn = conn
        self._local.conn = conn

    def _run_batch(self, operations: Sequence[Callable[[], Any]]) -> list[Outcome]:
        """Run a batch of the I/O thread in one transaction; every outcome waits for its commit."""
        if self.read_only:
            return run_each(operations)
        self._io_ops += len(operations)
        if self._io_ops >= self._checkpoint_every:
            self._io_ops = 0
            self._checkpoint_soon()
        if len(operations) == 1:
            return run_each(operations)
        with self._use() as conn:  # close() waits for the whole batch
            conn.execute(self.dialect.begin)
            return self._commit_grouped(
                conn,
                operations,
                "a batch of operations",
                "the steps of the batch were not recorded; run them again",
            )

    def _commit_grouped(
        self,
        conn: sqlite3.Connection,
        operations: Sequence[Callable[[], Any]],
        what: str,
        hint: str,
    ) -> list[Outcome]:
        """Run ``operations`` as savepoints of the transaction open on ``conn``, then commit.

        When the commit fails, or an operation's error made SQLite roll the transaction back,
        nothing is stored: every outcome becomes that failure (one that succeeded inside did not).
        """
        self._local.grouped = conn
        try:
            outcomes = run_each(operations)
        finally:
            self._local.grouped = None
        try:
            if not conn.in_transaction:
                raise PollardError(f"the SQLite store {self.path} rolled back {what}", hint=hint)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return [(False, exc if ok else value) for ok, value in outcomes]
        return outcomes

    def _now_connection(self, me: int) -> sqlite3.Connection | None:
        """The connection of operations run at once, bound to the first thread that asks."""
        if self._now_thread is not None:
            return self._now_conn if self._now_thread == me else None
        conn = self._connect()
        # Never wait: a write lock taken elsewhere sends the operation to the I/O thread, and
        # checkpoints run beside the I/O thread (`_checkpoint_soon`), never in these commits.
        conn.execute("PRAGMA busy_timeout=0")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        with self._ops:
            if self._closed or self._now_thread is not None:
                conn.close()
                return None
            self._connections.append(conn)
            self._now_conn, self._now_thread = conn, me
        return conn

    def _run_now(self, operation: Callable[[], Any]) -> Outcome | None:
        """Run an operation of the idle I/O thread at once on the calling (event loop's) thread.

        A handoff to the I/O thread and back costs two thread wake-ups on the step's path. When
        the thread has nothing queued, the operation runs here instead, in its own transaction
        on a connection that never waits: ``BEGIN IMMEDIATE`` with no busy timeout (when another
        connection holds the write lock, None is returned and the operation is queued for the
        thread as before), and commits that never checkpoint. So the event loop never waits
        for a lock, a sync or a checkpoint; the commit is as durable as the thread's (WAL,
        ``synchronous=NORMAL``).

        Returns:
            The operation's `Outcome`, or None when it was not run (queue it).
        """
        if not self._at_once:
            return None
        me = threading.get_ident()
        try:
            conn = self._now_connection(me)
        except sqlite3.Error:
            return None
        if conn is None:
            return None
        with self._ops:
            if self._closed or me in self._busy:  # closing, or inside an operation already
                return None
            self._busy[me] = (1, conn)  # nested store calls use this connection (see _use)
        try:
            try:
                conn.execute(self.dialect.begin)
            except sqlite3.OperationalError:  # the write lock is taken: queue it
                return None
            ((ok, value),) = self._commit_grouped(
                conn, [operation], "an operation", "the step was not recorded; run it again"
            )
            self._io_ops += 1
            if self._io_ops >= self._checkpoint_every:
                self._io_ops = 0
                self._checkpoint_soon()
            return (ok, value)
        finally:
            with self._ops:
                self._busy.pop(me, None)
                self._ops.notify_all()

    def _checkpoint_soon(self) -> None:
        """Checkpoint the WAL in a thread of its own (one at a time), beside the I/O thread.

        WAL mode lets a checkpoint copy committed pages into the database while writers go on,
        so the I/O thread keeps committing steps meanwhile. What is durable when is unchanged:
        a commit is in the WAL either way (``synchronous=NORMAL``), and the checkpoint syncs
        the WAL before copying it, as SQLite's automatic one does.
        """
        with self._ops:
            running = self._checkpointer
            if self._closed or (running is not None and running.is_alive()):
                return
            thread = threading.Thread(
                target=self._checkpoint,
                name=f"pollard-sqlite-checkpoint:{self.path.name}",
                daemon=True,
            )
            self._checkpointer = thread
        thread.start()

    def _checkpoint(self) -> None:
        try:
            conn = self._connect()
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                conn.close()
        except sqlite3.Error:
            pass  # the next checkpoint (or the last connection's close) copies those pages

    def compact(self) -> int:
        """Sweep expired reservations and unreferenced blobs, then VACUUM; return blobs removed.

        Raises:
            PollardError: Called inside a batch of `io_executor` (VACUUM needs its own
                transaction); maintenance is offline: call it directly.
        """
        if getattr(self._local, "grouped", None) is not None:
            raise PollardError(
                "compact() cannot run inside a batch of the store's I/O thread",
                hint="call store.compact() directly, while no runtime is writing",
            )
        with self._use() as conn:
            removed = super().compact()
            conn.execute("VACUUM")
        return removed

    def close(self) -> None:
        """Close every connection this store opened (idempotent).

        Operations running in other threads (for example store I/O an `AsyncRuntime` offloaded
        to a worker thread) are waited for, up to a minute; a connection still in use after that is
        closed by its thread when its operation ends, never under it. Any later operation raises
        `PollardError`.
        """
        with self._ops:
            io = self._io
        if io is not None:  # run what is queued for the I/O thread first (its steps settle)
            io.shutdown(wait=True, timeout=self._close_timeout)
        with self._ops:
            checkpointer = self._checkpointer
        if checkpointer is not None and checkpointer is not threading.current_thread():
            checkpointer.join(self._close_timeout)
        me = threading.get_ident()
        with self._ops:
            self._closed = True
            self._ops.wait_for(
                lambda: all(ident == me for ident in self._busy), timeout=self._close_timeout
            )
            in_use = {conn for _, conn in self._busy.values() if conn is not None}
            connections, self._connections = self._connections, []
            idle = [conn for conn in connections if conn not in in_use]
            self._orphans.update(conn for conn in connections if conn in in_use)
        for conn in idle:
            conn.close()
        self._local = threading.local()
        if self._scratch is not None and not self._orphans:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"
