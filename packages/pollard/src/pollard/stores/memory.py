"""``MemoryStore``: an in-process store with the full ledger (reservations, windows)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pollard._core._canon import fast_loads
from pollard._core._ledger import (
    ZERO,
    Admission,
    BudgetClaim,
    Held,
    WindowClaim,
    WindowEvent,
    active_totals,
    add_charges,
    admit,
    held_amounts,
)
from pollard._core._node import Node, NodeKind, trusted_node
from pollard._core._noderef import NodeRef, node_refs

from ._common import (
    check_new_node,
    collision,
    conflict_patch,
    ended_writers,
    holder_json,
    holds_of_gone,
    judge_append,
    load_holder,
    meta_text,
    sorted_roots,
)
from ._host import liveness

__all__ = ["MemoryStore"]

_KIND_ORDER = {kind: kind.value for kind in NodeKind}


@dataclass(slots=True)
class _Row:
    parent: str | None
    kind: NodeKind
    attempt: int
    payload_text: str
    result_text: str | None
    result_digest: str | None
    meta_text: str


@dataclass(slots=True)
class _Reservation:
    expires: float
    held: list[Held]


class MemoryStore:
    """A store kept in process memory (the default for ``Runtime()``).

    It implements the whole `pollard.Store` protocol, including reservations with leases and
    sliding windows, so one budget rule holds on every backend. Reads return detached copies.
    It is safe to share between threads of one process; it is not shared between processes.

    Args:
        store_id: The logical ledger namespace (informational for an in-process store).
        clock: The wall clock used for leases and windows (injectable for tests).

    Example:
        >>> from pollard import MemoryStore, Runtime
        >>> with Runtime(MemoryStore()).run("demo") as run:
        ...     _ = run.note({"status": "ready"})
    """

    def __init__(
        self, *, store_id: str = "default", clock: Callable[[], float] = time.time
    ) -> None:
        self._store_id = store_id
        self._clock = clock
        self._lock = threading.RLock()
        self._rows: dict[str, _Row] = {}
        self._children: dict[str, list[str]] = {}
        self._totals: dict[str, dict[str, Decimal]] = {}
        self._reservations: dict[str, _Reservation] = {}
        self._writers: dict[str, float] = {}  # writer -> lease expiry
        self._appends: dict[str, tuple[str, int]] = {}  # node id -> (writer, fencing token)
        self._holders: dict[str, dict[str, Any]] = {}  # writer -> its process (`_host`)
        self._events: dict[tuple[str, str], deque[tuple[float, Decimal]]] = {}
        self._counter = itertools.count()
        self._claims: dict[str, str] = {}
        self._queues: dict[str, list[str]] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def store_id(self) -> str:
        """The logical ledger namespace."""
        return self._store_id

    def close(self) -> None:
        """Nothing to release; kept for the protocol."""

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._rows)

    # -- nodes ---------------------------------------------------------------------------------

    def _node(self, node_id: str, row: _Row) -> Node:
        return trusted_node(
            node_id,
            row.parent,
            row.kind,
            row.attempt,
            fast_loads(row.payload_text),
            None if row.result_text is None else fast_loads(row.result_text),
            row.result_digest,
            fast_loads(row.meta_text),
            row.payload_text,
            row.result_text,
        )

    def _insert(self, node: Node, meta: str) -> None:
        text = node.payload_text
        if text is None:
            text = json.dumps(
                node.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            )
        r_text = node.result_text
        if r_text is None and node.result is not None:
            r_text = json.dumps(
                node.result, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            )
        self._rows[node.id] = _Row(
            node.parent, node.kind, node.attempt, text, r_text, node.result_digest, meta
        )
        if node.parent is not None:
            self._children.setdefault(node.parent, []).append(node.id)

    def _check_parent(self, node: Node) -> None:
        if node.parent is not None and node.parent not in self._rows:
            raise KeyError(f"parent {node.parent} of node {node.id} is not stored")

    def put(self, node: Node) -> bool:
        """Store a node; True when it was new (see `pollard.Store.put`)."""
        check_new_node(node)
        with self._lock:
            row = self._rows.get(node.id)
            if row is not None:
                stored = self._node(node.id, row)
                if stored.identity() != node.identity():
                    raise collision(node.id)
                patch = conflict_patch(stored.meta, row.result_digest, node)
                if patch:
                    self._patch(node.id, row, patch)
                return False
            self._check_parent(node)
            self._insert(node, meta_text(node.meta))
            return True

    def get(self, node_id: str) -> Node:
        """Return a detached copy of a node (KeyError if missing)."""
        with self._lock:
            row = self._rows.get(node_id)
            if row is None:
                raise KeyError(node_id)
            return self._node(node_id, row)

    def find(self, node_id: str) -> Node | None:
        """Return a node, or None when it is not stored."""
        with self._lock:
            row = self._rows.get(node_id)
            return None if row is None else self._node(node_id, row)

    def exists(self, node_id: str) -> bool:
        """Whether a node id is stored."""
        return node_id in self._rows

    def children(self, node_id: str) -> list[NodeRef]:
        """Direct children sorted by (kind, id)."""
        with self._lock:
            ids = self._children.get(node_id, ())
            nodes = [self._node(child, self._rows[child]) for child in ids]
        nodes.sort(key=lambda n: (n.kind.value, n.id))
        return node_refs(nodes)

    def _patch(self, node_id: str, row: _Row, patch: Mapping[str, Any]) -> dict[str, Any]:
        meta: dict[str, Any] = fast_loads(row.meta_text)
        meta.update(patch)
        row.meta_text = meta_text(meta)
        return meta

    def update_meta(self, node_id: str, patch: Mapping[str, Any]) -> Node:
        """Shallow-merge ``patch`` into a node's meta and return the updated node."""
        meta_text(dict(patch))  # validate before touching anything
        with self._lock:
            row = self._rows.get(node_id)
            if row is None:
                raise KeyError(node_id)
            self._patch(node_id, row, patch)
            return self._node(node_id, row)

    def walk(self, root_id: str) -> Iterator[Node]:
        """Iterative preorder over the subtree at ``root_id`` (KeyError if missing)."""
        if root_id not in self._rows:
            raise KeyError(root_id)
        stack = [root_id]
        while stack:
            current = stack.pop()
            with self._lock:
                row = self._rows.get(current)
                if row is None:
                    continue
                node = self._node(current, row)
                kids = [(self._rows[c].kind.value, c) for c in self._children.get(current, ())]
            yield node
            kids.sort(reverse=True)
            stack.extend(child for _, child in kids)

    def roots(self) -> list[NodeRef]:
        """Root nodes sorted by (run label, id)."""
        with self._lock:
            nodes = [self._node(i, r) for i, r in self._rows.items() if r.parent is None]
        return sorted_roots(nodes)

    # -- maintenance ---------------------------------------------------------------------------

    def drop_nodes(self, ids: Iterable[str]) -> int:
        """Delete exactly these nodes; return how many existed."""
        removed = 0
        with self._lock:
            for node_id in list(ids):
                row = self._rows.pop(node_id, None)
                if row is None:
                    continue
                removed += 1
                self._children.pop(node_id, None)
                if row.parent is not None and row.parent in self._children:
                    siblings = self._children[row.parent]
                    if node_id in siblings:
                        siblings.remove(node_id)
        return removed

    def compact(self) -> int:
        """Drop expired reservations and long-ended writer leases.

        Returns:
            0: a memory store interns no blobs.
        """
        with self._lock:
            now = self._clock()
            self._sweep(now)
            for writer in ended_writers(list(self._writers.items()), now):
                self._writers.pop(writer, None)
                self._holders.pop(writer, None)
        return 0

    # -- ledger --------------------------------------------------------------------------------

    def _sweep(self, now: float) -> None:
        expired = [rid for rid, res in self._reservations.items() if res.expires <= now]
        for rid in expired:
            del self._reservations[rid]

    def _window_sum(self, key: str, meter: str, window_seconds: float, now: float) -> Decimal:
        events = self._events.get((key, meter))
        if not events:
            return ZERO
        cutoff = now - window_seconds
        while events and events[0][0] <= cutoff:
            events.popleft()
        return sum((amount for _, amount in events), ZERO)

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
        with self._lock:
            now = self._clock()
            self._sweep(now)
            short = admit(
                claims,
                windows,
                settled=lambda c: self._totals.get(c.scope, {}).get(c.meter, ZERO),
                window_settled=lambda w: self._window_sum(w.key, w.meter, w.window_seconds, now),
                active=active_totals(res.held for res in self._reservations.values()),
            )
            if short is not None:
                return Admission(None, short)
            held = held_amounts(claims, windows)
            if not hold or not held:
                return Admission(None, None)
            rid = f"r{next(self._counter)}"
            if owner is not None:  # whose hold it is, for release_gone
                rid = f"{owner}.{rid}"
            self._reservations[rid] = _Reservation(now + lease_seconds, held)
            return Admission(rid, None)

    def release_gone(self) -> int:
        """Release the live holds whose owner's process is provably gone (this host only)."""
        with self._lock:
            gone = holds_of_gone(list(self._reservations), self._holders.get)
            for rid in gone:
                del self._reservations[rid]
            return len(gone)

    def renew(self, reservation_id: str, lease_seconds: float) -> bool:
        """Extend a live reservation's lease; False when it no longer exists."""
        with self._lock:
            res = self._reservations.get(reservation_id)
            if res is None:
                return False
            res.expires = self._clock() + lease_seconds
            return True

    def release(self, reservation_id: str) -> None:
        """Drop a reservation without charging (idempotent)."""
        with self._lock:
            self._reservations.pop(reservation_id, None)

    def _queue_live(self, queue: str) -> list[str]:
        self._sweep(self._clock())
        live = [rid for rid in self._queues.get(queue, ()) if rid in self._reservations]
        if live:
            self._queues[queue] = live
        else:
            self._queues.pop(queue, None)
        return live

    def queue_join(self, queue: str, reservation_id: str) -> int | None:
        """Append a live reservation to ``queue``; how many are ahead (see `SQLiteStore`)."""
        with self._lock:
            live = self._queue_live(queue)
            if reservation_id in live:
                return live.index(reservation_id)
            if reservation_id not in self._reservations:
                return None
            live.append(reservation_id)
            self._queues[queue] = live
            return len(live) - 1

    def queue_position(self, queue: str, reservation_id: str, lease_seconds: float) -> int | None:
        """Renew a queued reservation; how many are ahead, None when gone (see `SQLiteStore`)."""
        with self._lock:
            live = self._queue_live(queue)
            if reservation_id not in live:
                return None
            self._reservations[reservation_id].expires = self._clock() + lease_seconds
            return live.index(reservation_id)

    def commit(
        self,
        node: Node,
        *,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent] = (),
        reservation_id: str | None = None,
    ) -> bool:
        """Insert a node and settle its charges atomically; False when the id already exists."""
        check_new_node(node)
        text = meta_text(node.meta)
        with self._lock:
            if node.id in self._rows:
                return False
            self._check_parent(node)
            self._insert(node, text)
            for scope in scopes:
                add_charges(self._totals.setdefault(scope, {}), charges)
            now = self._clock()
            for event in windows:
                self._events.setdefault((event.key, event.meter), deque()).append(
                    (now, event.amount)
                )
            if reservation_id is not None:
                self._reservations.pop(reservation_id, None)
            return True

    def totals(self, scope: str) -> dict[str, Decimal]:
        """Running totals per meter for one scope."""
        with self._lock:
            return dict(self._totals.get(scope, {}))

    # -- writers -------------------------------------------------------------------------------

    def lease_writer(
        self, writer: str, lease_seconds: float, *, holder: Mapping[str, Any] | None = None
    ) -> None:
        """Record that ``writer`` is alive until ``now + lease_seconds`` (0 ends it).

        ``holder`` (a JSON object: host, pid and the like) records the writer's process, so a
        process on the same host can take over a lease whose holder is provably gone.
        """
        with self._lock:
            self._writers[writer] = self._clock() + lease_seconds
            found = None if holder is None else load_holder(holder_json(holder))
            if found is not None:  # a copy, as a SQL store keeps its JSON text
                self._holders[writer] = found

    def _alive(self, who: str, now: float) -> bool:
        # The holder's process is read only here, on the conflict path (a live lease).
        return self._writers.get(who, 0.0) > now and liveness(self._holders.get(who)) != "gone"

    def take_append(self, node_id: str, writer: str) -> int:
        """Make ``writer`` the one appending under ``node_id``; its fencing token, or 0."""
        with self._lock:
            creator = self._creator(node_id)
            now = self._clock()
            token, write = judge_append(
                self._appends.get(node_id), creator, writer, lambda who: self._alive(who, now)
            )
            if write:
                self._appends[node_id] = (writer, token)
            return token

    def _creator(self, node_id: str) -> str | None:
        row = self._rows.get(node_id)
        if row is None:
            return None
        found = fast_loads(row.meta_text).get("writer")
        return found if isinstance(found, str) else None

    def append_holder(self, node_id: str) -> dict[str, Any] | None:
        """Who appends under ``node_id``: ``writer``, ``lease_left`` (seconds), ``holder``."""
        with self._lock:
            held = self._appends.get(node_id)
            who = held[0] if held is not None else self._creator(node_id)
            if who is None:
                return None
            return {
                "writer": who,
                "lease_left": max(self._writers.get(who, 0.0) - self._clock(), 0.0),
                "holder": self._holders.get(who),
            }

    # -- claims --------------------------------------------------------------------------------

    def claim(self, key: str, owner: str) -> str:
        """Claim ``key`` for ``owner`` unless already claimed; return the winning owner."""
        if not isinstance(key, str) or not isinstance(owner, str):
            raise TypeError("claim key and owner must be str")
        with self._lock:
            return self._claims.setdefault(key, owner)
