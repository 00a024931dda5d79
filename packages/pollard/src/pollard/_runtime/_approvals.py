"""``request_approval``: ask for a stored approval of a registered call before making it.

The request is the one the firewall records (and looks up) when an `ApprovalPolicy` holds the
call, so deciding it approves exactly that call at that point of the run.
"""

from __future__ import annotations

from typing import Any

from pollard._governance._approvals import Approval, actor_name, approval_of
from pollard._governance._firewall import Firewall
from pollard._runtime._async import AsyncRun, offload_of
from pollard._runtime._sync import Run, gate_of, run_state
from pollard._step._cursor import RunState
from pollard._step._effects import Step, drive_async, drive_sync, io

__all__ = ["arequest_approval", "request_approval"]


def _firewall(state: RunState) -> Firewall:
    gate = gate_of(state, "request_approval()")
    if not isinstance(gate, Firewall):  # pragma: no cover - the shells only build Firewalls
        raise TypeError("request_approval needs the runtime's registry firewall")
    return gate


def _request(
    state: RunState,
    action: str,
    args: Any,
    version: str | None,
    attempt: int,
    actor: object,
) -> Step:
    fw = _firewall(state)
    node = yield from fw.request_approval(
        state, action, args, version=version, attempt=attempt, actor=actor_name(actor)
    )
    return (yield io(approval_of, state.rt.store, node, state.label))


def request_approval(
    run: Run,
    action: str,
    args: Any,
    *,
    actor: object = None,
    version: str | None = None,
    attempt: int = 0,
) -> Approval:
    """Record the approval request of a registered call at the run's cursor, without calling it.

    It is the request the call itself would record under an `ApprovalPolicy` (bound to the
    actor, the action, the registry digest and the argument digest), so once it is approved,
    ``run.tool_call(action, args, actor=actor)`` at this point runs exactly once. Asking again
    returns the same request, with its decision when it has one. The cursor does not move.

    Args:
        run: A `Run` of a runtime with a registry (use `arequest_approval` for an `AsyncRun`).
        action: The registered action's name.
        args: The arguments the call will be made with.
        actor: Who will make the call: a str or an object with a ``.name`` (a team agent);
            default: the cursor's actor, if any.
        version: The action's version (checked against the registry).
        attempt: The call's attempt number.

    Returns:
        The `Approval` (``status`` ``"pending"`` for a new request).

    Raises:
        PollardError: The runtime has no registry.
        ValueError: An unknown action, another version, or arguments that fail the schema.
    """
    if not isinstance(run, Run):
        raise TypeError(
            f"request_approval takes a Run, got {type(run).__name__}; "
            "use await arequest_approval(...) for an AsyncRun"
        )
    return drive_sync(_request(run_state(run), action, args, version, attempt, actor))  # type: ignore[no-any-return]


async def arequest_approval(
    run: AsyncRun,
    action: str,
    args: Any,
    *,
    actor: object = None,
    version: str | None = None,
    attempt: int = 0,
) -> Approval:
    """`request_approval` for an `AsyncRun` (store I/O off the event loop)."""
    if not isinstance(run, AsyncRun):
        raise TypeError(
            f"arequest_approval takes an AsyncRun, got {type(run).__name__}; "
            "use request_approval(...) for a Run"
        )
    state = run_state(run)
    return await drive_async(  # type: ignore[no-any-return]
        _request(state, action, args, version, attempt, actor), offload_of(run)
    )
