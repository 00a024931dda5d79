"""Helpers shared by the store backends (validation, conflict bookkeeping, reachability)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pollard._core._canon import make_dumps
from pollard._core._node import Node
from pollard._core._noderef import NodeRef, node_refs
from pollard.errors import IntegrityError

__all__ = [
    "KEPT_CONFLICTS",
    "check_new_node",
    "collision",
    "conflict_patch",
    "ended_writers",
    "holder_json",
    "holds_of_gone",
    "judge_append",
    "lease_end",
    "load_holder",
    "load_queue",
    "mark_unreachable",
    "meta_text",
    "sorted_roots",
]

_meta_dumps = make_dumps()

_E = TypeVar("_E", bound=BaseException)


def mark_unreachable(error: _E) -> _E:
    """Mark ``error`` as meaning its store cannot be reached, rather than a fault in it.

    A shared quota (`pollard.adapters.pollux.SharedQuota`) runs on its local share, or fails
    with a retryable error, only for such errors; it reads the ``store_unreachable`` attribute
    set here, as it reads ``connection_lost`` on a lost connection.
    """
    error.store_unreachable = True  # type: ignore[attr-defined]
    return error


def check_new_node(node: Node) -> None:
    """Verify a node's id and result digest before it is written.

    Raises:
        IntegrityError: If the id or the digest does not match the content.
    """
    if not node.content_checked:
        node.check()


def meta_text(meta: dict[str, Any]) -> str:
    """Serialise meta as sorted compact JSON (floats allowed, NaN rejected).

    Raises:
        TypeError: If meta holds a value JSON cannot encode.
        ValueError: If meta holds NaN or an infinity.
    """
    return _meta_dumps(meta)


KEPT_CONFLICTS = 2
"""How many differing results ``meta["result_conflicts"]`` keeps: the first and the latest."""


def conflict_patch(
    stored_meta: dict[str, Any], stored_digest: str | None, node: Node
) -> dict[str, Any] | None:
    """Return a meta patch recording a result conflict, or None when there is nothing to record.

    The first stored result is kept as the node's result. A different later result is recorded
    in ``meta["result_conflicts"]`` as ``{"result_digest", "result"}``, which keeps at most the
    first and the latest differing result (a node re-recorded on every run of a script would
    otherwise grow, and cost more to rewrite, each time); ``meta["result_conflict_count"]``
    counts every differing result recorded. A result equal to one that is kept changes nothing,
    so putting the same node again is idempotent.
    """
    if node.result_digest is None or node.result_digest == stored_digest:
        return None
    conflicts = list(stored_meta.get("result_conflicts") or [])
    if any(c.get("result_digest") == node.result_digest for c in conflicts):
        return None
    count = stored_meta.get("result_conflict_count")
    if type(count) is not int or count < len(conflicts):  # stored before the count existed
        count = len(conflicts)
    entry = {"result_digest": node.result_digest, "result": node.result}
    if len(conflicts) < KEPT_CONFLICTS:
        conflicts.append(entry)
    else:
        conflicts[KEPT_CONFLICTS - 1 :] = [entry]
    return {
        "result_conflicts": json.loads(json.dumps(conflicts)),
        "result_conflict_count": count + 1,
    }


def collision(node_id: str) -> IntegrityError:
    """The error for two different identities under one id."""
    return IntegrityError(
        f"node id collision: {node_id} is stored with a different identity", node_id
    )


def sorted_roots(nodes: list[Node]) -> list[NodeRef]:
    """Root nodes in the protocol's order, (run label, id), the same on every store."""
    nodes.sort(
        key=lambda n: (
            str(n.payload.get("run", "")) if isinstance(n.payload, dict) else "",
            n.id,
        )
    )
    return node_refs(nodes)


def holder_json(holder: Mapping[str, Any]) -> str:
    """A writer's process record (`pollard.stores._host`) as compact JSON.

    Raises:
        TypeError: If ``holder`` is not a JSON object of plain values.
    """
    if not isinstance(holder, Mapping):
        raise TypeError("a writer's holder is a mapping (host, pid, ...)")
    return json.dumps(dict(holder), sort_keys=True, separators=(",", ":"), allow_nan=False)


# How long after its lease ended a writer's liveness rows are kept by `compact` (an hour): a
# process paused longer than that finds its rows gone, which reads as a lease that ended (its
# nodes are taken over, it is fenced), only without an early takeover on its host.
WRITER_ROWS_KEPT_S = 3600.0


def lease_end(text: str | None) -> float:
    """A stored ``writer:<id>`` lease's end; 0 (ended) when absent or damaged."""
    try:
        return float(text or 0.0)
    except ValueError:
        return 0.0


def ended_writers(leases: Iterable[tuple[str, float]], now: float) -> list[str]:
    """The writers whose lease (``(writer, end)``) ended `WRITER_ROWS_KEPT_S` before ``now``."""
    return [writer for writer, end in leases if end <= now - WRITER_ROWS_KEPT_S]


def holds_of_gone(
    reservation_ids: list[str], holder: Callable[[str], Mapping[str, Any] | None]
) -> list[str]:
    """The reservations (``<owner>.<random>`` ids) whose owner's process is provably gone."""
    from pollard.stores._host import liveness  # the process table is read only on this path

    judged: dict[str, bool] = {}
    gone = []
    for rid in reservation_ids:
        owner, dot, _ = rid.partition(".")
        if not dot:
            continue  # a hold without an owner (an older runtime, a quota): its lease decides
        if owner not in judged:
            judged[owner] = liveness(holder(owner)) == "gone"
        if judged[owner]:
            gone.append(rid)
    return gone


def load_holder(text: str | None) -> dict[str, Any] | None:
    """A stored holder record, or None when absent or damaged (its lease then only expires)."""
    if text is None:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def load_queue(text: str | None) -> list[str]:
    """A stored queue's reservation ids in arrival order ([] when absent or damaged)."""
    if text is None:
        return []
    try:
        found = json.loads(text)
    except ValueError:
        return []
    if not isinstance(found, list):
        return []
    return [rid for rid in found if isinstance(rid, str)]


def judge_append(
    held: tuple[str, int] | None,
    creator: str | None,
    writer: str,
    alive: Callable[[str], bool],
) -> tuple[int, bool]:
    """The one-writer rule for appending under a node, as every store applies it.

    ``held`` is the node's append lease ``(holder, fencing token)`` or None; ``creator`` the
    writer that committed the node (its ``meta["writer"]``), which holds it until another
    writer takes it. Returns ``(token, write)``: the fencing token ``writer`` now holds (0 when
    another live writer holds the node) and whether the lease row must be written.
    """
    if held is not None:
        holder, token = held
        if holder == writer:
            return token, False
        return (0, False) if alive(holder) else (token + 1, True)
    if creator is None or creator == writer or not alive(creator):
        return 1, True
    return 0, False
