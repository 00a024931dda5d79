"""Nodes: one recorded step of a run, identified by the ``pollard/v1`` content address."""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pollard._core._canon import (
    JsonValue,
    fast_loads,
    identity_bytes,
    is_hex64,
    payload_forms,
    result_digest,
    result_text,
)
from pollard.errors import IntegrityError

__all__ = ["Node", "NodeKind", "check_attempt"]


class NodeKind(str, Enum):
    """The closed set of node kinds (the value is what identity hashes)."""

    ROOT = "root"
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    NOTE = "note"
    REFUSAL = "refusal"

    def __str__(self) -> str:
        return self.value


_KINDS = {kind.value: kind for kind in NodeKind}


def check_attempt(attempt: object) -> None:
    """Raise ValueError unless ``attempt`` is an int (not a bool) >= 0, as a node's must be."""
    if type(attempt) is not int or attempt < 0:
        raise ValueError(f"attempt must be an int >= 0, got {attempt!r}")


def _kind(value: object) -> NodeKind:
    if isinstance(value, NodeKind):
        return value
    try:
        return _KINDS[value]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ValueError(f"unknown node kind {value!r}; expected one of {sorted(_KINDS)}") from None


@dataclass(frozen=True, slots=True)
class Node:
    r"""One recorded step.

    Identity (``id``) is a hash of ``kind``, ``parent``, ``attempt`` and ``payload`` only; the
    result, its digest and ``meta`` are not part of it. ``meta`` is the mutable side (charges,
    usage, timings, ``pruned``, ...) and is never hashed into ids or seals.

    Build nodes with `Node.create`, which computes the id and the result digest. Constructing a
    `Node` directly validates field shapes; `Node.check` verifies the id and digest against the
    content.

    Attributes:
        id: 64-character lowercase hex ``pollard/v1`` id.
        parent: The parent id, ``None`` for a root.
        kind: The node kind.
        attempt: The attempt number (int >= 0) that disambiguates identical steps.
        payload: The identity payload (JSON).
        result: The step result (JSON) or ``None`` (roots, notes, refusals, dry runs).
        result_digest: ``sha256("pollard/v1:result\\n" + result text)`` or ``None`` without result.
        meta: Mutable metadata (JSON object).
    """

    id: str
    parent: str | None
    kind: NodeKind
    attempt: int
    payload: JsonValue
    result: JsonValue = None
    result_digest: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # Cached exact texts (never compared): storage text and canonical bytes of the payload, and the
    # exact result text the digest was computed over.
    payload_text: str | None = field(default=None, repr=False, compare=False)
    canonical_payload: bytes | None = field(default=None, init=False, repr=False, compare=False)
    result_text: str | None = field(default=None, repr=False, compare=False)
    # True when this process computed id and digest from the content (Node.create/with_result),
    # so stores can skip re-verifying it. Never set from outside data.
    content_checked: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _kind(self.kind))
        if not is_hex64(self.id):
            raise ValueError(f"node id must be 64 lowercase hex characters, got {self.id!r}")
        if self.kind is NodeKind.ROOT:
            if self.parent is not None:
                raise ValueError("a root node has no parent")
        elif not is_hex64(self.parent):
            raise ValueError(f"a {self.kind.value} node needs a parent id, got {self.parent!r}")
        check_attempt(self.attempt)
        if self.result_digest is not None and not is_hex64(self.result_digest):
            raise ValueError(f"result_digest must be hex64 or None, got {self.result_digest!r}")
        if not isinstance(self.meta, dict):
            raise TypeError(f"meta must be a dict, not {type(self.meta).__name__}")

    @classmethod
    def create(
        cls,
        kind: NodeKind | str,
        parent: str | None,
        payload: JsonValue,
        *,
        attempt: int = 0,
        result: JsonValue = None,
        meta: dict[str, Any] | None = None,
    ) -> Node:
        """Build a node, computing its id and result digest.

        Args:
            kind: The node kind.
            parent: The parent id (``None`` for a root).
            payload: The identity payload.
            attempt: The attempt number.
            result: The result, or ``None``.
            meta: Initial metadata.

        Returns:
            The node. Its payload is a detached copy of ``payload``.

        Raises:
            TypeError: If the payload or result is not JSON.
            ValueError: If a field has the wrong shape.
        """
        kind = _kind(kind)
        check_attempt(attempt)
        if kind is NodeKind.ROOT:
            if parent is not None:
                raise ValueError("a root node has no parent")
        elif not is_hex64(parent):
            raise ValueError(f"a {kind.value} node needs a parent node id, got {parent!r}")
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict, not {type(meta).__name__}")
        text, canonical = payload_forms(payload)
        digest = hashlib.sha256(identity_bytes(kind.value, parent, attempt, canonical)).hexdigest()
        node = trusted_node(
            digest, parent, kind, attempt, fast_loads(text), None, None, dict(meta or {}), text
        )
        object.__setattr__(node, "canonical_payload", canonical)
        object.__setattr__(node, "content_checked", True)
        if result is not None:
            node = node.with_result(result, node.meta)
        return node

    def with_result(self, result: JsonValue, meta: dict[str, Any]) -> Node:
        """Return a copy with ``result`` (digest computed) and ``meta``; identity unchanged.

        Raises:
            TypeError: If the result is not JSON.
            ValueError: If the result holds NaN or an infinity.
        """
        meta = dict(meta)
        if result is None:
            values: tuple[Any, Any, Any] = (None, None, None)
        else:
            text = result_text(result)
            values = (fast_loads(text), result_digest(text), text)
        # `_clone` with the result set in the same pass (a step builds one of these each).
        node = trusted_node(
            self.id,
            self.parent,
            self.kind,
            self.attempt,
            self.payload,
            values[0],
            values[1],
            meta,
            self.payload_text,
            values[2],
        )
        setter = object.__setattr__
        setter(node, "canonical_payload", self.canonical_payload)
        setter(node, "content_checked", self.content_checked)
        return node

    @classmethod
    def make(
        cls,
        *,
        kind: NodeKind | str,
        parent: str | None,
        payload: JsonValue,
        attempt: int = 0,
        result: JsonValue = None,
        meta: dict[str, Any] | None = None,
    ) -> Node:
        """Build a node: pollard 0.8's keyword-only spelling of `Node.create`.

        Deprecated: use ``Node.create(kind, parent, payload, attempt=..., result=..., meta=...)``,
        which builds the same node (same id and digest). Kept so 0.8 code keeps working.
        """
        warnings.warn(
            "Node.make(...) is deprecated; use Node.create(kind, parent, payload, ...), "
            "which builds the same node",
            DeprecationWarning,
            stacklevel=2,
        )
        return cls.create(kind, parent, payload, attempt=attempt, result=result, meta=meta)

    @property
    def expected_id(self) -> str:
        """The id recomputed from kind, parent, attempt and payload (a property, as in 0.8).

        The value is a ``str``; calling it (``node.expected_id()``, this project's earlier
        spelling) still works and warns.
        """
        canonical = self.canonical_payload
        if canonical is None:
            canonical = payload_forms(self.payload)[1]
        return _ExpectedId(
            hashlib.sha256(
                identity_bytes(self.kind.value, self.parent, self.attempt, canonical)
            ).hexdigest()
        )

    def expected_result_digest(self) -> str | None:
        """Recompute the result digest from the result (``None`` without a result)."""
        if self.result is None:
            return None
        text = self.result_text if self.result_text is not None else result_text(self.result)
        return result_digest(text)

    def check(self) -> None:
        """Verify that the id and the result digest match the content.

        Raises:
            IntegrityError: If the id or the result digest does not match.
        """
        try:
            expected = str(self.expected_id)
        except (TypeError, ValueError) as exc:
            raise IntegrityError(
                f"node {self.id} has a payload that is not canonical JSON: {exc}", self.id
            ) from None
        if expected != self.id:
            raise IntegrityError(
                f"node {self.id} does not match its content (expected id {expected})", self.id
            )
        try:
            digest = self.expected_result_digest()
        except (TypeError, ValueError) as exc:
            raise IntegrityError(
                f"node {self.id} has a result that is not JSON: {exc}", self.id
            ) from None
        if digest != self.result_digest:
            raise IntegrityError(
                f"node {self.id} has a result that does not match its digest", self.id
            )

    def identity(self) -> tuple[str, str | None, int, bytes]:
        """Return the identity tuple ``(kind, parent, attempt, canonical payload bytes)``."""
        canonical = self.canonical_payload
        if canonical is None:
            canonical = payload_forms(self.payload)[1]
        return (self.kind.value, self.parent, self.attempt, canonical)

    def with_meta(self, meta: dict[str, Any]) -> Node:
        """Return a copy of this node with ``meta`` replaced (identity and result unchanged)."""
        return _clone(self, meta)

    @property
    def pruned(self) -> bool:
        """Whether the node is marked pruned in its metadata."""
        return bool(self.meta.get("pruned"))


class _ExpectedId(str):
    """A node id that can also be called, for code written when ``expected_id`` was a method."""

    __slots__ = ()

    def __call__(self) -> str:
        warnings.warn(
            "Node.expected_id is a property (as in pollard 0.8); drop the call parentheses",
            DeprecationWarning,
            stacklevel=2,
        )
        return str(self)


def _clone(node: Node, meta: dict[str, Any]) -> Node:
    copy = trusted_node(
        node.id,
        node.parent,
        node.kind,
        node.attempt,
        node.payload,
        node.result,
        node.result_digest,
        meta,
        node.payload_text,
        node.result_text,
    )
    object.__setattr__(copy, "canonical_payload", node.canonical_payload)
    object.__setattr__(copy, "content_checked", node.content_checked)
    return copy


def trusted_node(
    id: str,
    parent: str | None,
    kind: NodeKind,
    attempt: int,
    payload: JsonValue,
    result: JsonValue,
    result_digest: str | None,
    meta: dict[str, Any],
    payload_text: str | None = None,
    result_text: str | None = None,
) -> Node:
    """Build a node without validation (for stores reading rows they validated on write)."""
    node = object.__new__(Node)
    setter = object.__setattr__
    setter(node, "id", id)
    setter(node, "parent", parent)
    setter(node, "kind", kind)
    setter(node, "attempt", attempt)
    setter(node, "payload", payload)
    setter(node, "result", result)
    setter(node, "result_digest", result_digest)
    setter(node, "meta", meta)
    setter(node, "payload_text", payload_text)
    setter(node, "canonical_payload", None)
    setter(node, "result_text", result_text)
    setter(node, "content_checked", False)
    return node
