"""The public ``Store`` protocol: what every backend provides.

A store holds nodes (content-addressed, append-only apart from ``meta``) and the ledger (running
totals per scope and meter, reservations with leases, window events). Everything the runtime,
governance and tooling need is a public method here; there are no hidden duck-typed capabilities.

Node methods
    ``put(node) -> bool``
        Store a node. Verifies ``node.id`` against its content and the result digest against the
        result (`IntegrityError`), requires the parent to exist (`KeyError`). If the id exists, the
        identity must be equal (else `IntegrityError` "node id collision"); the first result is
        kept, and a different result is recorded in ``meta["result_conflicts"]``, which keeps the
        first and the latest differing result (``meta["result_conflict_count"]`` counts them all),
        so a node re-recorded on every run stays the same size. Returns True when the node was new.
    ``get(node_id) -> Node``
        A detached copy (mutating it never changes the store). `KeyError` if missing.
    ``find(node_id) -> Node | None``
        Like ``get`` but ``None`` when missing.
    ``exists(node_id) -> bool``
    ``children(node_id) -> list[Node]``
        Direct children sorted by ``(kind, id)``.
    ``update_meta(node_id, patch) -> Node``
        Shallow merge of ``patch`` into ``meta`` (a key set to ``None`` is stored as null, not
        deleted). Returns the updated node. `KeyError` if missing.
    ``walk(root_id) -> Iterator[Node]``
        Iterative preorder from ``root_id`` (children in ``(kind, id)`` order). Any depth works.
    ``roots() -> list[Node]``
        Root nodes sorted by ``(payload["run"], id)``.

Maintenance methods (offline by contract: no runtime should be writing)
    ``drop_nodes(ids) -> int``
        Delete exactly these nodes (callers pass whole subtrees) with their ledger-free data;
        returns how many existed.
    ``compact() -> int``
        Drop expired reservations and old window events, delete unreferenced interned blobs, and
        reclaim space where the backend can. Returns the number of blobs removed.

Ledger methods (see `pollard._core._ledger` for the admission rule)
    ``reserve(claims, windows=(), *, lease_seconds, hold=True, owner=None) -> Admission``
        Atomically apply the admission rule to every claim and, when all pass and ``hold`` is
        True, record one reservation holding every positive amount until ``expires = now + lease``.
        With ``hold=False`` it only checks. ``owner`` (the writer id of the runtime holding it)
        starts the reservation's id (``<owner>.<random>``), so `release_gone` can tell whose
        hold it is.
    ``release_gone() -> int``
        Release the live reservations whose owner's process (its ``lease_writer`` holder) is on
        this host and provably gone, as their leases would once they ended; the number released.
        Runtimes call it only when a request does not fit beside other steps' holds.
    ``renew(reservation_id, lease_seconds) -> bool``
        Extend a live reservation; False when it is gone (expired and swept, or settled).
    ``release(reservation_id) -> None``
        Drop a reservation without charging (idempotent).
    ``commit(node, *, scopes, charges, windows=(), reservation_id=None) -> bool``
        In ONE transaction: insert the node (parent must exist), add ``charges`` to the running
        totals of every scope in ``scopes``, insert the window events stamped with the store clock,
        and delete the reservation. If the node id already exists nothing is written and False is
        returned (the caller picks the next attempt and commits again), so a charge is never lost.
    ``totals(scope) -> dict[str, Decimal]``
        The running totals of one scope.

Claims
    ``claim(key, owner) -> str``
        Atomically record ``owner`` under ``key`` unless the key is already claimed, and return
        the owner stored under it (``owner`` itself when this call won). Every runtime sharing
        the store (threads and processes alike) sees one winner per key; claims are never
        released. Confirmations use it so that a confirmed action runs at most once.

Writers (one writer per node of a run)
    ``lease_writer(writer, lease_seconds, *, holder=None) -> None``
        Record that ``writer`` (a runtime's random id) is alive until ``now + lease_seconds``;
        0 ends it. Runtimes renew it while they are open. ``holder`` (given once, when the
        writer registers) is a JSON object naming the writer's process (``host``, ``boot``,
        ``pidns``, ``pid``, ``start``), stored beside the lease without changing how the lease
        itself is stored.
    ``take_append(node_id, writer) -> int``
        Atomically make ``writer`` the one appending under ``node_id`` unless another live
        writer is (the node's holder, else the writer in its ``meta["writer"]``), and return the
        fencing token it holds: the same on a renewal, one more when the node changes hands,
        0 when another live writer holds it. A writer is live while its lease runs, unless its
        ``holder`` is on this host and its process is provably gone (the pid no longer runs,
        or runs a process started at another time): that lease is taken over at once.
    ``append_holder(node_id) -> dict | None``
        Who appends under ``node_id`` (for a refusal's message): ``writer``, ``lease_left``
        (seconds) and ``holder`` (None for a writer that recorded no process); None when nobody
        ever did.

Lifecycle
    ``close() -> None`` (idempotent); stores are also context managers.
    ``store_id: str`` names the logical ledger namespace (workers sharing a budget use the same).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from pollard._core._ledger import Admission, BudgetClaim, WindowClaim, WindowEvent
from pollard._core._node import Node
from pollard._core._noderef import NodeRef

__all__ = ["Store"]


@runtime_checkable
class Store(Protocol):
    """The storage contract every pollard backend implements (see the module docs for semantics)."""

    @property
    def store_id(self) -> str:
        """The logical ledger namespace."""
        ...

    def put(self, node: Node) -> bool:
        """Store a node; True when it was new."""
        ...

    def get(self, node_id: str) -> Node:
        """Return a detached copy of a node (KeyError if missing)."""
        ...

    def find(self, node_id: str) -> Node | None:
        """Return a node or None."""
        ...

    def exists(self, node_id: str) -> bool:
        """Whether a node id is stored."""
        ...

    def children(self, node_id: str) -> list[NodeRef]:
        """Direct children sorted by (kind, id): each the child's id that also reads as the node.

        pollard 0.8 returned ids, later versions nodes; a `NodeRef` is both.
        """
        ...

    def update_meta(self, node_id: str, patch: Mapping[str, Any]) -> Node:
        """Shallow-merge ``patch`` into a node's meta; return the updated node."""
        ...

    def walk(self, root_id: str) -> Iterator[Node]:
        """Iterative preorder over a subtree."""
        ...

    def roots(self) -> list[NodeRef]:
        """Root nodes sorted by (run label, id), as `NodeRef` values (ids that read as nodes)."""
        ...

    def drop_nodes(self, ids: Iterable[str]) -> int:
        """Delete exactly these nodes; return how many existed."""
        ...

    def compact(self) -> int:
        """Sweep expired ledger rows, long-ended writer leases and unreferenced blobs.

        Returns:
            How many blobs were removed.
        """
        ...

    def reserve(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim] = (),
        *,
        lease_seconds: float,
        hold: bool = True,
        owner: str | None = None,
    ) -> Admission:
        """Atomically check claims and hold their positive amounts."""
        ...

    def renew(self, reservation_id: str, lease_seconds: float) -> bool:
        """Extend a reservation's lease; False when it no longer exists."""
        ...

    def release(self, reservation_id: str) -> None:
        """Drop a reservation without charging."""
        ...

    def release_gone(self) -> int:
        """Release the holds of owners whose process is provably gone; how many."""
        ...

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
        ...

    def totals(self, scope: str) -> dict[str, Decimal]:
        """Running totals per meter for one scope."""
        ...

    def claim(self, key: str, owner: str) -> str:
        """Claim ``key`` for ``owner`` unless already claimed; return the winning owner."""
        ...

    def lease_writer(
        self, writer: str, lease_seconds: float, *, holder: Mapping[str, Any] | None = None
    ) -> None:
        """Record that ``writer`` is alive for ``lease_seconds`` more (0 ends it)."""
        ...

    def take_append(self, node_id: str, writer: str) -> int:
        """Make ``writer`` the one appending under ``node_id``; its fencing token, or 0."""
        ...

    def append_holder(self, node_id: str) -> dict[str, Any] | None:
        """Who appends under ``node_id``: ``writer``, ``lease_left``, ``holder``; or None."""
        ...

    def close(self) -> None:
        """Release resources (idempotent)."""
        ...
