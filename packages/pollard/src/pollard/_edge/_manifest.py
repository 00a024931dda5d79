"""A read-only, in-memory `Store` over a fixed list of nodes (used to seal snapshots and files)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pollard._core._ledger import Admission, BudgetClaim, WindowClaim, WindowEvent
from pollard._core._node import Node
from pollard._core._noderef import NodeRef, node_refs

__all__ = ["ManifestStore"]


class ManifestStore:
    """A read-only store over a list of nodes, for sealing a snapshot or a file's nodes.

    Children are ordered by ``(kind, id)`` like every store, so ``seal`` over a manifest equals
    ``seal`` over a store holding the same nodes.
    """

    def __init__(self, nodes: Sequence[Node]) -> None:
        self._nodes = {node.id: node for node in nodes}
        self._children: dict[str, list[Node]] = {}
        for node in nodes:
            if node.parent is not None:
                self._children.setdefault(node.parent, []).append(node)
        for kids in self._children.values():
            kids.sort(key=lambda n: (n.kind.value, n.id))

    @property
    def store_id(self) -> str:
        return "manifest"

    def _read_only(self) -> TypeError:
        return TypeError("a manifest store is read-only")

    def put(self, node: Node) -> bool:
        raise self._read_only()

    def get(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def find(self, node_id: str) -> Node | None:
        return self._nodes.get(node_id)

    def exists(self, node_id: str) -> bool:
        return node_id in self._nodes

    def children(self, node_id: str) -> list[NodeRef]:
        return node_refs(self._children.get(node_id, ()))

    def update_meta(self, node_id: str, patch: Mapping[str, Any]) -> Node:
        raise self._read_only()

    def walk(self, root_id: str) -> Iterator[Node]:
        stack = [self._nodes[root_id]]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(self._children.get(node.id, ())))

    def roots(self) -> list[NodeRef]:
        return node_refs(n for n in self._nodes.values() if n.parent is None)

    def drop_nodes(self, ids: Iterable[str]) -> int:
        raise self._read_only()

    def compact(self) -> int:
        raise self._read_only()

    def reserve(
        self,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim] = (),
        *,
        lease_seconds: float,
        hold: bool = True,
        owner: str | None = None,
    ) -> Admission:
        raise self._read_only()

    def renew(self, reservation_id: str, lease_seconds: float) -> bool:
        raise self._read_only()

    def release_gone(self) -> int:
        return 0

    def release(self, reservation_id: str) -> None:
        raise self._read_only()

    def commit(
        self,
        node: Node,
        *,
        scopes: Sequence[str],
        charges: Mapping[str, Decimal],
        windows: Sequence[WindowEvent] = (),
        reservation_id: str | None = None,
    ) -> bool:
        raise self._read_only()

    def totals(self, scope: str) -> dict[str, Decimal]:
        return {}

    def claim(self, key: str, owner: str) -> str:
        raise self._read_only()

    def lease_writer(
        self, writer: str, lease_seconds: float, *, holder: Mapping[str, Any] | None = None
    ) -> None:
        raise self._read_only()

    def take_append(self, node_id: str, writer: str) -> int:
        raise self._read_only()

    def append_holder(self, node_id: str) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        """Nothing to release."""
