"""Caller-charged records: steps whose charges the caller measured, committed exactly once.

A deferred (batch) job is the case: its cost is known only hours later, in another process, and
its price tier is not the one the runtime's meters apply. So the caller states the charges:

* at submit, a step charged its worst case is admitted against every limit with those charges as
  exact estimates (one atomic reserve, held only while ``fn`` submits), then committed with them;
  the budget counts the job at once and durably, with no lease that has to outlive the process;
* at collect, records under the job node settle the actual usage, and a record with a negative
  charge (a credit) gives back the worst case. Their ids are pure functions of
  ``(kind, payload, parent, attempt)``, and a record whose id is already stored is returned as is,
  charged nothing: so collecting twice, or from two processes, credits once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pollard._core._amounts import charges_meta
from pollard._core._ledger import BudgetClaim, to_decimal, utc_now_iso
from pollard._core._node import Node, NodeKind
from pollard._step import _admission as admission
from pollard._step import _replay as replay
from pollard._step._effects import Invoke, Step, io
from pollard.errors import PollardError

if TYPE_CHECKING:
    from pollard._step._state import CursorState

__all__ = ["record_charged"]


def _amounts(charges: Mapping[str, Any]) -> dict[str, Decimal]:
    if not isinstance(charges, Mapping):
        raise TypeError("charges must be a mapping of meter name -> amount")
    out: dict[str, Decimal] = {}
    for name, value in charges.items():
        if not isinstance(name, str) or not name:
            raise TypeError("charge names must be non-empty str (meter names)")
        amount = to_decimal(value)
        if amount != 0:
            out[name] = amount
    return out


def record_charged(
    state: CursorState,
    kind: str | NodeKind,
    payload: Any,
    *,
    charges: Mapping[str, Any],
    fn: Callable[[Any], Any] | None = None,
    result: Any = None,
    parent: str | None = None,
    attempt: int = 0,
    meta: Mapping[str, Any] | None = None,
    unknown: Collection[str] = (),
) -> Step:
    """Record one node with caller-stated charges, exactly once; return the stored node.

    With ``fn``, the charges' positive amounts are first admitted against every limit of the
    run (a refusal is recorded and raised before ``fn`` runs), then ``fn(payload)`` produces the
    result. Without ``fn``, ``result`` is recorded and nothing is checked: a settlement of what
    was admitted earlier. A node already stored at this id is returned, charged nothing.
    ``parent`` (a node of this run) records beside the cursor without moving it; by default the
    node goes under the cursor and the cursor moves onto it. ``unknown`` names meters whose amount
    the caller cannot state (an unpriced model): a run that limits one of them is refused before
    ``fn`` runs (fail closed), and the node's meta lists them as ``"unknown_charges"``.
    """
    rt = state.rt
    amounts = _amounts(charges)
    if parent is not None:
        state.ancestors(parent)  # raises unless the node is in this run
    node = Node.create(kind, parent or state.cursor_id, payload, attempt=attempt)
    found: Node | None = yield io(rt.store.find, node.id)
    if found is not None:
        if parent is None:
            return (yield from replay.serve(state, found, None))
        return found
    if rt.mode == "replay":
        yield from replay.recorded(state, node, executable=True)  # raises MissingRecording
    reservation: str | None = None
    held: str | None = None
    if fn is not None:
        yield from admission.check_depth(state, node)
        for scope in state.scopes:
            blind = sorted(name for name, _ in scope.metered if name in unknown)
            if blind:
                raise PollardError(
                    f"the {', '.join(blind)} budget cannot admit a step whose "
                    f"{', '.join(blind)} charge is unknown",
                    hint="give the model a price, or run without that budget",
                )
        claims = [
            BudgetClaim(scope.id, name, limit, max(amounts.get(name, Decimal(0)), Decimal(0)))
            for scope in state.scopes
            for name, limit in scope.metered
        ]
        if claims:
            admitted = yield io(rt.reserve, claims, [], undo=rt.release_admission)
            if admitted.shortfall is not None:
                yield from admission.refuse_budget(state, admitted.shortfall, node)
            reservation = held = admitted.reservation_id
    try:
        if fn is not None:
            result = yield Invoke(fn, payload)
        full_meta = {"created_at": utc_now_iso(), **(meta or {}), **charges_meta(amounts)}
        if unknown:
            full_meta["unknown_charges"] = sorted(unknown)
        final = Node.create(
            kind, node.parent, payload, attempt=attempt, result=result, meta=full_meta
        )
        committed = yield io(
            rt.store.commit,
            final,
            scopes=state.scope_ids(),
            charges=amounts,
            reservation_id=reservation,
        )
        if committed:
            reservation = None  # the commit settled it
            state.add_spent(amounts)
            if rt.on_node is not None:
                from pollard._step._settle import stored

                yield from stored(state, final)
        else:  # another process recorded it meanwhile: its charges stand, ours are dropped
            final = yield io(rt.store.get, final.id)
        if parent is None:
            state.move(final)
        return final
    finally:
        if reservation is not None:  # fn failed, or the node existed: nothing is held for it
            rt.store.release(reservation)
        if held is not None:
            rt.keeper.remove(held)
