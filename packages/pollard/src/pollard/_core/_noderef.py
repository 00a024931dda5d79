"""``NodeRef``: what ``store.children(id)`` and ``store.roots()`` return.

pollard 0.8 returned node ids (``list[str]``); this project returned nodes. A `NodeRef` is both: it
*is* the id (a ``str``: equal to it, hashed like it, JSON-encoded as it, accepted wherever an id
is), and it reads like the node (``ref.payload``, ``ref.kind``, ``ref.meta``, ...). ``ref.node``
is the plain `Node`. So ``for child_id in store.children(root): store.get(child_id)`` (0.8) and
``[child.payload for child in store.children(root)]`` both work, without a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pollard._core._canon import JsonValue
from pollard._core._node import Node, NodeKind

__all__ = ["NodeRef", "node_refs"]


class NodeRef(str):
    """A stored node's id that also exposes the node (see the module docstring).

    Comparing with a `Node` compares the nodes; comparing with a ``str`` compares ids.
    """

    __slots__ = ("_node",)
    _node: Node

    def __new__(cls, node: Node) -> NodeRef:
        ref = super().__new__(cls, node.id)
        ref._node = node
        return ref

    @property
    def node(self) -> Node:
        """The plain `Node`."""
        return self._node

    @property
    def id(self) -> str:
        """The node id (a plain ``str``)."""
        return self._node.id

    @property
    def parent(self) -> str | None:
        """The parent id, ``None`` for a root."""
        return self._node.parent

    @property
    def kind(self) -> NodeKind:
        """The node kind."""
        return self._node.kind

    @property
    def attempt(self) -> int:
        """The attempt number."""
        return self._node.attempt

    @property
    def payload(self) -> JsonValue:
        """The identity payload."""
        return self._node.payload

    @property
    def result(self) -> JsonValue:
        """The result, or ``None``."""
        return self._node.result

    @property
    def result_digest(self) -> str | None:
        """The result digest, or ``None``."""
        return self._node.result_digest

    @property
    def meta(self) -> dict[str, Any]:
        """The mutable metadata."""
        return self._node.meta

    @property
    def pruned(self) -> bool:
        """Whether the node is marked pruned."""
        return self._node.pruned

    def __getattr__(self, name: str) -> Any:
        # Everything else a Node offers (check(), with_meta(), expected_id, ...).
        if name == "_node":  # not set yet (a half-built copy): no recursion
            raise AttributeError(name)
        return getattr(self._node, name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Node):
            return self._node == other
        if isinstance(other, NodeRef):
            return self._node == other._node
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        return (NodeRef, (self._node,))


def node_refs(nodes: Iterable[Node]) -> list[NodeRef]:
    """Wrap nodes (kept in order) as `NodeRef` values."""
    return [NodeRef(node) for node in nodes]
