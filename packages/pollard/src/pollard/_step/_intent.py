"""Effects run once: a tool step's intent is recorded before the tool runs.

Before a tool function runs, its intent is claimed in the store (``effect:<node id>:<n>``, a
durable claim outside the tree, so the tree's shape and seals do not change) and the tool is
handed an idempotency key, the step's node id, through `idempotency_key`. The step's outcome
resolves the intent: its node is committed, or the failure is claimed as the intent's outcome.
On the next call of the same step:

* a stored step is a completed effect: it is served from the ledger, not run again;
* an intent with no outcome is an effect that was in flight when its process died: the step is
  ``ambiguous`` and `EffectAmbiguous` names it, never running it silently a second time.

Intent keys are pure functions of the step's id and the dispatch number, so finding the latest
intent is a few key lookups, whatever the parent's size.
"""

from __future__ import annotations

import contextvars
import uuid
from typing import TYPE_CHECKING

from pollard._core._node import Node
from pollard._step._effects import Step, io
from pollard.errors import EffectAmbiguous, PollardError

if TYPE_CHECKING:
    from pollard._step._state import CursorState

__all__ = ["begin", "fail", "idempotency_key", "running"]

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("pollard_effect", default=None)


def idempotency_key() -> str:
    """Return the idempotency key of the tool step whose function is running in this context.

    The key is the tool step's node id: stable across a crash and a resume of the same step
    (same payload, parent and attempt), different for a deliberate repeat (another attempt).
    Pass it to the system the tool changes (an ``Idempotency-Key`` header, a unique column) so
    a second delivery of the same effect is recognised there.

    Raises:
        PollardError: Called outside a tool function pollard is running.
    """
    key = _KEY.get()
    if key is None:
        raise PollardError(
            "idempotency_key() was called outside a tool step",
            hint="call it inside the function passed to run.tool_call (or a registered "
            "handler), in the same thread or task pollard calls it in",
        )
    return key


def running() -> contextvars.ContextVar[str | None]:
    """The context variable holding the running tool step's key."""
    return _KEY


def begin(state: CursorState, node: Node, *, completed: bool = False) -> Step:
    """Check for an ambiguous earlier dispatch, then record this one's intent; return its key.

    Dispatch ``n`` of a step claims ``effect:<node id>:<n>`` (a store claim: one winner across
    processes, flushed before it is acknowledged). A taken slot is an earlier dispatch: one
    whose failure was recorded lets the next slot be tried; one with no outcome was in flight
    when its process stopped (or is running elsewhere right now), so the step is ambiguous.
    ``completed`` (the step's node is stored: a deliberate re-run, such as a newly confirmed
    request) takes the next free slot without judging the earlier ones.
    """
    store = state.rt.store
    token = uuid.uuid4().hex
    number = 0
    while True:
        key = f"effect:{node.id}:{number}"
        if (yield io(store.claim, key, token)) == token:
            return key
        if completed:
            number += 1
            continue
        outcome = yield io(store.claim, f"{key}:outcome", "ambiguous")
        if outcome == "ambiguous":
            raise EffectAmbiguous(
                f"tool step {node.id} was in flight when its process stopped (or runs in "
                "another process): its effect may or may not have happened, so it is not run "
                "again",
                node.id,
                key,
            )
        number += 1


def fail(state: CursorState, intent_key: str) -> Step:
    """Mark an intent resolved by a recorded failure (the step may be retried)."""
    yield io(state.rt.store.claim, f"{intent_key}:outcome", "failed")
