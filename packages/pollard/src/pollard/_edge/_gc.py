"""``gc``: explicit, offline garbage collection of a store.

* ``drop-pruned`` deletes every pruned node together with its descendants.
* ``compact`` drops expired reservations and old window events, deletes interned blobs no node
  references any more and reclaims file space where the backend can (``VACUUM`` on SQLite).

Every run is sealed before anything is deleted: a node that does not match its content stops gc
with `IntegrityError` and nothing is removed. The report carries the seals of the runs that
survive, to keep beside backups. Running totals are never reduced: dropping a pruned branch
does not refund the budget it spent. Run gc while no runtime writes to the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pollard._core._store import Store
from pollard._edge._seal import seal

__all__ = ["GCReport", "gc"]

GCMode = Literal["drop-pruned", "compact"]
_MODES = ("drop-pruned", "compact")


@dataclass(frozen=True, slots=True)
class GCReport:
    """What :func:`gc` removed and the seals of the runs that remain.

    Attributes:
        mode: ``"drop-pruned"`` or ``"compact"``.
        removed_nodes: The ids of the nodes deleted (``drop-pruned``), sorted, as in pollard 0.8.
            `removed_count` is their number.
        removed_blobs: Interned payload blobs deleted (``compact``).
        survivor_seals: ``{root_id: seal digest}`` for every run left in the store.
    """

    mode: str
    removed_nodes: tuple[str, ...]
    removed_blobs: int
    survivor_seals: dict[str, str] = field(default_factory=dict)

    @property
    def removed_count(self) -> int:
        """How many nodes were deleted."""
        return len(self.removed_nodes)

    def to_dict(self) -> dict[str, object]:
        """The report as a JSON-ready dict."""
        return {
            "mode": self.mode,
            "removed_nodes": len(self.removed_nodes),
            "removed_node_ids": list(self.removed_nodes),
            "removed_blobs": self.removed_blobs,
            "survivor_seals": dict(self.survivor_seals),
        }


def _seals(store: Store) -> dict[str, str]:
    return {root.id: seal(store, root.id).digest for root in store.roots()}


def pruned_ids(store: Store) -> list[str]:
    """Ids of every pruned node and its descendants, descendants first."""
    dropped: set[str] = set()
    order: list[str] = []
    for root in store.roots():
        for node in store.walk(root.id):
            if node.pruned or (node.parent is not None and node.parent in dropped):
                dropped.add(node.id)
                order.append(node.id)
    order.reverse()
    return order


def gc(store: Store, mode: GCMode = "drop-pruned") -> GCReport:
    """Collect garbage in ``store`` (offline: no runtime may be writing).

    Args:
        store: The store to collect.
        mode: ``"drop-pruned"`` (delete pruned subtrees) or ``"compact"`` (sweep ledger rows
            and unreferenced blobs, reclaim space).

    Returns:
        What was removed (node ids, blob count) and the seals of the surviving runs.

    Raises:
        ValueError: ``mode`` is not one of the two modes.
        IntegrityError: A run does not verify; nothing was removed.

    Example:
        >>> from pollard import MemoryStore, Runtime, gc
        >>> store = MemoryStore()
        >>> with Runtime(store).run("job") as run:
        ...     _ = run.note({"status": "draft"})
        ...     _ = run.prune()
        >>> gc(store, "drop-pruned").removed_count
        1
    """
    if mode not in _MODES:
        raise ValueError(f"gc mode must be 'drop-pruned' or 'compact', got {mode!r}")
    _seals(store)  # validates every node of every run before anything is deleted
    removed_nodes: tuple[str, ...] = ()
    removed_blobs = 0
    if mode == "drop-pruned":
        dropped = pruned_ids(store)
        store.drop_nodes(dropped)
        removed_nodes = tuple(sorted(dropped))
    else:
        removed_blobs = store.compact()
    return GCReport(mode, removed_nodes, removed_blobs, _seals(store))
