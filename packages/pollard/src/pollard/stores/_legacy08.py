"""Reading stores written by pollard 0.8: detect their layout and copy them into this one.

pollard 0.8 stored ids as hex text, kinds as names, settled budget totals in ``budget_state`` and
interned long payload strings as ``{"__pollard_ref": sha256(value)}`` (with ``blob_literals``
naming the places where such a dict was the caller's own data). Its layout has no ``interned``
column, which is how it is recognised. The copy rebuilds every node from the stored content and
checks it against its id and result digest, so a migrated store holds exactly what 0.8 recorded:
the same ids, results (their exact text, so the same result digests and seals), meta (charges,
usage, ``pruned``, ...), settled ledger totals and window events. Held reservations are not
carried over: they are leases of processes that must have stopped before the upgrade, not spend.

Used by `SQLiteStore` (in place on the first writable open, or into a temporary copy for a
read-only open), `PostgresStore` (in place on the first writable open) and ``pollard migrate``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pollard._core._canon import fast_loads
from pollard._core._ledger import decimal_text, to_decimal
from pollard._core._node import Node, NodeKind, trusted_node
from pollard.errors import IntegrityError

__all__ = ["LEGACY_PREFIX", "LEGACY_TABLES", "copy_legacy", "legacy_node", "legacy_nodes"]

LEGACY_TABLES = (
    "nodes",
    "kv",
    "blobs",
    "blob_literals",
    "budget_state",
    "reservations",
    "window_events",
    "window_scopes",
)
"""The tables pollard 0.8 created (``window_scopes`` only in PostgreSQL, ``kv`` only in SQLite)."""

LEGACY_PREFIX = "pollard08_"
"""What a migrated store's 0.8 tables are renamed to while they are copied (PostgreSQL keeps
them, as the backup)."""

_REF = "__pollard_ref"


def _rehydrate(
    value: Any, blobs: Mapping[str, str], literal: set[tuple[Any, ...]], at: tuple[Any, ...]
) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(_REF), str) and at not in literal:
            digest = value[_REF]
            if digest in blobs:
                return blobs[digest]
        return {key: _rehydrate(item, blobs, literal, (*at, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [_rehydrate(item, blobs, literal, (*at, i)) for i, item in enumerate(value)]
    return value


def legacy_node(
    row: tuple[Any, ...], blobs: Mapping[str, str], literal: set[tuple[Any, ...]]
) -> Node:
    """Rebuild one 0.8 node row ``(id, parent, kind, attempt, payload, result, digest, meta)``.

    Raises:
        IntegrityError: The row does not match its id or result digest (the store was changed
            after 0.8 wrote it); nothing is migrated then.
    """
    node_id, parent, kind, attempt, payload_text, r_text, digest, meta = row
    try:
        payload = fast_loads(payload_text)
        result = None if r_text is None else fast_loads(r_text)
        meta_value = fast_loads(meta) if meta else {}
        node_kind = NodeKind(kind)
        if not isinstance(meta_value, dict):
            raise TypeError(f"its meta is a {type(meta_value).__name__}, not an object")
        attempt = int(attempt)
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        raise IntegrityError(
            f"pollard 0.8 node {node_id} cannot be read ({exc})", str(node_id)
        ) from None
    if literal or _REF in payload_text:
        payload = _rehydrate(payload, blobs, literal, ())
    node = trusted_node(
        str(node_id),
        None if parent is None else str(parent),
        node_kind,
        attempt,
        payload,
        result,
        None if digest is None else str(digest),
        meta_value,
        None,
        r_text,  # the exact text 0.8 digested: result digests and seals stay 0.8's
    )
    node.check()
    return node


def _where(store_id: str | None, param: str, *, first: bool = True) -> tuple[str, tuple[Any, ...]]:
    if store_id is None:
        return "", ()
    return (" WHERE " if first else " AND ") + f"store_id = {param}", (store_id,)


def legacy_nodes(
    cur: Any, tables: Mapping[str, str], store_id: str | None, param: str
) -> Iterator[Node]:
    """Every node of one 0.8 store, rebuilt and checked (see `legacy_node`)."""
    where, args = _where(store_id, param)
    blobs: dict[str, str] = {}
    if "blobs" in tables:
        cur.execute(f"SELECT digest, value FROM {tables['blobs']}{where}", args)
        blobs = {str(d): v for d, v in cur.fetchall()}
    literals: dict[str, set[tuple[Any, ...]]] = {}
    if "blob_literals" in tables:
        cur.execute(f"SELECT node_id, path FROM {tables['blob_literals']}{where}", args)
        for owner, path in cur.fetchall():
            literals.setdefault(str(owner), set()).add(tuple(json.loads(path)))
    cur.execute(
        "SELECT id, parent, kind, attempt, payload, result, result_digest, meta "
        f"FROM {tables['nodes']}{where} ORDER BY id",
        args,
    )
    for row in cur.fetchall():
        yield legacy_node(tuple(row), blobs, literals.get(str(row[0]), set()))


def copy_legacy(
    src: Any,
    tables: Mapping[str, str],
    sql: Mapping[str, str],
    encode: Callable[[Node, Any], tuple[Any, ...]],
    dst: Any,
    *,
    store_id: str | None = None,
    param: str = "?",
) -> int:
    """Copy one 0.8 store (nodes, settled totals, window events) into this version's layout.

    Args:
        src: A cursor that reads the 0.8 tables.
        tables: 0.8 table name -> the name it has now (only the tables that exist).
        sql: The target store's statements (``insert``, ``upsert_total``, ``window_add``).
        encode: The target store's row encoder (it interns long strings through ``dst``).
        dst: A cursor inside the target's transaction (may be ``src``).
        store_id: The 0.8 PostgreSQL store id to copy (``None``: a SQLite file, one store).
        param: The source's parameter marker.

    Returns:
        The number of nodes copied.

    Raises:
        IntegrityError: A 0.8 node does not match its content or a stored amount is damaged.
    """
    count = 0
    nodes = list(legacy_nodes(src, tables, store_id, param))  # read all before writing (dst=src)
    for node in nodes:
        dst.execute(sql["insert"], encode(node, dst))
        count += 1
    where, args = _where(store_id, param)
    if "budget_state" in tables:
        src.execute(f"SELECT scope_id, meter, settled FROM {tables['budget_state']}{where}", args)
        for scope, meter, settled in src.fetchall():
            dst.execute(sql["upsert_total"], (scope, meter, _amount(settled, scope)))
    if "window_events" in tables:
        src.execute(
            f"SELECT scope_id, meter, settled_at, amount FROM {tables['window_events']}{where} "
            "ORDER BY event_id",
            args,
        )
        for key, meter, at, amount in src.fetchall():
            dst.execute(sql["window_add"], (key, meter, float(at), _amount(amount, key)))
    return count


def _amount(value: object, owner: str) -> str:
    try:
        return decimal_text(to_decimal(str(value)))
    except (TypeError, ValueError) as exc:
        raise IntegrityError(
            f"pollard 0.8 ledger row of {owner} holds a damaged amount {value!r}: {exc}", owner
        ) from None
