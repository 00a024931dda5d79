"""Settlement: commit a node with its charges in one store transaction, and account for it.

Every dispatch that may have cost money is charged and recorded without changing any node's
identity:

* a new step commits its node with its charges;
* a repeated dispatch of a node that is already stored (the same call under the same parent,
  after a rollback or in a re-run script) keeps that node: its charges are committed with a
  ``call_repeated`` note beside it, and a different result is kept in the node's
  ``meta["result_conflicts"]`` (the first result stands, so every mode serves the same branch;
  the list keeps the first and the latest differing result, ``result_conflict_count`` counts
  them);
* a failed or cancelled dispatch commits a ``call_failed`` / ``call_cancelled`` note charged at
  what is known.

Notes about dispatches take the next free attempt (`commit_new`, the one "next attempt" loop), so
each dispatch is its own record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pollard._core._amounts import charges_meta
from pollard._core._ledger import ZERO, WindowEvent, to_decimal, utc_now_iso
from pollard._core._node import Node, NodeKind
from pollard._step._admission import Estimates
from pollard._step._context import Unrecorded
from pollard._step._effects import Emit, Io, Step, io

if TYPE_CHECKING:
    from pollard._step._state import CursorState

__all__ = [
    "DISPATCH_EVENTS",
    "charges",
    "commit_new",
    "record_failure",
    "settle",
    "settle_dry_run",
    "stored",
]

DISPATCH_EVENTS = frozenset({"call_failed", "call_cancelled", "call_repeated"})
"""Note events that record a dispatch beside the tree's path (never a cursor position)."""


def stored(state: CursorState, node: Node) -> Step:
    """Deliver a newly stored node to the runtime's ``on_node`` hook."""
    if state.rt.on_node is not None:
        yield Emit(state.rt.on_node, node, swallow=True)


def commit_new(
    state: CursorState,
    node: Node,
    charges: Mapping[str, Decimal],
    windows: Sequence[WindowEvent] = (),
    reservation: str | None = None,
) -> Step:
    """Commit ``node`` at the first free attempt >= its own; return the committed node.

    This is the one "next attempt" loop: records of dispatches (failure and repeat notes) and a
    call whose id holds only a dry-run record take the first attempt not stored yet.
    """
    while not (yield _commit(state, node, charges, windows, reservation)):
        node = _next_attempt(node)
    state.add_spent(charges)
    yield from stored(state, node)
    return node


def _commit(
    state: CursorState,
    node: Node,
    charges: Mapping[str, Decimal],
    windows: Sequence[WindowEvent],
    reservation: str | None,
) -> Io:
    """The effect committing ``node`` with its charges into every scope (False: id exists).

    A step cancelled while its commit runs in a worker thread never sees the commit's answer,
    so the charges a finished commit settled are counted as spent there (``undo``): the run's
    ``spent`` is what the ledger charged, cancellation or not.
    """

    def counted(committed: bool) -> None:
        if committed:
            state.add_spent(charges)

    return io(
        state.rt.store.commit,
        node,
        undo=counted,
        scopes=state.scope_ids(),
        charges=charges,
        windows=windows,
        reservation_id=reservation,
    )


def settle(
    state: CursorState, final: Node, charges: Mapping[str, Decimal], reservation: str | None
) -> Step:
    """Commit an executed (or dry-run) step; the cursor moves onto the node that stands for it."""
    rt = state.rt
    events = [
        WindowEvent(meter.key(state.root_id), meter.name, charges[meter.name])
        for meter in rt.windows
        if charges.get(meter.name, ZERO) > 0
    ]
    try:
        if rt.writer_due:  # alive in the store before its first step names it the writer
            yield io(rt.register_writer)
        elif state.leased == final.parent and state.writer_lapsed():
            yield from state.check_writer()  # fenced: another writer may have taken the node
        committed = yield _commit(state, final, charges, events, reservation)
    except Exception as exc:
        if getattr(exc, "connection_lost", False) and final.result is not None:
            # The step ran: its hold is kept (renewed) and the commit retried before this
            # runtime admits another step, so a one-step budget never admits a second call.
            rt.keep_unrecorded(
                Unrecorded(final, state.scope_ids(), dict(charges), events, reservation)
            )
        raise
    own = bool(committed)
    if committed:
        state.add_spent(charges)
        yield from stored(state, final)
    else:
        existing: Node | None = yield io(rt.store.find, final.id)
        if existing is not None and (existing.result is not None or final.result is None):
            return (yield from _repeated(state, final, existing, charges, events, reservation))
        # A recorded dry run of this call (no result) is not the call: the real one takes the
        # next attempt rather than hide its result. An id dropped meanwhile is free again.
        start = final if existing is None else _next_attempt(final)
        final = yield from commit_new(state, start, charges, events, reservation)
    state.move(final)
    state.own_cursor = own
    if rt.mode != "record":  # only served steps consult the verified-prefix cache
        rt.verified.add(final.id)
    return final


def _repeated(
    state: CursorState,
    final: Node,
    existing: Node,
    charges: Mapping[str, Decimal],
    events: Sequence[WindowEvent],
    reservation: str | None,
) -> Step:
    """A repeated dispatch of a stored node: charge it beside the node, keep the node."""
    store = state.rt.store
    if final.result_digest != existing.result_digest:
        yield io(store.put, final)  # records this result in meta["result_conflicts"]
        existing = yield io(store.get, existing.id)
    payload = {
        "event": "call_repeated",
        "kind": final.kind.value,
        "attempt": final.attempt,
        "payload_digest": hashlib.sha256(final.canonical_payload or b"").hexdigest(),
        "node": final.id,
    }
    meta: dict[str, Any] = {
        key: final.meta[key] for key in ("created_at", "duration_s") if key in final.meta
    }
    meta.update(charges_meta(charges))
    note = Node.create(NodeKind.NOTE, final.parent, payload, meta=meta)
    yield from commit_new(state, note, charges, events, reservation)
    state.move(existing)
    return existing


def settle_dry_run(
    state: CursorState,
    node: Node,
    charges: Mapping[str, Any] | None,
    meta: Mapping[str, Any] | None,
) -> Step:
    """Commit a dry-run record (no result; charges default to one step)."""
    raw = charges if charges is not None else {"steps": 1}
    amounts = {name: to_decimal(value) for name, value in raw.items()}
    amounts = {name: value for name, value in amounts.items() if value != 0}
    full_meta = {
        "created_at": utc_now_iso(),
        "dry_run": True,
        **(meta or {}),
        **charges_meta(amounts),
    }
    return (yield from settle(state, node.with_meta(full_meta), amounts, None))


def record_failure(
    state: CursorState,
    node: Node,
    exc: BaseException,
    estimates: Estimates,
    reservation: str | None,
    duration: float,
) -> Step:
    """Record a failed or cancelled dispatch as a note charged at the estimate."""
    kind = node.kind.value
    meta: dict[str, Any] = {
        "created_at": utc_now_iso(),
        "duration_s": round(duration, 6),
        "error_type": type(exc).__name__,
    }
    amounts = charges(state, kind, node.payload, None, meta, estimates=estimates)
    meta.update(charges_meta(amounts))
    outcome = "failed" if isinstance(exc, Exception) else "cancelled"
    payload = {
        "event": f"call_{outcome}",
        "kind": kind,
        "attempt": node.attempt,
        "payload_digest": hashlib.sha256(node.canonical_payload or b"").hexdigest(),
        "error": type(exc).__name__,
    }
    failure = Node.create(NodeKind.NOTE, node.parent, payload, meta=meta)
    yield from commit_new(state, failure, amounts, (), reservation)


def charges(
    state: CursorState,
    kind: str,
    payload: Any,
    result: Any,
    meta: Mapping[str, Any],
    *,
    estimates: Estimates | None,
) -> dict[str, Decimal]:
    """Every meter's charge for a step; with ``estimates`` (a failed step) the known amounts."""
    out: dict[str, Decimal] = {}
    for meter in state.rt.meters:
        amount: Decimal | None = None
        if estimates is not None:
            amount = estimates.get(meter.name, (None, False))[0]
        if amount is None:
            try:
                raw = meter.charge(kind, payload, result, meta)
                # ints (most charges) skip the general conversion
                amount = Decimal(raw) if type(raw) is int else to_decimal(raw)
            except Exception:
                if estimates is None:
                    raise
                amount = ZERO  # a failed step is charged what is known
        if amount != 0:
            out[meter.name] = amount
    return out


def _next_attempt(node: Node) -> Node:
    return Node.create(
        node.kind,
        node.parent,
        node.payload,
        attempt=node.attempt + 1,
        result=node.result,
        meta=node.meta,
    )
