"""``merge``: copy the runs of one store into another, recording conflicts instead of overwriting.

Rules:

* Verify before writing: every source node is checked (id and result digest against content)
  and compared with the destination first; an identity collision (or, with ``replay=True``, a
  differing result) raises `IntegrityError` and nothing is written.
* Missing nodes are copied parents first. Their recorded charges are settled into the
  destination's running totals for the run root (and for every branch scope the source ledger
  has totals for), so budgets of a resumed run see the merged spend.
* An existing node keeps its result; a different source result is appended once to
  ``meta["result_conflicts"]``. Metadata is unioned without dropping a key: objects recurse,
  lists union (sorted by canonical JSON), and a conflicting scalar keeps the destination value
  and is recorded once in ``meta["merge_conflicts"]`` as ``{"path": "/a/b", "values": [dst, src]}``.
* Merging the same source twice changes nothing the second time. Merge is not one transaction
  across nodes: an interrupted merge is completed by running it again. Reservations and window
  events are not merged (they are live rate-control state, not history).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pollard._core._amounts import read_charges
from pollard._core._canon import json_text
from pollard._core._node import Node, NodeKind
from pollard._core._store import Store
from pollard.errors import IntegrityError

__all__ = ["MergeReport", "ScopeTracker", "merge", "node_charges"]


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What :func:`merge` did.

    Attributes:
        copied: Nodes written to the destination.
        existing: Source nodes the destination already held.
        result_conflicts: Existing nodes whose source result differs from the destination's
            (kept in ``meta["result_conflicts"]``).
        meta_conflicts: Conflicting metadata values between source and destination (kept in
            ``meta["merge_conflicts"]``).
    """

    copied: int
    existing: int
    result_conflicts: int
    meta_conflicts: int

    def to_dict(self) -> dict[str, int]:
        """The report as a JSON-ready dict."""
        return {
            "copied": self.copied,
            "existing": self.existing,
            "result_conflicts": self.result_conflicts,
            "meta_conflicts": self.meta_conflicts,
        }


def _pointer(path: tuple[str, ...]) -> str:
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in path)


def _sort_key(value: Any) -> str:
    return json_text(value)


def union_meta(
    dst: Mapping[str, Any], src: Mapping[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Union two meta objects without dropping a key.

    Returns:
        ``(merged, conflicts)`` where each conflict is ``{"path", "values": [dst, src]}``.
    """
    conflicts: list[dict[str, Any]] = []

    def merge_value(a: Any, b: Any, path: tuple[str, ...]) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            out = dict(a)
            for key, value in b.items():
                out[key] = merge_value(a[key], value, (*path, key)) if key in a else value
            return out
        if isinstance(a, list) and isinstance(b, list):
            seen = {_sort_key(item) for item in a}
            extra = [item for item in b if _sort_key(item) not in seen]
            if not extra:
                return a
            return sorted(a + extra, key=_sort_key)
        if _sort_key(a) != _sort_key(b):
            conflicts.append({"path": _pointer(path), "values": [a, b]})
        return a

    merged = merge_value(dict(dst), dict(src), ())
    return merged, conflicts


def node_charges(meta: Mapping[str, Any]) -> dict[str, Decimal]:
    """The non-zero charges recorded in a node's meta, exact (what its commit settles)."""
    return {meter: value for meter, value in read_charges(meta).items() if value}


class ScopeTracker:
    """The ledger scopes of nodes met in preorder: the run root plus budgeted branch anchors."""

    def __init__(self, ledger: Store | None) -> None:
        self._ledger = ledger
        self._scopes: dict[str, tuple[str, ...]] = {}

    def scopes(self, node: Node, base: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Return (and remember) the scopes that a node's charges settle into."""
        if node.parent is None:
            own: tuple[str, ...] = (node.id,)
        else:
            own = self._scopes.get(node.parent, base)
            # Branch budgets are anchored at notes; the source ledger knows which ones had one.
            if (
                node.kind is NodeKind.NOTE
                and self._ledger is not None
                and self._ledger.totals(node.id)
            ):
                own = (*own, node.id)
        self._scopes[node.id] = own
        return own


def _check_pair(stored: Node, node: Node, *, replay: bool, where: str) -> None:
    if stored.identity() != node.identity():
        raise IntegrityError(
            f"node id collision: {node.id} has a different identity in {where}", node.id
        )
    if replay and node.result_digest is not None and stored.result_digest != node.result_digest:
        raise IntegrityError(
            f"replay merge refused: node {node.id} has a different result in {where}",
            node.id,
            hint="merge without replay=True to keep both results as a recorded conflict",
        )


def _source_nodes(src: Store) -> Iterator[Node]:
    for root in src.roots():
        yield from src.walk(root.id)


def merge(dst: Store, src: Store, *, replay: bool = False) -> MergeReport:
    """Copy every node of ``src`` that ``dst`` lacks and union the metadata of shared nodes.

    Args:
        dst: The destination store (written).
        src: The source store (only read).
        replay: Refuse, before writing anything, when a shared node's result differs (a
            recording that replays must not diverge silently).

    Returns:
        Counts of copied, existing and conflicting nodes.

    Raises:
        IntegrityError: A source node does not match its content, an id is stored with a
            different identity, or (``replay=True``) a result differs. Nothing is written.

    Example:
        >>> from pollard import MemoryStore, Runtime, merge
        >>> a, b = MemoryStore(), MemoryStore()
        >>> with Runtime(a).run("job") as run:
        ...     _ = run.note({"status": "ready"})
        >>> merge(b, a).copied
        2
    """
    # Pass 1 (read only): validate every source node and compare it with the destination.
    present: set[str] = set()
    for node in _source_nodes(src):
        node.check()
        stored = dst.find(node.id)
        if stored is not None:
            _check_pair(stored, node, replay=replay, where="the destination")
            present.add(node.id)

    # Pass 2: write, parents first (preorder).
    copied = existing = result_conflicts = meta_conflicts = 0
    tracker = ScopeTracker(src)
    for node in _source_nodes(src):
        scopes = tracker.scopes(node)
        # commit() inserts only when the id is absent and reports it, so a node written by
        # someone else since pass 1 is treated as existing, never written twice or overwritten.
        stored = dst.find(node.id) if node.id in present else None
        if stored is None:
            if dst.commit(node, scopes=scopes, charges=node_charges(node.meta)):
                copied += 1
                continue
            stored = dst.get(node.id)
        existing += 1
        _check_pair(stored, node, replay=replay, where="the destination")
        if node.result_digest is not None and node.result_digest != stored.result_digest:
            result_conflicts += 1
            dst.put(node)  # records the source result in meta["result_conflicts"]
            stored = dst.get(node.id)
        merged, conflicts = union_meta(stored.meta, node.meta)
        meta_conflicts += len(conflicts)
        if conflicts:
            recorded = list(merged.get("merge_conflicts") or [])
            known = {_sort_key(item) for item in recorded}
            for conflict in conflicts:
                if _sort_key(conflict) not in known:
                    recorded.append(conflict)
                    known.add(_sort_key(conflict))
            merged["merge_conflicts"] = recorded
        patch = {
            key: value
            for key, value in merged.items()
            if key not in stored.meta or _sort_key(stored.meta[key]) != _sort_key(value)
        }
        if patch:
            dst.update_meta(node.id, json.loads(json_text(patch)))
    return MergeReport(copied, existing, result_conflicts, meta_conflicts)
