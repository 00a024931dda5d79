"""The errors pollard raises.

Refusals are data (a recorded ``refusal`` node); errors are exceptions. When pollard refuses a step
it records the refusal node first and then raises, so the exception names a node that exists::

    PollardError                        every pollard error; carries a ``hint``
    ├── BudgetExceeded                  a budget or window refused a step  (refusal_id, meter)
    ├── PolicyViolation                 the registry firewall refused      (refusal_id, detail)
    │   └── ApprovalDenied              its stored approval was denied     (request_id)
    ├── ConfirmationRequired            a policy asks for confirmation     (resume_token)
    ├── ApprovalRequired                a call waits for a stored approval (request_id)
    ├── ApprovalConflict                an approval decided twice, or spent elsewhere (request_id)
    ├── EffectAmbiguous                 a tool step was in flight at a crash (node_id)
    ├── WriterConflict                  another live writer appends at a node (node_id)
    ├── MissingRecording  (LookupError) replay found no recorded step      (node_id)
    ├── IntegrityError    (ValueError)  stored history does not verify     (node_id)
    └── UnsupportedSchema (ValueError)  a schema outside the subset        (path)

Every class accepts the message first and keeps ``str(error)`` equal to it, so
``pytest.raises(BudgetExceeded, match=...)`` works on the message alone.
"""

from __future__ import annotations

__all__ = [
    "ApprovalConflict",
    "ApprovalDenied",
    "ApprovalRequired",
    "BudgetExceeded",
    "ConfirmationRequired",
    "EffectAmbiguous",
    "IntegrityError",
    "MissingRecording",
    "PolicyViolation",
    "PollardError",
    "UnsupportedSchema",
    "WriterConflict",
]


class PollardError(Exception):
    """Base class of every error pollard raises.

    Attributes:
        message: The human-readable message (also ``str(error)``).
        hint: How to fix the problem, or ``None`` when there is nothing to add.
    """

    default_hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def __str__(self) -> str:
        return self.message


class BudgetExceeded(PollardError):
    """A budget limit or rate window refused a step before it ran.

    The refusal is recorded as a ``refusal`` node under the cursor, and the cursor moves onto it.

    Attributes:
        refusal_id: The id of the recorded refusal node.
        meter: The meter that refused (for example ``"tokens"``), when known.
        reason: ``"budget"``, ``"window"`` or ``"unbounded"`` (a hard meter could not bound
            the step's worst case), when known.
    """

    default_hint = (
        "raise the Budget limit, branch with its own budget, or inspect run.report() to see "
        "what was spent"
    )

    def __init__(
        self,
        message: str,
        refusal_id: str,
        *,
        meter: str | None = None,
        reason: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.refusal_id = refusal_id
        self.meter = meter
        self.reason = reason


class PolicyViolation(PollardError):
    """The registry firewall or a policy refused a tool call.

    Attributes:
        refusal_id: The id of the recorded refusal node.
        detail: The refusal detail recorded in the refusal payload, when known.
    """

    default_hint = "register the action (name and version) or change the policy that denied it"

    def __init__(
        self,
        message: str,
        refusal_id: str,
        *,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.refusal_id = refusal_id
        self.detail = detail


class ConfirmationRequired(PollardError):
    """A policy requires confirmation before the tool call may run.

    Attributes:
        resume_token: Pass it to ``run.confirm(token)`` to execute the pending call.
    """

    default_hint = "call run.confirm(error.resume_token) once a person has approved the action"

    def __init__(self, message: str, resume_token: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.resume_token = resume_token


class ApprovalRequired(PollardError):
    """A policy requires a stored approval for this call, and none is approved yet.

    The request is recorded in the ledger (a ``refusal`` node with ``rule: "approval_required"``
    bound to the actor, the action, the registry digest and the argument digest); its id is
    ``request_id``. Decide it from any process (``pollard approve STORE REQUEST --by NAME`` or
    `pollard.decide_approval`), then make the same call again: it runs once.

    Attributes:
        request_id: The id of the recorded approval request.
        actor: Who asked (``None`` when the call named no actor).
        action: The registered action (``name@version``).
    """

    default_hint = (
        "decide the request (pollard approve STORE REQUEST --by NAME, or "
        "pollard.decide_approval(store, request_id, 'approve', by=...)), then make the same call "
        "again; run.confirm cannot stand in for a stored approval"
    )

    def __init__(
        self,
        message: str,
        request_id: str,
        *,
        actor: str | None = None,
        action: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.request_id = request_id
        self.actor = actor
        self.action = action


class ApprovalDenied(PolicyViolation):
    """The stored approval request of this call was denied (a recorded refusal).

    Attributes:
        refusal_id: The id of the refusal recorded for this call.
        request_id: The id of the denied approval request.
        decided_by: Who denied it.
        reason: The reason they gave, or ``None``.
    """

    default_hint = (
        "a denial is final for this call; ask again as a new request with the next attempt= "
        "(run.tool_call(..., attempt=N)) if the situation changed"
    )

    def __init__(
        self,
        message: str,
        refusal_id: str,
        request_id: str,
        *,
        decided_by: str | None = None,
        reason: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, refusal_id, detail=message, hint=hint)
        self.request_id = request_id
        self.decided_by = decided_by
        self.reason = reason


class ApprovalConflict(PollardError):
    """An approval cannot take this decision or this use: it was decided (or spent) already.

    A decision is recorded exactly once (the first one wins, across processes), and an approval
    is spent on exactly one execution of exactly one call.

    Attributes:
        request_id: The approval request.
        status: What stands: ``"approved"`` or ``"denied"``.
        decided_by: Who took the standing decision.
    """

    default_hint = (
        "a decision is final: list it with `pollard approvals STORE --all`; ask again with a "
        "new request (the call's next attempt=) if it must change"
    )

    def __init__(
        self,
        message: str,
        request_id: str,
        *,
        status: str | None = None,
        decided_by: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.request_id = request_id
        self.status = status
        self.decided_by = decided_by


class EffectAmbiguous(PollardError):
    """A tool step was in flight when its process stopped: its effect may have happened.

    pollard recorded the step's intent before the tool ran and found neither its result nor a
    recorded failure, so it does not run the tool again on its own.

    Attributes:
        node_id: The tool step's node id (also the idempotency key the tool was given).
        intent_id: The store claim that recorded the dispatch (``effect:<node id>:<n>``).
    """

    default_hint = (
        "check the tool's target for the effect under this idempotency key (the node id); "
        "to run the tool again deliberately, call it with the next attempt= (a new step)"
    )

    def __init__(
        self, message: str, node_id: str, intent_id: str, *, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.node_id = node_id
        self.intent_id = intent_id


class WriterConflict(PollardError):
    """Another live writer (a runtime in another process) is appending under the same node.

    A run has one writer at a time, its root included: two processes that append to the same
    run at the same cursor (one label, or one resumed leaf) would fork it unnoticed, so the
    second is refused before its step runs (or, when its lease lapsed and another writer took
    the node over, at its commit). Workers that each start their own steps under one label
    open the run with ``runtime.run(label, shared=True)``.

    A writer that crashed on this host (SIGKILL, an OOM kill) is taken over at once, so it
    never causes this error; one on another host, or one whose liveness cannot be read, holds
    the node until its lease ends.

    Attributes:
        node_id: The node both writers append under.
        host: The host name of the process holding it, or None when it recorded none (a
            writer of an older pollard).
        pid: That process's id, or None.
        alive: True when it runs on this host and is still running (wait for it or stop it);
            None when its liveness cannot be told from here (another host): its lease ends
            at most a lease after its last renewal.
    """

    default_hint = (
        "let one process write this run at a time (another one is appending at this node); "
        "start your own line with run.branch(...) or another run label, or wait for the other "
        "writer to finish (its lease ends when its process stops)"
    )

    def __init__(
        self,
        message: str,
        node_id: str,
        *,
        hint: str | None = None,
        host: str | None = None,
        pid: int | None = None,
        alive: bool | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.node_id = node_id
        self.host = host
        self.pid = pid
        self.alive = alive


class MissingRecording(PollardError, LookupError):
    """Replay mode found no recorded step for a call (replay never calls your function).

    Attributes:
        node_id: The node id the call computes to.
        payload_summary: A content-free summary of the call (kind, model or tool, payload digest).
    """

    default_hint = (
        "record the run first (mode='record' or 'hybrid'), or make the call identical to the "
        "recorded one"
    )

    def __init__(
        self,
        message: str,
        node_id: str,
        payload_summary: str = "",
        *,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.node_id = node_id
        self.payload_summary = payload_summary


class IntegrityError(PollardError, ValueError):
    """Stored history does not verify: an id, digest or ancestry does not match its content.

    Attributes:
        node_id: The node at fault, when known.
    """

    default_hint = "run `pollard verify` on the store and restore it from a sealed export"

    def __init__(
        self, message: str, node_id: str | None = None, *, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.node_id = node_id


class UnsupportedSchema(PollardError, ValueError):
    """An ActionSpec schema uses a keyword or type outside the supported subset (fail closed).

    Attributes:
        path: The JSON path of the offending schema part, when known.
    """

    default_hint = "use only the documented JSON Schema subset for registered actions"

    def __init__(self, message: str, path: str | None = None, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path
