"""``HashRopeStore``: an in-process store whose history is an append-only op log in a hashrope rope.

Requires the ``hashrope`` extra (``pip install "pollard[hashrope]"``).
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pollard._core._ledger import WindowEvent
from pollard._core._node import Node
from pollard.errors import IntegrityError
from pollard.stores.memory import MemoryStore

__all__ = ["HashRopeStore"]

_INSTALL = 'HashRopeStore needs the hashrope extra: pip install "pollard[hashrope]"'
_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def _hashrope() -> Any:
    try:
        return importlib.import_module("hashrope")
    except ImportError as exc:
        raise ImportError(_INSTALL) from exc


def _node_record(node: Node) -> dict[str, Any]:
    return {
        "id": node.id,
        "parent": node.parent,
        "kind": node.kind.value,
        "attempt": node.attempt,
        "payload": node.payload,
        "result": node.result,
        "meta": node.meta,
    }


def _node_from(record: Mapping[str, Any]) -> Node:
    node = Node.create(
        record["kind"],
        record["parent"],
        record["payload"],
        attempt=record["attempt"],
        result=record["result"],
        meta=dict(record["meta"]),
    )
    if node.id != record["id"]:
        raise IntegrityError(f"op log node {record['id']} does not match its content", node.id)
    return node


class HashRopeStore(MemoryStore):
    """An in-process store that keeps an append-only operation log inside a hashrope rope.

    Every write (node puts, settled commits with their ledger charges, meta patches, drops) is
    appended to the log as one JSON line; the current state lives in memory as in `MemoryStore`.
    ``to_bytes()`` returns the log, and ``HashRopeStore(data)`` rebuilds the store from it
    (verifying every node id). It is not a multi-writer database: reservations and rate windows
    are process-local and are not logged. ``compact()`` (offline garbage collection) rewrites
    the log as one put per live node plus a ledger snapshot.

    Args:
        data: A log produced by ``to_bytes()`` (empty for a new store).
        store_id: The logical ledger namespace.
        clock: The wall clock for leases and windows.

    Raises:
        ImportError: Naming ``pip install "pollard[hashrope]"`` when hashrope is missing.
        IntegrityError: When ``data`` holds a node that does not match its id.
    """

    def __init__(
        self,
        data: bytes = b"",
        *,
        store_id: str = "default",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(store_id=store_id, clock=clock)
        hr = _hashrope()
        self._hr = hr
        self._hash = hr.PolynomialHash()
        self._rope: Any = None
        self._replaying = True
        try:
            for number, line in enumerate(bytes(data).splitlines(), start=1):
                if line.strip():
                    self._load_line(number, line)
        finally:
            self._replaying = False
        if data:
            self._rope = hr.rope_from_bytes(bytes(data), self._hash)

    def _load_line(self, number: int, line: bytes) -> None:
        """Apply one logged operation; a line that is not one is an `IntegrityError`."""
        try:
            op = json.loads(line)
            if not isinstance(op, dict):
                raise TypeError("an operation is a JSON object")
            self._apply(op)
        except IntegrityError:
            raise
        except (
            ArithmeticError,
            AttributeError,
            KeyError,
            TypeError,
            UnicodeError,
            ValueError,
        ) as exc:
            raise IntegrityError(
                f"op log line {number} is not a valid operation ({type(exc).__name__}: {exc})"
            ) from None

    # -- log -----------------------------------------------------------------------------------

    def _append(self, op: Mapping[str, Any]) -> None:
        if self._replaying:
            return
        line = (_dumps(op) + "\n").encode("utf-8")
        leaf = self._hr.rope_from_bytes(line, self._hash)
        self._rope = (
            leaf if self._rope is None else self._hr.rope_concat(self._rope, leaf, self._hash)
        )

    def _apply(self, op: Mapping[str, Any]) -> None:
        kind = op.get("op")
        if kind == "put":
            MemoryStore.put(self, _node_from(op["node"]))
        elif kind == "commit":
            MemoryStore.commit(
                self,
                _node_from(op["node"]),
                scopes=list(op["scopes"]),
                charges={name: Decimal(v) for name, v in op["charges"].items()},
            )
        elif kind == "meta":
            MemoryStore.update_meta(self, op["id"], op["patch"])
        elif kind == "drop":
            MemoryStore.drop_nodes(self, op["ids"])
        elif kind == "claim":
            MemoryStore.claim(self, op["key"], op["owner"])
        elif kind == "totals":
            with self._lock:
                self._totals[op["scope"]] = {k: Decimal(v) for k, v in op["totals"].items()}
        else:
            raise IntegrityError(f"unknown op {kind!r} in the hashrope log")

    def to_bytes(self) -> bytes:
        """Return the op log (UTF-8 JSON lines)."""
        with self._lock:
            return b"" if self._rope is None else bytes(self._hr.rope_to_bytes(self._rope))

    def content_hash(self) -> int:
        """Return the rope's polynomial hash of the log (change detection, not cryptographic)."""
        with self._lock:
            return 0 if self._rope is None else int(self._hr.rope_hash(self._rope))

    def validate_log(self) -> int:
        """Rebuild a store from the log, check it matches this one and return the op count.

        Raises:
            IntegrityError: When a logged node does not match its id or the replayed state
                differs from the live state.
        """
        data = self.to_bytes()
        other = HashRopeStore(data, store_id=self.store_id)
        if other._node_ids() != self._node_ids():
            raise IntegrityError("the hashrope log does not rebuild the live nodes")
        return sum(1 for line in data.splitlines() if line.strip())

    def _node_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._rows)

    # -- writes (logged) -----------------------------------------------------------------------

    def put(self, node: Node) -> bool:
        """Store a node and log it; True when it was new."""
        with self._lock:
            before = self._rows.get(node.id)
            meta_before = None if before is None else before.meta_text
            new = super().put(node)
            if new:
                self._append({"op": "put", "node": _node_record(self.get(node.id))})
            elif before is not None and before.meta_text != meta_before:
                self._append({"op": "meta", "id": node.id, "patch": self.get(node.id).meta})
            return new

    def commit(
        self,
        node: Node,
        *,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent] = (),
        reservation_id: str | None = None,
    ) -> bool:
        """Insert a node, settle its charges and log both; False when the id exists."""
        with self._lock:
            done = super().commit(
                node,
                scopes=scopes,
                charges=charges,
                windows=windows,
                reservation_id=reservation_id,
            )
            if done:
                self._append(
                    {
                        "op": "commit",
                        "node": _node_record(node),
                        "scopes": list(scopes),
                        "charges": {name: str(v) for name, v in charges.items()},
                    }
                )
            return done

    def update_meta(self, node_id: str, patch: Mapping[str, Any]) -> Node:
        """Shallow-merge ``patch`` into a node's meta and log the patch."""
        with self._lock:
            node = super().update_meta(node_id, patch)
            self._append({"op": "meta", "id": node_id, "patch": dict(patch)})
            return node

    def drop_nodes(self, ids: Iterable[str]) -> int:
        """Delete exactly these nodes and log the drop."""
        wanted = list(ids)
        with self._lock:
            removed = super().drop_nodes(wanted)
            if removed:
                self._append({"op": "drop", "ids": wanted})
            return removed

    def claim(self, key: str, owner: str) -> str:
        """Claim ``key`` for ``owner`` unless already claimed (logged); return the winner."""
        with self._lock:
            fresh = key not in self._claims
            winner = super().claim(key, owner)
            if fresh:
                self._append({"op": "claim", "key": key, "owner": owner})
            return winner

    def compact(self) -> int:
        """Rewrite the log as one put per live node plus a ledger snapshot (offline GC)."""
        with self._lock:
            super().compact()
            self._rope = None
            for root in self.roots():
                for node in self.walk(root.id):
                    self._append({"op": "put", "node": _node_record(node)})
            for scope, totals in sorted(self._totals.items()):
                self._append(
                    {
                        "op": "totals",
                        "scope": scope,
                        "totals": {k: str(v) for k, v in sorted(totals.items())},
                    }
                )
            for key, owner in sorted(self._claims.items()):
                self._append({"op": "claim", "key": key, "owner": owner})
        return 0

    def __repr__(self) -> str:
        return f"HashRopeStore(nodes={len(self)})"
