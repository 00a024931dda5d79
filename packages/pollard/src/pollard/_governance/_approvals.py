"""Durable approvals: a request in the ledger, one decision, one execution.

An approval request is a ``refusal`` node (``rule: "approval_required"``) under the node where
the call was asked. Its payload binds it to the **actor** (who asks), the **action** (name,
version, spec digest), the **registry digest** and the **argument digest** (of the redacted
arguments), plus the attempt; its id is a pure function of those, so the same call asked again
(in any process) finds the same request, and any other call (other arguments, actor, action or
registry) is another request. Being a node, it is sealed, verified, exported and merged with the
tree.

A decision is recorded exactly once: ``decide_approval`` claims ``approval:<request>:decision``
through the store (`Store.claim`: one winner across threads and processes) with the decision
itself as the claim's value, then writes it as a ``note`` child of the request (rebuilt from
the winning claim, so every decider writes the same node) and mirrors it into the request's
meta for views. A second decision raises `ApprovalConflict` naming the one that stands.

Executing: the firewall asks the policies; a ``REQUIRE_APPROVAL`` answer makes it look up the
call's request. Approved: the approval is spent on the call's step node by one more claim
(``approval:<request>:spent`` -> that node id; a request maps to one step node, so a second
process spending it agrees, anything else is refused), and the step runs through the
effects-once machinery: a completed step is served (nothing runs), a step found in flight after
a crash is ambiguous (`EffectAmbiguous`), never run again. Pending: the request is recorded and
`ApprovalRequired` raised. Denied: a refusal is recorded and `ApprovalDenied` raised.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pollard._core._canon import json_text, payload_digest
from pollard._core._ledger import utc_now_iso
from pollard._core._node import Node, NodeKind
from pollard._core._store import Store
from pollard._step._effects import Step, io
from pollard.errors import (
    ApprovalConflict,
    ApprovalDenied,
    ApprovalRequired,
    IntegrityError,
    PollardError,
)

if TYPE_CHECKING:
    from pollard._step._cursor import RunState
    from pollard.registry import ActionSpec

__all__ = [
    "DECISION_EVENT",
    "REQUEST_RULE",
    "Approval",
    "ApprovalStatus",
    "actor_name",
    "approval_of",
    "decide_approval",
    "get_approval",
    "is_request",
    "list_approvals",
    "request_payload",
    "require",
    "spend",
]

REQUEST_RULE = "approval_required"
"""The ``rule`` of an approval request's refusal payload."""
DECISION_EVENT = "approval_decided"
"""The ``event`` of a decision note (a child of its request)."""
_DENIED_RULE = "approval_denied"
_TOOL = NodeKind.TOOL_CALL.value

ApprovalStatus = Literal["pending", "approved", "denied"]

_DECISIONS: dict[str, ApprovalStatus] = {
    "approve": "approved",
    "approved": "approved",
    "deny": "denied",
    "denied": "denied",
}


def actor_name(actor: object) -> str | None:
    """The actor's identity: a non-empty str, an object's ``.name`` (a team agent), or None.

    Raises:
        TypeError: For anything else.
    """
    if actor is None:
        return None
    name = actor if isinstance(actor, str) else getattr(actor, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"an actor is a non-empty str or an object with a str .name, got {actor!r}")
    return name


@dataclass(frozen=True)
class Approval:
    """One approval request as the ledger holds it, with its decision and its use.

    Attributes:
        request_id: The request's node id (what ``pollard approve`` and `decide_approval` take).
        run: The label of the run it was asked in.
        parent_id: The node the call was asked at (the approved call runs there).
        actor: Who asked, or ``None``.
        action: The registered action's name.
        version: The action's version.
        spec_digest: The action's spec digest.
        registry_digest: The digest of the registry the request was made under.
        args_digest: sha256 of the canonical redacted arguments.
        args: The redacted arguments (sensitive fields are markers, never values).
        attempt: The call's attempt number.
        status: ``"pending"``, ``"approved"`` or ``"denied"``.
        decided_by: Who decided, or ``None`` while pending.
        reason: The reason given with the decision, or ``None``.
        decided_at: When it was decided (UTC, ISO 8601), or ``None``.
        requested_at: When the request was first recorded, when known.
        spent_on: The tool-call node the approval was spent on, once an approved call ran (or
            started to run), else ``None``.
    """

    request_id: str
    run: str | None
    parent_id: str
    actor: str | None
    action: str
    version: str | None
    spec_digest: str | None
    registry_digest: str | None
    args_digest: str
    args: Any
    attempt: int
    status: ApprovalStatus
    decided_by: str | None = None
    reason: str | None = None
    decided_at: str | None = None
    requested_at: str | None = None
    spent_on: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (the CLI's ``--json`` form)."""
        return {
            "request_id": self.request_id,
            "run": self.run,
            "parent_id": self.parent_id,
            "actor": self.actor,
            "action": self.action,
            "version": self.version,
            "spec_digest": self.spec_digest,
            "registry_digest": self.registry_digest,
            "args_digest": self.args_digest,
            "args": self.args,
            "attempt": self.attempt,
            "status": self.status,
            "decided_by": self.decided_by,
            "reason": self.reason,
            "decided_at": self.decided_at,
            "requested_at": self.requested_at,
            "spent_on": self.spent_on,
        }


def request_payload(
    spec: ActionSpec,
    registry_digest: str,
    redacted_args: Any,
    blocked: Mapping[str, Any],
    actor: str | None,
    attempt: int,
) -> dict[str, Any]:
    """The identity payload of the approval request of one registered call."""
    return {
        "reason": "policy",
        "rule": REQUEST_RULE,
        "detail": f"approval required for {spec.name}@{spec.version}",
        "blocked_kind": _TOOL,
        "blocked_payload_digest": payload_digest(dict(blocked)),
        "tool": spec.name,
        "version": spec.version,
        "spec_digest": spec.spec_digest,
        "actor": actor,
        "registry_digest": registry_digest,
        "args_digest": payload_digest(redacted_args),
        "args": redacted_args,
        "attempt": attempt,
    }


def is_request(node: Node) -> bool:
    """Whether ``node`` is an approval request."""
    payload = node.payload
    return (
        node.kind is NodeKind.REFUSAL
        and isinstance(payload, Mapping)
        and payload.get("rule") == REQUEST_RULE
    )


def _decision(store: Store, request_id: str) -> Node | None:
    """The decision note of a request, or None while it is pending."""
    found = [
        child.node
        for child in store.children(request_id)
        if child.node.kind is NodeKind.NOTE
        and isinstance(child.node.payload, Mapping)
        and child.node.payload.get("event") == DECISION_EVENT
    ]
    if len(found) > 1:
        # decide_approval writes only the one winning claim: two decisions were written
        # behind pollard's back.
        raise IntegrityError(
            f"approval request {request_id} has {len(found)} recorded decisions", request_id
        )
    return found[0] if found else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def approval_of(store: Store, request: Node, run: str | None) -> Approval:
    """Read the `Approval` of a stored request node (its decision read from its child)."""
    payload = request.payload
    assert isinstance(payload, Mapping) and request.parent is not None
    decision = _decision(store, request.id)
    recorded = decision.payload if decision is not None else {}
    assert isinstance(recorded, Mapping)
    status = recorded.get("status") if decision is not None else "pending"
    attempt = payload.get("attempt", 0)
    return Approval(
        request_id=request.id,
        run=run,
        parent_id=request.parent,
        actor=_text(payload.get("actor")),
        action=str(payload.get("tool")),
        version=_text(payload.get("version")),
        spec_digest=_text(payload.get("spec_digest")),
        registry_digest=_text(payload.get("registry_digest")),
        args_digest=str(payload.get("args_digest")),
        args=payload.get("args"),
        attempt=attempt if isinstance(attempt, int) else 0,
        status="approved"
        if status == "approved"
        else "denied"
        if status == "denied"
        else "pending",
        decided_by=_text(recorded.get("by")),
        reason=_text(recorded.get("reason")),
        decided_at=_text(recorded.get("decided_at")),
        requested_at=_text(request.meta.get("created_at")),
        spent_on=_text(request.meta.get("approval_spent_on")),
    )


def _run_label(store: Store, node: Node) -> str | None:
    current = node
    while current.parent is not None:
        current = store.get(current.parent)
    payload = current.payload
    label = payload.get("run") if isinstance(payload, Mapping) else None
    return label if isinstance(label, str) else None


def _request_node(store: Store, request_id: str) -> Node:
    if not isinstance(request_id, str):
        raise TypeError(f"an approval request id is a str, got {type(request_id).__name__}")
    node = store.find(request_id)
    if node is None:
        raise KeyError(f"no approval request {request_id} in this store")
    if not is_request(node):
        raise ValueError(f"node {request_id} is a {node.kind.value}, not an approval request")
    return node


def _opened(store: Store | str | os.PathLike[str], *, write: bool) -> tuple[Store, bool]:
    if isinstance(store, (str, os.PathLike)):
        from pollard.stores._spec import open_spec, parse_store_spec

        spec = parse_store_spec(store)
        if spec.path is not None and not spec.path.exists():
            # A decision needs the request's store: never create an empty one.
            raise FileNotFoundError(f"no store at {os.fspath(spec.path)}")
        return open_spec(spec, read_only=not write), True
    for method in ("find", "children", "claim", "put", "update_meta"):
        if not callable(getattr(store, method, None)):
            raise TypeError(
                f"{type(store).__name__} is not a pollard Store; pass a Store, a SQLite path or "
                "a postgresql:// spec"
            )
    return store, False


def get_approval(store: Store | str | os.PathLike[str], request_id: str) -> Approval:
    """Read one approval request with its decision.

    Args:
        store: A `Store`, a SQLite path or a ``postgresql://...#store_id`` spec.
        request_id: The request id (`ApprovalRequired.request_id`).

    Returns:
        The approval as recorded now.

    Raises:
        KeyError: No such node.
        ValueError: The node is not an approval request.
    """
    opened, owned = _opened(store, write=False)
    try:
        node = _request_node(opened, request_id)
        return approval_of(opened, node, _run_label(opened, node))
    finally:
        if owned:
            opened.close()


def _requests(store: Store, run: str | None) -> Iterator[tuple[str | None, Node]]:
    for root in store.roots():
        payload = root.node.payload
        label = payload.get("run") if isinstance(payload, Mapping) else None
        if run is not None and label != run:
            continue  # another run's tree is not walked at all
        for node in store.walk(root.id):
            if is_request(node):
                yield (label if isinstance(label, str) else None), node


def list_approvals(
    store: Store | str | os.PathLike[str],
    *,
    status: ApprovalStatus | None = None,
    run: str | None = None,
) -> list[Approval]:
    """Every approval request in a store (one walk; with ``run``, of that run's trees only).

    Args:
        store: A `Store`, a SQLite path or a ``postgresql://...#store_id`` spec.
        status: Only requests with this status (``"pending"`` lists what waits for a person).
        run: Only requests of the run with this label.

    Returns:
        The approvals, ordered by request time, then id.
    """
    if status is not None and status not in ("pending", "approved", "denied"):
        raise ValueError(f"status must be 'pending', 'approved' or 'denied', got {status!r}")
    opened, owned = _opened(store, write=False)
    try:
        found = [approval_of(opened, node, label) for label, node in _requests(opened, run)]
    finally:
        if owned:
            opened.close()
    found = [a for a in found if status is None or a.status == status]
    return sorted(found, key=lambda a: (a.requested_at or "", a.request_id))


def decide_approval(
    store: Store | str | os.PathLike[str],
    request_id: str,
    decision: Literal["approve", "deny"],
    *,
    by: object,
    reason: str | None = None,
) -> Approval:
    """Record the decision of an approval request, exactly once.

    The first decision wins across threads and processes (one store claim); it is recorded in
    the tree as a ``note`` under the request and mirrored in the request's meta. The actor who
    asked cannot decide their own request.

    Args:
        store: A `Store`, a SQLite path or a ``postgresql://...#store_id`` spec.
        request_id: The request id (`ApprovalRequired.request_id`, ``pollard approvals``).
        decision: ``"approve"`` or ``"deny"``.
        by: Who decides: a non-empty str or an object with a ``.name``.
        reason: Why (recorded with the decision; keep secrets out of it).

    Returns:
        The approval with the decision that stands.

    Raises:
        ApprovalConflict: The request was already decided (the standing decision is named).
        KeyError: No such request.
        ValueError: A bad ``decision``, a node that is not a request, or self-approval.
    """
    status = _DECISIONS.get(decision) if isinstance(decision, str) else None
    if status is None:
        raise ValueError(f"decision must be 'approve' or 'deny', got {decision!r}")
    who = actor_name(by)
    if who is None:
        raise ValueError("decide_approval needs by=, who decides (a name)")
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"reason must be a str or None, got {type(reason).__name__}")
    opened, owned = _opened(store, write=True)
    try:
        node = _request_node(opened, request_id)
        asked = node.payload.get("actor") if isinstance(node.payload, Mapping) else None
        if asked is not None and asked == who:
            raise ValueError(
                f"{who!r} asked for approval request {request_id}: an actor cannot decide its "
                "own request; ask someone else to decide it"
            )
        record = {
            "event": DECISION_EVENT,
            "request": request_id,
            "status": status,
            "by": who,
            "reason": reason,
            "decided_at": utc_now_iso(),
        }
        mine = json_text(record)
        winner = opened.claim(f"approval:{request_id}:decision", mine)
        standing = json.loads(winner)
        _record_decision(opened, node, standing)
        approval = approval_of(opened, opened.get(request_id), _run_label(opened, node))
    finally:
        if owned:
            opened.close()
    if winner != mine:
        raise ApprovalConflict(
            f"approval request {request_id} was already {standing.get('status')} by "
            f"{standing.get('by')!r} at {standing.get('decided_at')}; a decision is final",
            request_id,
            status=_text(standing.get("status")),
            decided_by=_text(standing.get("by")),
        )
    return approval


def _record_decision(store: Store, request: Node, standing: Mapping[str, Any]) -> None:
    """Write the winning decision into the tree (idempotent: every decider writes the same)."""
    note = Node.create(
        NodeKind.NOTE,
        request.id,
        dict(standing),
        meta={"created_at": standing.get("decided_at")},
    )
    store.put(note)
    view = {
        "status": standing.get("status"),
        "by": standing.get("by"),
        "decided_at": standing.get("decided_at"),
        "decision_id": note.id,
    }
    if request.meta.get("approval") != view:
        store.update_meta(request.id, {"approval": view})


# -- the firewall's side ---------------------------------------------------------------------


def require(
    state: RunState,
    spec: ActionSpec,
    registry_digest: str,
    redacted_args: Any,
    blocked: Mapping[str, Any],
    actor: str | None,
    attempt: int,
    policy: str,
) -> Step:
    """Return the approved request node of this call, or record the request/refusal and raise.

    Raises:
        ApprovalRequired: No decision yet (the request is recorded; the cursor does not move).
        ApprovalDenied: The request was denied (a refusal is recorded under the cursor).
    """
    rt = state.rt
    body = request_payload(spec, registry_digest, redacted_args, blocked, actor, attempt)
    request = Node.create(NodeKind.REFUSAL, state.cursor_id, body)
    found: Node | None = yield io(rt.store.find, request.id)
    decision: Node | None = None
    if found is not None:
        decision = yield io(_decision, rt.store, request.id)
    recorded = decision.payload if decision is not None else None
    status = recorded.get("status") if isinstance(recorded, Mapping) else None
    action = f"{spec.name}@{spec.version}"
    if status == "approved":
        assert found is not None
        return found
    if status == "denied":
        assert decision is not None and isinstance(decision.payload, Mapping)
        by = _text(decision.payload.get("by"))
        why = _text(decision.payload.get("reason"))
        detail = f"approval request {request.id} was denied by {by!r}" + (f": {why}" if why else "")
        payload = {
            "reason": "policy",
            "rule": _DENIED_RULE,
            "detail": detail,
            "blocked_kind": _TOOL,
            "blocked_payload_digest": body["blocked_payload_digest"],
            "tool": spec.name,
            "version": spec.version,
            "spec_digest": spec.spec_digest,
            "request": request.id,
        }

        def denied(refusal_id: str) -> PollardError:
            return ApprovalDenied(
                f"tool_call {action} refused: {detail}",
                refusal_id,
                request.id,
                decided_by=by,
                reason=why,
            )

        yield from state.refuse(payload, denied, meta={"registry_digest": registry_digest})
    who = "no actor" if actor is None else f"actor {actor!r}"

    def required(request_id: str) -> PollardError:
        return ApprovalRequired(
            f"tool_call {action} by {who} needs a stored approval (policy {policy}); "
            f"approval request {request_id} is pending",
            request_id,
            actor=actor,
            action=action,
        )

    # Recorded (the ledger is the truth) while the cursor stays where the call was asked, as
    # for a confirmation: the approved call goes there.
    cursor, depth = state.cursor_id, state.depth
    try:
        yield from state.refuse(
            body, required, meta={"registry_digest": registry_digest, "policy": policy}
        )
    finally:
        state.cursor_id, state.depth = cursor, depth


def spend(state: RunState, request: Node, step_id: str) -> Step:
    """Spend an approved request on the call's step node (one claim; idempotent for that node).

    Raises:
        ApprovalConflict: The approval was spent on another node (which its binding rules out,
            so the ledger was changed behind pollard's back).
    """
    rt = state.rt
    if rt.mode == "replay":  # replay writes nothing and runs nothing
        return
    winner = yield io(rt.store.claim, f"approval:{request.id}:spent", step_id)
    if winner != step_id:
        raise ApprovalConflict(
            f"approval request {request.id} was spent on node {winner}, not on {step_id}",
            request.id,
            status="approved",
        )
    if request.meta.get("approval_spent_on") != step_id:
        yield io(rt.store.update_meta, request.id, {"approval_spent_on": step_id})
