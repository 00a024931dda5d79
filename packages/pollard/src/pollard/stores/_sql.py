"""The SQL core shared by `SQLiteStore` and a PostgreSQL store: schema, queries, ledger, interning.

A backend subclasses `SqlStore` and provides connections and transactions; every Store method
is written once here against DB-API cursors. `Dialect` carries the few differences (parameter
style, binary column type, table options, the statement that starts a write transaction).

Layout (``{p}`` is the table prefix)::

    {p}nodes(id BLOB PK, parent BLOB, kind INT, attempt INT, payload TEXT, result TEXT,
             result_digest BLOB, meta TEXT, interned INT)       + index on parent
    {p}blobs(digest BLOB PK, value TEXT)                      interned strings (>= threshold)
    {p}ledger(scope TEXT, meter TEXT, total TEXT, PK(scope, meter))   running totals
    {p}reservations(id TEXT PK, expires REAL, claims TEXT)    held amounts under a lease
    {p}window_events(wkey TEXT, meter TEXT, at REAL, amount TEXT)     sliding windows
    {p}kv(key TEXT PK, value TEXT)                            schema version

Ids and digests are stored as 32-byte binary values, kinds as small integers and amounts as exact
decimal text. Interning replaces string leaves of payloads and results of at least
``intern_threshold`` UTF-8 bytes by ``{"__pollard_ref": sha256}``, and stores the full 16-element
runs of long payload lists once (``{"__pollard_chunks": [digest, ...], "tail": [...]}``), so a
history that grows by appending shares its stored prefix. A node whose content already contains
either key is stored plainly. Reads rehydrate, so ids are identical with interning on or off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from pollard._core._canon import fast_loads, make_dumps
from pollard._core._ledger import (
    ZERO,
    Admission,
    BudgetClaim,
    Held,
    WindowClaim,
    WindowEvent,
    admit,
    held_amounts,
    in_range,
)
from pollard._core._node import Node, NodeKind, trusted_node
from pollard._core._noderef import NodeRef, node_refs
from pollard.errors import IntegrityError, PollardError
from pollard.stores._common import (
    check_new_node,
    collision,
    conflict_patch,
    ended_writers,
    holder_json,
    holds_of_gone,
    judge_append,
    lease_end,
    load_holder,
    load_queue,
    meta_text,
    sorted_roots,
)
from pollard.stores._host import liveness

__all__ = [
    "KIND_CODES",
    "KNOWN_SCHEMA_VERSIONS",
    "SCHEMA_VERSION",
    "Dialect",
    "SqlStore",
    "check_schema_version",
    "check_store_id",
]

REF_KEY = "__pollard_ref"
SCHEMA_VERSION = "pollard-sql/1"
"""The store format this release writes (``kv('schema_version')``, per store id in PostgreSQL)."""

KNOWN_SCHEMA_VERSIONS = frozenset({SCHEMA_VERSION})
"""Every store format this release opens: the one it writes and those it migrates from.

Every open (read-only or writable, SQLite or PostgreSQL, the command line's included) reads the
stored version first and refuses any other with `PollardError` before it writes or creates
anything, so a store a newer release changed is never written in a layout this release does not
know (pollard 0.8's layout, which has no such row, is recognised and migrated separately). A
future format bump sets `SCHEMA_VERSION` to its new name and adds the old one here (the versions it
migrates from on a writable open). Its migration rewrites the tables and writes the new version
inside that same transaction, under the schema lock (SQLite: the write lock), for every store id
whose rows it rewrote: until it commits every release opens the store as it was; once it has, the
older releases refuse it at open. Processes that opened the store before the migration keep their
connections, so writers must stop for a migration, as for pollard 0.8's.

PostgreSQL keeps the version per store id, and every store id of a schema shares the tables: a
change of the tables themselves also writes its version under the store id ``''`` (which no store
can have), which this release checks on every open too, so it refuses even a store id the newer
release never saw instead of creating it in tables it does not know.
"""

_UPGRADE_HINT = (
    "upgrade pollard to the release that wrote this store, in every process that opens it; "
    "a store is never migrated back to an older format"
)


def check_schema_version(found: object, where: str) -> None:
    """Refuse a stored format this release does not know (`KNOWN_SCHEMA_VERSIONS`).

    Args:
        found: The stored ``schema_version`` value, or ``None`` when the store has none yet (a
            new store, or another application's database: opened as before).
        where: The store, as messages name it (``the SQLite store runs.db``).

    Raises:
        PollardError: ``found`` is a version this release neither writes nor migrates from.
    """
    if found is None or found in KNOWN_SCHEMA_VERSIONS:
        return
    raise PollardError(
        f"{where} has store format {str(found)!r:.80}, which this pollard release does not know "
        f"(it writes {SCHEMA_VERSION!r}): a newer release wrote it; nothing was written",
        hint=_UPGRADE_HINT,
    )


_KIND_CODE = {
    NodeKind.ROOT: 0,
    NodeKind.MODEL_CALL: 1,
    NodeKind.TOOL_CALL: 2,
    NodeKind.NOTE: 3,
    NodeKind.REFUSAL: 4,
}
_CODE_KIND = {code: kind for kind, code in _KIND_CODE.items()}
KIND_CODES: Mapping[NodeKind, int] = _KIND_CODE
"""How each node kind is stored (``pollard_nodes.kind``), for stores that encode rows themselves."""
_PAYLOAD_INTERNED = 1
_RESULT_INTERNED = 2
_dumps = make_dumps()


def _append_row(text: str | None) -> tuple[str, int] | None:
    """An ``append:<node>`` kv value (``"<token> <writer>"``) as ``(writer, token)``."""
    if text is None:
        return None
    token_text, _, holder = text.partition(" ")
    return (holder, int(token_text)) if token_text.isdigit() else None


@dataclass(frozen=True)
class Dialect:
    """The differences between SQL backends."""

    param: str = "?"
    blob: str = "BLOB"
    real: str = "REAL"
    table_options: str = " WITHOUT ROWID"
    begin: str = "BEGIN IMMEDIATE"
    prefix: str = ""
    # A ``store_id`` column leads every table and primary key (one database, many stores); the
    # id is validated by `check_store_id` and written into the statements as a literal.
    namespaced: bool = False
    # Appended to the read-modify-write meta read (row lock where the backend needs one).
    for_update: str = ""
    # Run first in the schema transaction (serialises concurrent first-use DDL).
    schema_lock: str = ""
    # ``= ANY(array)`` takes a list parameter; otherwise ``IN (?, ...)`` is expanded per call.
    array_params: bool = False


_STORE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def check_store_id(store_id: str) -> str:
    """Validate a logical store id: 1-128 letters, digits, ``_ . : -``.

    Raises:
        ValueError: If the id is empty, too long or holds other characters.
    """
    if not isinstance(store_id, str) or not _STORE_ID.match(store_id):
        raise ValueError(
            f"store_id must be 1-128 characters of letters, digits, '_', '.', ':' or '-', "
            f"got {store_id!r}"
        )
    return store_id


CHUNK_KEY = "__pollard_chunks"
WALK_BATCH = 256  # nodes per read while walking
# A ref inside stored (compact, sorted) JSON text; a user string holding this text is escaped.
_REF_TEXT = re.compile(r'"__pollard_ref":"([0-9a-f]{64})"')
CHUNK = 16  # list elements per shared chunk
_CHUNK_DOMAIN = b"pollard/v1:chunk\n"


def _has_ref_key(value: Any) -> bool:
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if REF_KEY in current or CHUNK_KEY in current:
                return True
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return False


def _chunk_refs(items: list[Any], blobs: dict[bytes, str]) -> list[dict[str, str]]:
    """Store each full run of CHUNK items once; return refs to those chunk blobs."""
    refs = []
    for start in range(0, len(items) // CHUNK * CHUNK, CHUNK):
        text = _dumps(items[start : start + CHUNK])
        digest = hashlib.sha256(_CHUNK_DOMAIN + text.encode("utf-8")).digest()
        blobs[digest] = text
        refs.append({REF_KEY: digest.hex()})
    return refs


def _pack(items: list[Any], blobs: dict[bytes, str]) -> dict[str, Any]:
    """``{"__pollard_chunks": refs, "tail": rest}``; the refs list is packed again while long.

    Every level only appends when the list grows at its end, so earlier chunks (and chunks of
    chunk refs) are shared across steps and a history costs O(log n) refs per node.
    """
    top: dict[str, Any] = {
        CHUNK_KEY: _chunk_refs(items, blobs),
        "tail": items[len(items) // CHUNK * CHUNK :],
    }
    level = top
    while len(level[CHUNK_KEY]) >= CHUNK:
        refs = level[CHUNK_KEY]
        level[CHUNK_KEY] = {
            CHUNK_KEY: _chunk_refs(refs, blobs),
            "tail": refs[len(refs) // CHUNK * CHUNK :],
        }
        level = level[CHUNK_KEY]
    return top


def _chunk_lists(value: Any, threshold: int, blobs: dict[bytes, str]) -> tuple[Any, bool]:
    """Share the prefix of long lists: each full run of CHUNK elements is stored once.

    A list of at least CHUNK elements whose text is at least ``threshold`` bytes becomes
    ``{"__pollard_chunks": [ref, ...], "tail": [...]}``: the full chunks from the start go to the
    blob table (referenced like interned strings), the remaining elements stay inline, and a long
    list of chunk refs is packed the same way. A history that grows by appending keeps every
    earlier chunk, so repeated histories share their stored prefix. ``value`` must be a private
    copy (it is changed in place); lists are processed children first.
    """
    lists: list[tuple[Any, Any]] = []
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, dict):
            stack.extend((item, k) for k in item)
        elif isinstance(item, list):
            lists.append((container, key))
            stack.extend((item, i) for i in range(len(item)))
    changed = False
    for container, key in reversed(lists):  # children before their parents
        items = container[key]
        if len(items) < CHUNK or len(_dumps(items).encode("utf-8")) < threshold:
            continue
        container[key] = _pack(items, blobs)
        changed = True
    return root[0], changed


def _intern(value: Any, threshold: int, blobs: dict[bytes, str]) -> tuple[Any, bool]:
    """Return ``value`` with long string leaves replaced by refs (collected into ``blobs``)."""
    swapped = False

    def swap(leaf: Any) -> Any:
        # Strings holding NUL stay inline (JSON escapes them): PostgreSQL text cannot hold NUL.
        if isinstance(leaf, str) and len(leaf) * 4 >= threshold and "\x00" not in leaf:
            raw = leaf.encode("utf-8")
            if len(raw) >= threshold:
                digest = hashlib.sha256(raw).digest()
                blobs[digest] = leaf
                nonlocal swapped
                swapped = True
                return {REF_KEY: digest.hex()}
        return leaf

    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, dict):
            copy = dict(item)
            container[key] = copy
            stack.extend((copy, k) for k in copy)
        elif isinstance(item, list):
            copy_list = list(item)
            container[key] = copy_list
            stack.extend((copy_list, i) for i in range(len(copy_list)))
        else:
            container[key] = swap(item)
    return root[0], swapped


def _is_chunked(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) == 2
        and isinstance(value.get(CHUNK_KEY), (list, dict))
        and isinstance(value.get("tail"), list)
    )


def _refs(value: Any) -> set[str]:
    """Digests referenced directly by a stored text (string blobs and chunk blobs alike)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if len(current) == 1 and isinstance(current.get(REF_KEY), str):
                found.add(current[REF_KEY])
            else:
                stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return found


def _rehydrate(value: Any, load: Callable[[str], str]) -> Any:
    """Expand string refs and chunked lists (iteratively), loading blobs with ``load``.

    A chunked list is expanded once its chunk refs have become chunk texts: the refs part is
    rehydrated first (it may itself be chunked), then the texts are parsed and joined with the
    tail, and the new list is walked again for the refs it holds.
    """
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    waiting: set[int] = set()  # chunked dicts whose refs are being expanded
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, dict):
            if len(item) == 1 and isinstance(item.get(REF_KEY), str):
                container[key] = load(item[REF_KEY])
            elif _is_chunked(item):
                texts = item[CHUNK_KEY]
                if isinstance(texts, list) and all(isinstance(t, str) for t in texts):
                    expanded: list[Any] = []
                    for text in texts:
                        expanded.extend(fast_loads(text))
                    expanded.extend(item["tail"])
                    container[key] = expanded
                    stack.append((container, key))  # the elements may hold refs or chunks
                else:
                    if id(item) in waiting:
                        raise IntegrityError("a stored chunked list does not expand to chunks")
                    waiting.add(id(item))
                    stack.append((container, key))  # come back once the refs are texts
                    stack.append((item, CHUNK_KEY))
            else:
                stack.extend((item, k) for k in item)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
    return root[0]


def dump_held(held: Sequence[Held]) -> str:
    """A reservation's held amounts as stored: ``[[kind, key, meter, "amount"], ...]``."""
    return json.dumps([[kind, key, meter, str(amount)] for kind, key, meter, amount in held])


LEDGER_HINT = (
    "the store's ledger tables were changed outside pollard: restore the store from a backup "
    "(recompute_charges(store, root_id) sums what the nodes recorded)"
)


def stored_amount(text: object, where: str) -> Decimal:
    """A ledger amount as stored (a decimal text); a damaged one is an `IntegrityError`.

    Every ledger row pollard writes holds a finite decimal text. Anything else was written behind
    its back, and would otherwise surface as a bare ``decimal.InvalidOperation`` from a budget
    check (or a NaN that no comparison accepts).
    """
    try:
        amount = Decimal(text)  # type: ignore[arg-type]
    except (InvalidOperation, TypeError, ValueError):
        amount = None
    if amount is None or not amount.is_finite() or not in_range(amount):
        raise IntegrityError(
            f"{where} holds {text!r:.80}, which is not a decimal amount", hint=LEDGER_HINT
        )
    return amount


def load_held(text: str) -> list[Held]:
    """The held amounts of a stored reservation (see `dump_held`).

    Raises:
        IntegrityError: The stored text is not a list of ``[kind, key, meter, amount]``.
    """
    try:
        rows = json.loads(text)
        return [
            (kind, key, meter, stored_amount(amount, f"the reservation of {meter!r} on {key!r}"))
            for kind, key, meter, amount in rows
        ]
    except IntegrityError:
        raise
    except (TypeError, ValueError):
        raise IntegrityError(
            f"a stored budget reservation is damaged: {text!r:.80}", hint=LEDGER_HINT
        ) from None


@functools.lru_cache(maxsize=1024)
def _held_of(text: str) -> tuple[tuple[tuple[str, str, str], Decimal], ...]:
    # Every admission reads every live reservation, and a fan-out's reservations hold the same
    # amounts (the same text): parsing each once keeps a reserve O(1) in JSON work. Each amount
    # comes with its ``(kind, key, meter)`` slot, built once too.
    return tuple(((kind, key, meter), amount) for kind, key, meter, amount in load_held(text))


def _active_totals(texts: Iterable[str]) -> dict[tuple[str, str, str], Decimal]:
    """`active_totals` of stored reservations (the same sums, added in the same order)."""
    active: dict[tuple[str, str, str], Decimal] = {}
    get = active.get
    for text in texts:
        for slot, amount in _held_of(text):
            active[slot] = get(slot, ZERO) + amount
    return active


def _kind_of(code: Any, node_id: Any) -> NodeKind:
    kind = _CODE_KIND.get(code)
    if kind is None:
        raise IntegrityError(f"node {bytes(node_id).hex()} has an unknown kind code {code!r}")
    return kind


class SqlStore:
    """Store protocol implementation over a DB-API connection (subclassed per backend).

    Subclasses implement ``_connection()`` (a connection for the calling thread),
    ``_transaction()`` (a context manager yielding a cursor inside one write transaction) and
    ``close()``; they call ``_init_schema()`` once. Every read goes through ``_cursor()``, so a
    backend can override it (with ``_transaction()``) to track in-flight operations.
    """

    dialect = Dialect()

    def __init__(
        self,
        *,
        store_id: str = "default",
        intern_payloads: bool = True,
        intern_threshold: int = 1024,
        clock: Callable[[], float],
    ) -> None:
        if isinstance(intern_threshold, bool) or not isinstance(intern_threshold, int):
            raise TypeError("intern_threshold must be an int")
        if intern_threshold < 1:
            raise ValueError("intern_threshold must be >= 1")
        self._store_id = store_id
        self.intern_payloads = intern_payloads
        self.intern_threshold = intern_threshold
        self._clock = clock
        d = self.dialect
        p = d.prefix
        self._t = {
            name: f"{p}{name}"
            for name in ("nodes", "blobs", "ledger", "reservations", "window_events", "kv")
        }
        q = d.param
        t = self._t
        # Namespace fragments: empty for single-store backends, else the store_id predicate
        # (w: "... AND", w0: a whole WHERE clause), column (c) and value (v) prefixes.
        w = w0 = c = v = ""
        if d.namespaced:
            lit = f"'{check_store_id(store_id)}'"
            w, w0, c, v = (
                f"store_id = {lit} AND ",
                f" WHERE store_id = {lit}",
                "store_id, ",
                f"{lit}, ",
            )
        self._ns = (w, c, v)
        cols = "id, parent, kind, attempt, payload, result, result_digest, meta, interned"
        many = f"= ANY({q})" if d.array_params else "IN (?)"  # SQLite: expanded per call
        self._sql = {
            "get": f"SELECT {cols} FROM {t['nodes']} WHERE {w}id = {q}",
            "exists": f"SELECT 1 FROM {t['nodes']} WHERE {w}id = {q}",
            "pair": f"SELECT id FROM {t['nodes']} WHERE {w}id IN ({q}, {q})",
            "children": f"SELECT {cols} FROM {t['nodes']} WHERE {w}parent = {q}",
            "get_many": f"SELECT {cols} FROM {t['nodes']} WHERE {w}id {many}",
            "count": f"SELECT count(*) FROM {t['nodes']}{w0}",
            "links": f"SELECT id, parent FROM {t['nodes']}{w0}",
            "blob_many": f"SELECT digest, value FROM {t['blobs']} WHERE {w}digest {many}",
            # UNION (not UNION ALL) stops at a cycle a damaged store may hold.
            "subtree": f"WITH RECURSIVE sub(id, parent, kind) AS (SELECT id, parent, kind FROM "
            f"{t['nodes']} WHERE {w}id = {q} UNION SELECT n.id, n.parent, n.kind FROM "
            f"{t['nodes']} n JOIN sub ON {w.replace('store_id', 'n.store_id')}n.parent = sub.id) "
            "SELECT id, parent, kind FROM sub",
            # UNION stops at a cycle a damaged store may hold; the chain is rebuilt by links.
            "ancestry": f"WITH RECURSIVE up(id, parent) AS (SELECT id, parent FROM "
            f"{t['nodes']} WHERE {w}id = {q} UNION SELECT n.id, n.parent FROM {t['nodes']} n "
            f"JOIN up ON {w.replace('store_id', 'n.store_id')}n.id = up.parent) "
            "SELECT id, parent FROM up",
            "roots": f"SELECT {cols} FROM {t['nodes']} WHERE {w}parent IS NULL",
            "insert": f"INSERT INTO {t['nodes']} ({c}{cols}) VALUES "
            f"({v}{q}, {q}, {q}, {q}, {q}, {q}, {q}, {q}, {q}) ON CONFLICT DO NOTHING",
            "blob_put": f"INSERT INTO {t['blobs']} ({c}digest, value) VALUES ({v}{q}, {q}) "
            f"ON CONFLICT ({c}digest) DO NOTHING",
            "blob_get": f"SELECT value FROM {t['blobs']} WHERE {w}digest = {q}",
            "blob_all": f"SELECT digest FROM {t['blobs']}{w0}",
            "blob_delete": f"DELETE FROM {t['blobs']} WHERE {w}digest = {q}",
            "interned": f"SELECT payload, result, interned FROM {t['nodes']} WHERE {w}interned > 0",
            "meta": f"SELECT meta FROM {t['nodes']} WHERE {w}id = {q}{d.for_update}",
            "set_meta": f"UPDATE {t['nodes']} SET meta = {q} WHERE {w}id = {q}",
            "delete": f"DELETE FROM {t['nodes']} WHERE {w}id = {q}",
            "totals": f"SELECT meter, total FROM {t['ledger']} WHERE {w}scope = {q}",
            "upsert_total": f"INSERT INTO {t['ledger']} ({c}scope, meter, total) VALUES "
            f"({v}{q}, {q}, {q}) ON CONFLICT ({c}scope, meter) DO UPDATE SET total = "
            "excluded.total",
            "sweep": f"DELETE FROM {t['reservations']} WHERE {w}expires <= {q}",
            "active": f"SELECT claims FROM {t['reservations']}{w0}",
            "active_at": f"SELECT claims, expires <= {q} FROM {t['reservations']}{w0}",
            "hold": f"INSERT INTO {t['reservations']} ({c}id, expires, claims) VALUES "
            f"({v}{q}, {q}, {q})",
            "renew": f"UPDATE {t['reservations']} SET expires = {q} WHERE {w}id = {q}",
            "release": f"DELETE FROM {t['reservations']} WHERE {w}id = {q}",
            "window_trim": f"DELETE FROM {t['window_events']} WHERE {w}wkey = {q} AND "
            f"meter = {q} AND at <= {q}",
            "window_sum": f"SELECT amount FROM {t['window_events']} WHERE {w}wkey = {q} AND "
            f"meter = {q} AND at > {q}",
            "window_add": f"INSERT INTO {t['window_events']} ({c}wkey, meter, at, amount) "
            f"VALUES ({v}{q}, {q}, {q}, {q})",
            # verify's reads of every ledger row (or the totals of some scopes).
            "ledger_all": f"SELECT scope, meter, total FROM {t['ledger']}{w0}",
            "ledger_many": f"SELECT scope, meter, total FROM {t['ledger']} WHERE {w}scope {many}",
            "reservations_all": f"SELECT id, claims FROM {t['reservations']}{w0} ORDER BY id",
            "window_all": f"SELECT wkey, meter, at, amount FROM {t['window_events']}{w0} "
            "ORDER BY wkey, meter, at",
            "kv_init": f"INSERT INTO {t['kv']} ({c}key, value) VALUES ({v}{q}, {q}) "
            f"ON CONFLICT ({c}key) DO NOTHING",
            "kv_get": f"SELECT value FROM {t['kv']} WHERE {w}key = {q}",
            "kv_put": f"INSERT INTO {t['kv']} ({c}key, value) VALUES ({v}{q}, {q}) "
            f"ON CONFLICT ({c}key) DO UPDATE SET value = excluded.value",
            "kv_like": f"SELECT key, value FROM {t['kv']} WHERE {w}key LIKE {q}",
            "kv_delete": f"DELETE FROM {t['kv']} WHERE {w}key = {q}",
            "held_many": f"SELECT id FROM {t['reservations']} WHERE {w}id {many}",
        }

    # -- backend hooks -------------------------------------------------------------------------

    def _connection(self) -> Any:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        """A cursor for reads, closed on exit (a backend may also track the operation)."""
        cur = self._connection().cursor()
        try:
            yield cur
        finally:
            cur.close()

    def _check_open(self) -> None:
        """Raise `PollardError` when the store was closed (backends override)."""

    def _lock_ledger(self, cursor: Any, keys: Sequence[str]) -> None:
        """Serialise ledger writers for ``keys`` (SQLite: the write transaction already does)."""

    def close(self) -> None:
        """Close connections (implemented by backends)."""
        raise NotImplementedError

    def _schema(self) -> list[str]:
        d, t = self.dialect, self._t
        opts = d.table_options
        c = self._ns[1]
        n = "store_id TEXT NOT NULL, " if d.namespaced else ""
        return [
            f"CREATE TABLE IF NOT EXISTS {t['nodes']} ({n}id {d.blob} NOT NULL, parent {d.blob}, "
            f"kind INTEGER NOT NULL, attempt INTEGER NOT NULL, payload TEXT NOT NULL, "
            f"result TEXT, result_digest {d.blob}, meta TEXT NOT NULL, "
            f"interned INTEGER NOT NULL, PRIMARY KEY ({c}id)){opts}",
            f"CREATE INDEX IF NOT EXISTS {t['nodes']}_parent ON {t['nodes']} ({c}parent)",
            f"CREATE TABLE IF NOT EXISTS {t['blobs']} ({n}digest {d.blob} NOT NULL, "
            f"value TEXT NOT NULL, PRIMARY KEY ({c}digest)){opts}",
            f"CREATE TABLE IF NOT EXISTS {t['ledger']} ({n}scope TEXT NOT NULL, "
            f"meter TEXT NOT NULL, total TEXT NOT NULL, PRIMARY KEY ({c}scope, meter)){opts}",
            f"CREATE TABLE IF NOT EXISTS {t['reservations']} ({n}id TEXT NOT NULL, "
            f"expires {d.real} NOT NULL, claims TEXT NOT NULL, PRIMARY KEY ({c}id))",
            f"CREATE TABLE IF NOT EXISTS {t['window_events']} ({n}wkey TEXT NOT NULL, "
            f"meter TEXT NOT NULL, at {d.real} NOT NULL, amount TEXT NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS {t['window_events']}_key ON {t['window_events']} "
            f"({c}wkey, meter, at)",
            f"CREATE TABLE IF NOT EXISTS {t['kv']} ({n}key TEXT NOT NULL, value TEXT NOT NULL, "
            f"PRIMARY KEY ({c}key))",
        ]

    def _where(self) -> str:
        """The store as error messages name it (backends override)."""
        return "the store"

    def _kv_exists(self, cur: Any) -> bool:
        """Whether the ``kv`` table exists with pollard's columns (SQLite; PostgreSQL overrides)."""
        cur.execute(
            "SELECT count(*) FROM pragma_table_info(?) WHERE name IN ('key', 'value')",
            (self._t["kv"],),
        )
        row = cur.fetchone()
        return row is not None and row[0] == 2

    def _check_schema_version(self, cur: Any) -> None:
        """Refuse a store whose stored format this release does not know (read only)."""
        if not self._kv_exists(cur):
            return
        cur.execute(self._sql["kv_get"], ("schema_version",))
        row = cur.fetchone()
        check_schema_version(None if row is None else row[0], self._where())

    def _init_schema(self) -> None:
        with self._transaction() as cur:
            if self.dialect.schema_lock:
                cur.execute(self.dialect.schema_lock)
            # Under the schema lock (SQLite: the write lock) and before any DDL: a newer
            # release's migration committed either before this (refused here, nothing written)
            # or after it.
            self._check_schema_version(cur)
            for statement in self._schema():
                cur.execute(statement)
            cur.execute(self._sql["kv_init"], ("schema_version", SCHEMA_VERSION))

    # -- rows ----------------------------------------------------------------------------------

    @property
    def store_id(self) -> str:
        """The logical ledger namespace."""
        return self._store_id

    def _row_node(self, row: Sequence[Any], cur: Any, cache: dict[str, str] | None = None) -> Node:
        node_id, parent, kind, attempt, payload_text, r_text, digest, meta, interned = row
        try:
            payload = fast_loads(payload_text)
            result = None if r_text is None else fast_loads(r_text)
            meta_value = fast_loads(meta)
        except (ValueError, RecursionError) as exc:
            # pollard never writes such a row (invalid JSON, an integer of over 4,300 digits,
            # nesting deeper than the parser goes): name it, so `pollard verify` says where.
            at = bytes(node_id).hex()
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            if isinstance(exc, ValueError) and not isinstance(exc, json.JSONDecodeError):
                why = "a number too long to read"
            raise IntegrityError(
                f"a stored node holds invalid JSON ({why}): node {at}", at
            ) from None
        if not isinstance(meta_value, dict):
            at = bytes(node_id).hex()
            raise IntegrityError(
                f"a stored node's meta is not a JSON object ({type(meta_value).__name__}): "
                f"node {at}",
                at,
            )
        if interned:
            if cache is None:
                cache = {}

            def load(digest: str) -> str:
                if digest not in cache:
                    cache[digest] = self._load_blobs(cur, (digest,))[digest]
                return cache[digest]

            if interned & _PAYLOAD_INTERNED:
                payload = _rehydrate(payload, load)
                payload_text = _dumps(payload)
            if interned & _RESULT_INTERNED:
                result = _rehydrate(result, load)
                r_text = _dumps(result)
        return trusted_node(
            bytes(node_id).hex(),
            None if parent is None else bytes(parent).hex(),
            _kind_of(kind, node_id),
            attempt,
            payload,
            result,
            None if digest is None else bytes(digest).hex(),
            meta_value,
            payload_text,
            r_text,
        )

    def _load_blobs(self, cur: Any, digests: Iterable[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for digest in digests:
            cur.execute(self._sql["blob_get"], (bytes.fromhex(digest),))
            row = cur.fetchone()
            if row is None:
                raise IntegrityError(f"interned blob {digest} is missing from the store")
            out[digest] = row[0]
        return out

    def _encode(self, node: Node, cur: Any) -> tuple[Any, ...]:
        payload_text = node.payload_text if node.payload_text is not None else _dumps(node.payload)
        r_text = node.result_text
        if r_text is None and node.result is not None:
            r_text = _dumps(node.result)
        interned = 0
        if self.intern_payloads:
            threshold = self.intern_threshold
            blobs: dict[bytes, str] = {}
            if len(payload_text.encode("utf-8")) >= threshold and not _has_ref_key(node.payload):
                swapped, changed = _intern(node.payload, threshold, blobs)
                swapped, chunked = _chunk_lists(swapped, threshold, blobs)
                if changed or chunked:
                    payload_text = _dumps(swapped)
                    interned |= _PAYLOAD_INTERNED
            if (
                r_text is not None
                and len(r_text.encode("utf-8")) >= threshold
                and not _has_ref_key(node.result)
            ):
                swapped_result, changed = _intern(node.result, threshold, blobs)
                if changed:
                    r_text = _dumps(swapped_result)
                    interned |= _RESULT_INTERNED
            if blobs:
                cur.executemany(self._sql["blob_put"], sorted(blobs.items()))
        return (
            bytes.fromhex(node.id),
            None if node.parent is None else bytes.fromhex(node.parent),
            _KIND_CODE[node.kind],
            node.attempt,
            payload_text,
            r_text,
            None if node.result_digest is None else bytes.fromhex(node.result_digest),
            meta_text(node.meta),
            interned,
        )

    def _fetch(self, cur: Any, node_id: str) -> Node | None:
        try:
            key = bytes.fromhex(node_id)
        except (ValueError, TypeError):
            return None
        cur.execute(self._sql["get"], (key,))
        row = cur.fetchone()
        return None if row is None else self._row_node(row, cur)

    def _exists(self, cur: Any, node_id: str) -> bool:
        try:
            key = bytes.fromhex(node_id)
        except (ValueError, TypeError):
            return False
        cur.execute(self._sql["exists"], (key,))
        return cur.fetchone() is not None

    # -- nodes ---------------------------------------------------------------------------------

    def put(self, node: Node) -> bool:
        """Store a node; True when it was new (see `pollard.Store.put`)."""
        check_new_node(node)
        key = bytes.fromhex(node.id)
        parent = None if node.parent is None else bytes.fromhex(node.parent)
        with self._transaction() as cur:
            cur.execute(self._sql["pair"], (key, parent))  # one query: the node and its parent
            found = {bytes(row[0]) for row in cur.fetchall()}
            stored = self._fetch(cur, node.id) if key in found else None
            if stored is None:
                if parent is not None and parent not in found:
                    raise KeyError(f"parent {node.parent} of node {node.id} is not stored")
                cur.execute(self._sql["insert"], self._encode(node, cur))
                if cur.rowcount != 0:
                    return True
                stored = self._fetch(cur, node.id)  # a concurrent writer stored it first
                assert stored is not None
            if stored.identity() != node.identity():
                raise collision(node.id)
            if conflict_patch(stored.meta, stored.result_digest, node):
                cur.execute(self._sql["meta"], (key,))  # re-read under the row lock
                meta = json.loads(cur.fetchone()[0])
                patch = conflict_patch(meta, stored.result_digest, node)
                if patch:
                    meta.update(patch)
                    cur.execute(self._sql["set_meta"], (meta_text(meta), key))
            return False

    def get(self, node_id: str) -> Node:
        """Return a detached node (KeyError if missing)."""
        node = self.find(node_id)
        if node is None:
            raise KeyError(node_id)
        return node

    def find(self, node_id: str) -> Node | None:
        """Return a node, or None when it is not stored."""
        with self._cursor() as cur:
            return self._fetch(cur, node_id)

    def exists(self, node_id: str) -> bool:
        """Whether a node id is stored."""
        with self._cursor() as cur:
            return self._exists(cur, node_id)

    def children(self, node_id: str) -> list[NodeRef]:
        """Direct children sorted by (kind, id)."""
        with self._cursor() as cur:
            cur.execute(self._sql["children"], (bytes.fromhex(node_id),))
            nodes = [self._row_node(row, cur) for row in cur.fetchall()]
        nodes.sort(key=lambda n: (n.kind.value, n.id))
        return node_refs(nodes)

    def ancestry(self, node_id: str) -> list[str]:
        """Ids from ``node_id`` up to its tree's root (inclusive), nearest first, in one query.

        Raises:
            KeyError: If ``node_id`` (or a node on the way up) is not stored.
        """
        try:
            start = bytes.fromhex(node_id)
        except (ValueError, TypeError):
            raise KeyError(node_id) from None
        with self._cursor() as cur:
            cur.execute(self._sql["ancestry"], (start,))
            up = {bytes(i).hex(): None if p is None else bytes(p).hex() for i, p in cur.fetchall()}
        chain: list[str] = []
        current: str | None = node_id
        while current is not None:
            if current not in up:
                raise KeyError(current)
            if len(chain) > len(up):
                raise IntegrityError(f"the ancestry of node {node_id} holds a cycle")
            chain.append(current)
            current = up[current]
        return chain

    def update_meta(self, node_id: str, patch: Mapping[str, Any]) -> Node:
        """Shallow-merge ``patch`` into a node's meta and return the updated node."""
        meta_text(dict(patch))
        with self._transaction() as cur:
            cur.execute(self._sql["meta"], (bytes.fromhex(node_id),))
            row = cur.fetchone()
            if row is None:
                raise KeyError(node_id)
            meta = json.loads(row[0])
            meta.update(patch)
            cur.execute(self._sql["set_meta"], (meta_text(meta), bytes.fromhex(node_id)))
            node = self._fetch(cur, node_id)
        assert node is not None
        return node

    def walk(self, root_id: str) -> Iterator[Node]:
        """Preorder over the subtree at ``root_id`` (KeyError if missing), in set-based reads.

        One recursive query reads the subtree's shape (ids, parents, kinds); the nodes are then
        read in batches of `WALK_BATCH` ids, each batch with its interned blobs, so a walk costs
        ``2 + n / WALK_BATCH`` queries instead of one per node. No cursor is held across a
        yield: the consumer may pause (or close the store) between nodes. A node deleted after
        the shape was read is skipped.
        """
        try:
            start = bytes.fromhex(root_id)
        except (ValueError, TypeError):
            raise KeyError(root_id) from None
        with self._cursor() as cur:
            cur.execute(self._sql["subtree"], (start,))
            shape = [(bytes(i), None if p is None else bytes(p), k) for i, p, k in cur.fetchall()]
        if not any(node_id == start for node_id, _, _ in shape):
            raise KeyError(root_id)
        kids: dict[bytes, list[tuple[str, bytes]]] = {}
        for node_id, parent, code in shape:
            if parent is not None and node_id != start:
                kids.setdefault(parent, []).append((_kind_of(code, node_id).value, node_id))
        order: list[bytes] = []
        seen: set[bytes] = set()
        stack = [start]
        while stack:  # iterative preorder; ``seen`` guards a damaged store's cycles
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            order.append(current)
            below = kids.get(current)
            if below:
                below.sort(reverse=True)
                stack.extend(node_id for _, node_id in below)
        cache: dict[str, str] = {}
        for first in range(0, len(order), WALK_BATCH):
            batch = order[first : first + WALK_BATCH]
            with self._cursor() as cur:
                rows = self._rows(cur, batch)
                self._prefetch(cur, rows.values(), cache)
                nodes = [self._row_node(rows[k], cur, cache) for k in batch if k in rows]
            for node in nodes:
                self._check_open()  # a store closed during a paused walk refuses to go on
                yield node

    def _rows(self, cur: Any, keys: Sequence[bytes]) -> dict[bytes, Sequence[Any]]:
        """Full rows for many ids in one query, by id."""
        self._execute_any(cur, "get_many", keys)
        return {bytes(row[0]): row for row in cur.fetchall()}

    def _execute_any(self, cur: Any, name: str, keys: Sequence[Any]) -> None:
        """Run statement ``name``, whose ``many`` test matches any of ``keys``.

        PostgreSQL binds the keys as one array (``= ANY(%s)``); SQLite has no array parameter,
        so its ``IN (?)`` is expanded to one mark per key for this call.
        """
        if self.dialect.array_params:
            cur.execute(self._sql[name], (list(keys),))
        else:
            marks = ", ".join([self.dialect.param] * len(keys))
            cur.execute(self._sql[name].replace("(?)", f"({marks})"), tuple(keys))

    def _prefetch(self, cur: Any, rows: Iterable[Sequence[Any]], cache: dict[str, str]) -> None:
        """Load every blob the interned ``rows`` reference (and chunk blobs' own refs) at once."""
        wanted: set[str] = set()
        for row in rows:
            interned = row[8]
            if interned & _PAYLOAD_INTERNED:
                wanted.update(_REF_TEXT.findall(row[4]))
            if interned & _RESULT_INTERNED and row[5] is not None:
                wanted.update(_REF_TEXT.findall(row[5]))
        while wanted:
            missing = sorted(wanted - cache.keys())
            if not missing:
                return
            self._execute_any(cur, "blob_many", [bytes.fromhex(d) for d in missing])
            wanted = set()
            for digest, value in cur.fetchall():
                cache[bytes(digest).hex()] = value
                if value.startswith("["):  # a chunk blob: its elements may hold refs
                    wanted.update(_REF_TEXT.findall(value))

    def node_count(self) -> int:
        """How many nodes the store holds (``verify`` compares it with what the runs reach)."""
        with self._cursor() as cur:
            cur.execute(self._sql["count"])
            row = cur.fetchone()
        return int(row[0]) if row else 0

    def links(self) -> list[tuple[str, str | None]]:
        """Every stored ``(node id, parent id)``, sorted by id (for ancestry checks)."""
        with self._cursor() as cur:
            cur.execute(self._sql["links"])
            rows = [(bytes(i).hex(), None if p is None else bytes(p).hex()) for i, p in cur]
        rows.sort()
        return rows

    def roots(self) -> list[NodeRef]:
        """Root nodes sorted by (run label, id)."""
        with self._cursor() as cur:
            cur.execute(self._sql["roots"])
            nodes = [self._row_node(row, cur) for row in cur.fetchall()]
        return sorted_roots(nodes)

    # -- maintenance ---------------------------------------------------------------------------

    def drop_nodes(self, ids: Iterable[str]) -> int:
        """Delete exactly these nodes; return how many existed."""
        removed = 0
        with self._transaction() as cur:
            for node_id in list(ids):
                cur.execute(self._sql["delete"], (bytes.fromhex(node_id),))
                removed += max(cur.rowcount, 0)
        return removed

    def compact(self) -> int:
        """Sweep expired reservations, long-ended writer leases and unreferenced blobs.

        Returns:
            How many blobs were removed.
        """
        with self._transaction() as cur:
            now = self._clock()
            cur.execute(self._sql["sweep"], (now,))
            cur.execute(self._sql["kv_like"], ("writer:%",))
            leases = [(key[len("writer:") :], lease_end(end)) for key, end in cur.fetchall()]
            for writer in ended_writers(leases, now):
                cur.execute(self._sql["kv_delete"], (f"writer:{writer}",))
                cur.execute(self._sql["kv_delete"], (f"holder:{writer}",))
            cur.execute(self._sql["blob_all"])
            digests = {bytes(row[0]).hex() for row in cur.fetchall()}
            if not digests:
                return 0
            used: set[str] = set()
            cur.execute(self._sql["interned"])
            for payload_text, r_text, interned in cur.fetchall():
                if interned & _PAYLOAD_INTERNED:
                    used |= _refs(json.loads(payload_text))
                if interned & _RESULT_INTERNED and r_text is not None:
                    used |= _refs(json.loads(r_text))
            # Chunk blobs hold refs of their own: follow them (each blob is read once).
            pending = list(used)
            while pending:
                digest = pending.pop()
                cur.execute(self._sql["blob_get"], (bytes.fromhex(digest),))
                row = cur.fetchone()
                if row is None or not row[0].startswith("["):
                    continue
                try:
                    inner = _refs(json.loads(row[0]))
                except ValueError:
                    continue  # a string blob that merely starts with "["
                fresh = inner - used
                used |= fresh
                pending.extend(fresh)
            unused = digests - used
            cur.executemany(self._sql["blob_delete"], [(bytes.fromhex(d),) for d in sorted(unused)])
        return len(unused)

    # -- ledger --------------------------------------------------------------------------------

    def _totals(self, cur: Any, scope: str) -> dict[str, Decimal]:
        cur.execute(self._sql["totals"], (scope,))
        return {
            meter: stored_amount(total, f"the ledger total of {meter!r} for {scope}")
            for meter, total in cur.fetchall()
        }

    def reserve(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim] = (),
        *,
        lease_seconds: float,
        hold: bool = True,
        owner: str | None = None,
    ) -> Admission:
        """Atomically check claims and hold their positive amounts (see `pollard.Store`)."""
        if not claims and not windows:
            return Admission(None, None)
        with self._transaction() as cur:
            keys = sorted({c.scope for c in claims} | {w.key for w in windows})
            self._lock_ledger(cur, keys)
            now = self._clock()
            # Expired holds are swept only when there are any (SQLite compares, as the sweep).
            cur.execute(self._sql["active_at"], (now,))
            rows = cur.fetchall()
            if any(expired for _, expired in rows):
                cur.execute(self._sql["sweep"], (now,))
                rows = [row for row in rows if not row[1]]
            active = _active_totals(text for text, _ in rows)
            totals: dict[str, dict[str, Decimal]] = {}
            for scope in {c.scope for c in claims}:
                totals[scope] = self._totals(cur, scope)
            in_window: dict[tuple[str, str, float], Decimal] = {}
            for window in windows:
                cutoff = now - window.window_seconds
                cur.execute(self._sql["window_trim"], (window.key, window.meter, cutoff))
                cur.execute(self._sql["window_sum"], (window.key, window.meter, cutoff))
                in_window[window.key, window.meter, window.window_seconds] = sum(
                    (
                        stored_amount(row[0], f"a {window.meter!r} window event")
                        for row in cur.fetchall()
                    ),
                    ZERO,
                )
            short = admit(
                claims,
                windows,
                settled=lambda c: totals[c.scope].get(c.meter, ZERO),
                window_settled=lambda w: in_window[w.key, w.meter, w.window_seconds],
                active=active,
            )
            if short is not None:
                return Admission(None, short)
            held = held_amounts(claims, windows)
            if not hold or not held:
                return Admission(None, None)
            rid = uuid.uuid4().hex if owner is None else f"{owner}.{uuid.uuid4().hex}"
            cur.execute(self._sql["hold"], (rid, now + lease_seconds, dump_held(held)))
            return Admission(rid, None)

    def release_gone(self) -> int:
        """Release the live holds whose owner's process is provably gone (this host only)."""
        with self._transaction() as cur:
            cur.execute(self._sql["reservations_all"])
            ids = [str(rid) for rid, _ in cur.fetchall()]
            gone = holds_of_gone(ids, lambda who: load_holder(self._kv(cur, f"holder:{who}")))
            for rid in gone:
                cur.execute(self._sql["release"], (rid,))
        return len(gone)

    def renew(self, reservation_id: str, lease_seconds: float) -> bool:
        """Extend a live reservation's lease; False when it no longer exists."""
        with self._transaction() as cur:
            cur.execute(self._sql["renew"], (self._clock() + lease_seconds, reservation_id))
            return bool(cur.rowcount and cur.rowcount > 0)

    def release(self, reservation_id: str) -> None:
        """Drop a reservation without charging (idempotent)."""
        with self._transaction() as cur:
            cur.execute(self._sql["release"], (reservation_id,))

    def commit(
        self,
        node: Node,
        *,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent] = (),
        reservation_id: str | None = None,
    ) -> bool:
        """Insert a node and settle its charges in one transaction; False if the id exists."""
        check_new_node(node)
        key = bytes.fromhex(node.id)
        parent = None if node.parent is None else bytes.fromhex(node.parent)
        with self._transaction() as cur:
            cur.execute(self._sql["pair"], (key, parent))
            found = {bytes(row[0]) for row in cur.fetchall()}
            if key in found:
                return False
            if parent is not None and parent not in found:
                raise KeyError(f"parent {node.parent} of node {node.id} is not stored")
            cur.execute(self._sql["insert"], self._encode(node, cur))
            if cur.rowcount == 0:
                return False  # a concurrent writer stored this id first
            if charges or windows:
                self._lock_ledger(cur, sorted(set(scopes) | {e.key for e in windows}))
            if charges:
                rows = []
                for scope in scopes:
                    current = self._totals(cur, scope)
                    for meter, amount in charges.items():
                        total = current.get(meter, ZERO) + amount
                        rows.append((scope, meter, str(total)))
                cur.executemany(self._sql["upsert_total"], rows)
            if windows:
                now = self._clock()
                cur.executemany(
                    self._sql["window_add"],
                    [(e.key, e.meter, now, str(e.amount)) for e in windows],
                )
            if reservation_id is not None:
                cur.execute(self._sql["release"], (reservation_id,))
            return True

    def totals(self, scope: str) -> dict[str, Decimal]:
        """Running totals per meter for one scope."""
        with self._cursor() as cur:
            return self._totals(cur, scope)

    def damaged_ledger_rows(self, scopes: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """Ledger rows pollard could not have written, as ``(scope or "", message)`` pairs.

        Checks the running totals of ``scopes`` (of every scope when ``None``), and every
        reservation and window event: those belong to no one scope (every admission reads every
        live reservation, and a store-wide window's events are shared by all runs). Each row is
        parsed as the budget checks parse it (`stored_amount`, `load_held`), so a row reported
        here is one that makes a budgeted step raise `IntegrityError`, and a row that is not
        reported is one they accept. Only reads: an expired reservation is reported, not swept.

        Args:
            scopes: The budget scopes (node ids) whose totals are checked; ``None`` for all.

        Returns:
            One pair per damaged row, totals first (by scope and meter), then reservations (by
            id), then window events (by key, meter and time); empty for an undamaged ledger.
        """
        totals: list[Sequence[Any]] = []
        with self._cursor() as cur:
            if scopes is None:
                cur.execute(self._sql["ledger_all"])
                totals.extend(cur.fetchall())
            else:
                wanted = sorted(set(scopes))
                for first in range(0, len(wanted), WALK_BATCH):
                    self._execute_any(cur, "ledger_many", wanted[first : first + WALK_BATCH])
                    totals.extend(cur.fetchall())
            cur.execute(self._sql["reservations_all"])
            reservations = cur.fetchall()
            cur.execute(self._sql["window_all"])
            events = cur.fetchall()
        found: list[tuple[str, str]] = []
        for scope, meter, total in sorted(totals, key=lambda row: (str(row[0]), str(row[1]))):
            try:
                stored_amount(total, f"the ledger total of {meter!r} for {scope}")
            except IntegrityError as exc:
                found.append((str(scope), exc.message))
        for rid, claims in reservations:
            try:
                load_held(claims)
            except IntegrityError as exc:
                found.append(("", f"reservation {rid!r}: {exc.message}"))
        for wkey, meter, at, amount in events:
            try:
                stored_amount(amount, f"the {meter!r} window event at {at} of window {wkey}")
            except IntegrityError as exc:
                found.append(("", exc.message))
        return found

    # -- writers -------------------------------------------------------------------------------

    def lease_writer(
        self, writer: str, lease_seconds: float, *, holder: Mapping[str, Any] | None = None
    ) -> None:
        """Record that ``writer`` is alive until ``now + lease_seconds`` (0 ends it).

        ``holder`` (a JSON object: host, pid and the like) records the writer's process in a
        ``holder:<writer>`` kv row beside the lease's ``writer:<writer>`` row (whose value
        stays a number, as older readers parse it), so a process on the same host can take
        over a lease whose holder is provably gone.
        """
        expires = self._clock() + lease_seconds
        with self._transaction() as cur:
            cur.execute(self._sql["kv_put"], (f"writer:{writer}", repr(float(expires))))
            if holder is not None:
                cur.execute(self._sql["kv_put"], (f"holder:{writer}", holder_json(holder)))

    def _kv(self, cur: Any, key: str) -> str | None:
        cur.execute(self._sql["kv_get"], (key,))
        row = cur.fetchone()
        return None if row is None else str(row[0])

    def _lease_end(self, cur: Any, writer: str) -> float:
        return lease_end(self._kv(cur, f"writer:{writer}"))  # a damaged row holds nothing

    def _creator(self, node_id: str) -> str | None:
        node = self.find(node_id)
        found = None if node is None else node.meta.get("writer")
        return found if isinstance(found, str) else None

    def take_append(self, node_id: str, writer: str) -> int:
        """Make ``writer`` the one appending under ``node_id``; its fencing token, or 0.

        One write transaction (locked on the node's key), so two writers racing for a node
        see one winner. A holder whose lease is live but whose process is provably gone (same
        host, pid no longer running) is taken over at once.
        """
        creator = self._creator(node_id)
        key = f"append:{node_id}"
        with self._transaction() as cur:
            self._lock_ledger(cur, [key])
            now = self._clock()

            def alive(who: str) -> bool:
                if self._lease_end(cur, who) <= now:
                    return False
                # The holder's process is read only here, on the conflict path.
                return liveness(load_holder(self._kv(cur, f"holder:{who}"))) != "gone"

            held = _append_row(self._kv(cur, key))
            token, write = judge_append(held, creator, writer, alive)
            if write:
                cur.execute(self._sql["kv_put"], (key, f"{token} {writer}"))
        return token

    def append_holder(self, node_id: str) -> dict[str, Any] | None:
        """Who appends under ``node_id``: ``writer``, ``lease_left`` (seconds), ``holder``."""
        creator = self._creator(node_id)
        with self._transaction() as cur:
            held = _append_row(self._kv(cur, f"append:{node_id}"))
            who = held[0] if held is not None else creator
            if who is None:
                return None
            return {
                "writer": who,
                "lease_left": max(self._lease_end(cur, who) - self._clock(), 0.0),
                "holder": load_holder(self._kv(cur, f"holder:{who}")),
            }

    # -- queues --------------------------------------------------------------------------------

    def _queue_live(self, cur: Any, key: str, now: float) -> list[str]:
        """The queue's live reservations in arrival order; the row is pruned of the others."""
        cur.execute(self._sql["sweep"], (now,))
        stored = load_queue(self._kv(cur, key))
        if not stored:
            return []
        self._execute_any(cur, "held_many", stored)
        held = {str(row[0]) for row in cur.fetchall()}
        live = [rid for rid in stored if rid in held]
        if len(live) != len(stored):
            self._queue_write(cur, key, live)
        return live

    def _queue_write(self, cur: Any, key: str, ids: list[str]) -> None:
        if ids:
            cur.execute(self._sql["kv_put"], (key, json.dumps(ids)))
        else:
            cur.execute(self._sql["kv_delete"], (key,))

    def queue_join(self, queue: str, reservation_id: str) -> int | None:
        """Append a live reservation to the first-in, first-out ``queue`` (see `queue_position`).

        One write transaction (locked on the queue's key), so concurrent joiners on one
        database get one order. The queue is one ``kv`` row ``queue:<queue>`` listing
        reservation ids; a reservation leaves it when it is released or its lease ends.

        Returns:
            How many live reservations are ahead of it (0: it heads the queue), or None when
            the reservation is not live (released, or its lease ended).
        """
        key = f"queue:{queue}"
        with self._transaction() as cur:
            self._lock_ledger(cur, [key])
            live = self._queue_live(cur, key, self._clock())
            if reservation_id in live:
                return live.index(reservation_id)
            self._execute_any(cur, "held_many", [reservation_id])
            if cur.fetchone() is None:
                return None
            live.append(reservation_id)
            self._queue_write(cur, key, live)
            return len(live) - 1

    def queue_position(self, queue: str, reservation_id: str, lease_seconds: float) -> int | None:
        """Renew a queued reservation's lease and tell how many live ones are ahead of it.

        A waiter renews its place this way while it waits; one that stops (its process
        killed, its connection lost) drops out when its lease ends, and the ones behind it
        move up. Releasing the reservation (`release`) leaves the queue at once.

        Returns:
            How many live reservations joined ``queue`` before it and are still in it (0: it
            heads the queue), or None when it is no longer queued (released, or its lease
            ended first: join again, at the back).
        """
        key = f"queue:{queue}"
        with self._transaction() as cur:
            self._lock_ledger(cur, [key])
            now = self._clock()
            live = self._queue_live(cur, key, now)
            if reservation_id not in live:
                return None
            cur.execute(self._sql["renew"], (now + lease_seconds, reservation_id))
            return live.index(reservation_id)

    # -- claims --------------------------------------------------------------------------------

    def claim(self, key: str, owner: str) -> str:
        """Claim ``key`` for ``owner`` unless already claimed; return the winning owner.

        One insert-if-absent in one write transaction (a ``kv`` row ``claim:<key>``), so
        concurrent claimers on one database see exactly one winner.
        """
        if not isinstance(key, str) or not isinstance(owner, str):
            raise TypeError("claim key and owner must be str")
        with self._transaction() as cur:
            cur.execute(self._sql["kv_init"], (f"claim:{key}", owner))
            cur.execute(self._sql["kv_get"], (f"claim:{key}",))
            row = cur.fetchone()
        assert row is not None
        return str(row[0])
