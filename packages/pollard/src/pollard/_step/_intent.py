"""Effects run once: a tool step's intent is recorded before the tool runs.

Before a tool function runs, an ``effect_intent`` note is stored beside the step (under the same
parent, never a cursor position) and the tool is handed an idempotency key, the step's node id,
through `idempotency_key`. The step's outcome resolves the intent: its node is committed, or the
intent is marked ``outcome: failed``. On the next call of the same step:

* a stored step is a completed effect: it is served from the ledger, not run again;
* an intent with no outcome is an effect that was in flight when its process died: the step is
  ``ambiguous`` and `EffectAmbiguous` names it, never running it silently a second time.

Intent ids are pure functions of the step's id and the dispatch number, so finding the latest
intent is a few key lookups, whatever the parent's size.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from pollard._core._ledger import utc_now_iso
from pollard._core._node import Node, NodeKind
from pollard._step._effects import Step, io
from pollard.errors import EffectAmbiguous, PollardError

if TYPE_CHECKING:
    from pollard._step._cursor import RunState

__all__ = ["begin", "fail", "idempotency_key", "resolve", "running"]

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


def _intent(parent: str | None, node_id: str, number: int) -> Node:
    payload = {"event": "effect_intent", "node": node_id}
    return Node.create(NodeKind.NOTE, parent, payload, attempt=number)


def _latest(state: RunState, parent: str | None, node_id: str) -> Step:
    """``(next dispatch number, latest intent or None)`` of a tool step."""
    store = state.rt.store
    number, last = 0, None
    while True:
        found: Node | None = yield io(store.find, _intent(parent, node_id, number).id)
        if found is None:
            return number, last
        last, number = found, number + 1


def begin(state: RunState, node: Node) -> Step:
    """Check for an ambiguous earlier dispatch, then record this one's intent; return its id."""
    number, last = yield from _latest(state, node.parent, node.id)
    if last is not None and last.meta.get("outcome") is None:
        raise EffectAmbiguous(
            f"tool step {node.id} was in flight when its process stopped: its effect may or "
            "may not have happened, so it is not run again",
            node.id,
            last.id,
        )
    intent = _intent(node.parent, node.id, number).with_meta({"created_at": utc_now_iso()})
    yield io(state.rt.store.put, intent)
    return intent.id


def fail(state: RunState, intent_id: str) -> Step:
    """Mark an intent resolved by a recorded failure (the step may be retried)."""
    yield io(state.rt.store.update_meta, intent_id, {"outcome": "failed"})


def resolve(state: RunState, node_id: str) -> Step:
    """Mark the ambiguous intent of ``node_id`` (called under the cursor) resolved; True if any.

    The next call of the step runs it (with the same idempotency key).
    """
    _number, last = yield from _latest(state, state.cursor_id, node_id)
    if last is None or last.meta.get("outcome") is not None:
        return False
    yield io(state.rt.store.update_meta, last.id, {"outcome": "resolved"})
    return True
