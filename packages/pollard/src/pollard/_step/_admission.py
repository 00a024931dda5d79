"""Admission: may this step run? Depth, estimates, one atomic reserve, and recorded refusals.

Every limit is checked by one store call (`RuntimeCore.reserve`), which applies the ledger's
admission rule to every scope and window at once; a refusal is data (a recorded node) and then an
exception.
"""

from __future__ import annotations

import contextvars
import hashlib
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

from pollard._core._amounts import plain
from pollard._core._ledger import (
    ZERO,
    Admission,
    BudgetClaim,
    Shortfall,
    WindowClaim,
    decimal_text,
    to_decimal,
    utc_now_iso,
)
from pollard._core._node import Node, NodeKind
from pollard._step._effects import Effect, Emit, Pause, Step, io
from pollard.errors import BudgetExceeded, MissingRecording, PollardError

if TYPE_CHECKING:
    from pollard._step._state import CursorState

__all__ = [
    "Estimates",
    "admit",
    "check_depth",
    "net_estimates",
    "precheck",
    "refuse",
    "refuse_budget",
]

Estimates = dict[str, tuple[Decimal | None, bool]]
"""Precheck estimates by meter: ``(amount or None, whether approximate)``."""

_HOLDING: contextvars.ContextVar[bool] = contextvars.ContextVar("pollard_holding", default=False)
"""True inside a step that holds a reservation (its nested steps do not wait for room)."""


def holding() -> contextvars.ContextVar[bool]:
    """The context flag a step sets while it holds a reservation (see `_held_elsewhere`)."""
    return _HOLDING


def admit(state: CursorState, node: Node, credit: Mapping[str, Decimal] | None = None) -> Step:
    """Check depth and every limit, holding the estimates; return ``(estimates, reservation)``.

    ``credit`` (a resumed step, see `pollard._step._resume`) is what the call's cancelled
    dispatches were already charged: only the estimate beyond it is held, and a meter it covers
    is not claimed at all (so a budget those dispatches exhausted still admits their resume).
    """
    rt = state.rt
    if rt.unrecorded:  # a step that ran is recorded before another is admitted
        yield io(rt.record_unrecorded)
    yield from check_depth(state, node)
    estimates = _estimates(state, node.kind.value, node.payload)
    if rt.hard:
        yield from _check_bounded(state, node, estimates)
    if credit:
        net = net_estimates(estimates, credit)
        claims, windows = _claims(state, net)
        covered = {name for name in credit if net.get(name, (None, False))[0] == 0}
        claims = [claim for claim in claims if claim.meter not in covered]
    else:
        claims, windows = _claims(state, estimates)
    if not (claims or windows):
        return estimates, None
    # If the step is cancelled while an offloaded reserve runs, the driver waits for it and
    # hands the admission to ``undo``, so no reservation outlives the step.
    admission: Admission = yield io(rt.reserve, claims, windows, undo=rt.release_admission)
    if admission.shortfall is not None and _held_elsewhere(admission.shortfall):
        admission = yield from _wait_for_room(state, claims, windows, admission)
    if admission.shortfall is not None:
        yield from refuse_budget(state, admission.shortfall, node)
    return estimates, admission.reservation_id


def _held_elsewhere(short: Shortfall) -> bool:
    """Whether only other steps' holds keep the request out (it fits what is settled)."""
    if short.reason != "budget" or short.requested <= 0 or _HOLDING.get():
        # A step nested in one that holds a reservation never waits: it may be what the
        # outer step is waiting for.
        return False
    return short.spent < short.limit and short.requested <= short.limit - short.spent


def _wait_for_room(
    state: CursorState,
    claims: list[BudgetClaim],
    windows: list[WindowClaim],
    admission: Admission,
) -> Step:
    """Retry a reserve while in-flight holds settle: a budget with room does not refuse.

    Holds settle at their actual usage (usually below the worst case) or are released, and a
    crashed process's holds expire with their lease, so the wait ends; it is bounded by twice
    the lease all the same.
    """
    rt = state.rt
    release_gone = getattr(rt.store, "release_gone", None)  # a custom store may predate it
    if release_gone is not None:
        # Holds of a process that died on this host (a SIGKILL, an OOM kill) would keep this
        # step waiting until their leases end: released at once, the request is tried again.
        freed = yield io(release_gone)
        if freed:
            admission = yield io(rt.reserve, claims, windows, undo=rt.release_admission)
    deadline = time.monotonic() + 2 * rt.lease_seconds
    pause = 0.001
    while (
        admission.shortfall is not None
        and _held_elsewhere(admission.shortfall)
        and time.monotonic() < deadline
    ):
        yield Pause(pause)
        pause = min(pause * 2, 0.05)
        admission = yield io(rt.reserve, claims, windows, undo=rt.release_admission)
    return admission


def precheck(state: CursorState, node: Node) -> Step:
    """Check depth and every limit without holding anything (for records that run nothing)."""
    yield from check_depth(state, node)
    claims, windows = _claims(state, _estimates(state, node.kind.value, node.payload))
    if claims or windows:
        admission: Admission = yield io(
            state.rt.store.reserve,
            claims,
            windows,
            lease_seconds=state.rt.lease_seconds,
            hold=False,
        )
        if admission.shortfall is not None:
            yield from refuse_budget(state, admission.shortfall, node)


def check_depth(state: CursorState, node: Node) -> Step:
    """Refuse (record and raise) when one more level would pass a scope's depth limit."""
    for scope in state.scopes:
        limit = scope.depth
        if limit is not None and state.depth + 1 > limit:
            short = Shortfall(
                "budget",
                scope.id,
                "depth",
                Decimal(1),
                limit - state.depth,
                limit,
                Decimal(state.depth),
            )
            yield from refuse_budget(state, short, node)


def net_estimates(estimates: Estimates, credit: Mapping[str, Decimal]) -> Estimates:
    """What a resumed dispatch may cost beyond its credit, by meter (never below zero)."""
    out = dict(estimates)
    for name, amount in credit.items():
        estimate, approximate = out.get(name, (None, False))
        if estimate is not None:
            out[name] = (max(estimate - amount, ZERO), approximate)
    return out


def _check_bounded(state: CursorState, node: Node, estimates: Estimates) -> Step:
    """Refuse a step a hard meter cannot bound when a budget limits that meter."""
    hard = state.rt.hard
    for scope in state.scopes:
        for name, _limit in scope.metered:
            meter = hard.get(name)
            if meter is None or estimates.get(name, (None, False))[0] is not None:
                continue
            kind = node.kind.value
            payload: dict[str, Any] = {
                "reason": "unbounded",
                "meter": name,
                "blocked_kind": kind,
                "blocked_payload_digest": hashlib.sha256(node.canonical_payload or b"").hexdigest(),
            }
            message = (
                f"{name} budget refused a {kind}: its worst case cannot be bounded "
                "(no output cap), so it cannot be reserved"
            )
            hint = getattr(meter, "unbounded_hint", None)

            def error(
                refusal_id: str, name: str = name, hint: Any = hint, message: str = message
            ) -> PollardError:
                return BudgetExceeded(
                    message, refusal_id, meter=name, reason="unbounded", hint=hint
                )

            yield from refuse(state, payload, error, meta={"scope": scope.id})


def _estimates(state: CursorState, kind: str, payload: Any) -> Estimates:
    estimates: Estimates = {}
    for meter, approx in state.rt.estimating:
        raw = meter.precheck_estimate(kind, payload)
        estimates[meter.name] = (None if raw is None else to_decimal(raw), approx)
    return estimates


def _claims(
    state: CursorState, estimates: Estimates
) -> tuple[list[BudgetClaim], list[WindowClaim]]:
    none = (None, False)
    claims = [
        BudgetClaim(scope.id, name, limit, *estimates.get(name, none))
        for scope in state.scopes
        for name, limit in scope.metered
    ]
    windows = [
        WindowClaim(
            meter.key(state.root_id),
            meter.name,
            meter.limit,
            meter.window_seconds,
            *estimates.get(meter.name, none),
        )
        for meter in state.rt.windows
    ]
    return claims, windows


def refuse_budget(state: CursorState, short: Shortfall, node: Node) -> Step:
    """Record and raise the `BudgetExceeded` refusal of ``node`` for ``short``."""
    kind = node.kind.value
    remaining = short.remaining if short.remaining > 0 else ZERO
    # The refusal payload is identity: amounts stay exact text there, so ids never depend on
    # float formatting; the meta (not identity) carries plain numbers.
    payload: dict[str, Any] = {
        "reason": short.reason,
        "meter": short.meter,
        "requested": decimal_text(short.requested),
        "remaining": decimal_text(remaining),
        "blocked_kind": kind,
        "blocked_payload_digest": hashlib.sha256(node.canonical_payload or b"").hexdigest(),
    }
    if short.approximate and short.requested > 0:
        payload["estimated"] = "true"
    if short.window_seconds is not None:
        seconds = short.window_seconds
        payload["window_seconds"] = (
            int(seconds) if float(seconds).is_integer() else decimal_text(to_decimal(seconds))
        )
    meta = {"limit": plain(short.limit), "spent": plain(short.spent), "scope": short.scope}
    what = "window" if short.reason == "window" else "budget"
    limit = decimal_text(short.limit)
    if short.requested > 0:
        detail = f"requested {payload['requested']}, remaining {payload['remaining']} of {limit}"
    else:
        # An exhausted meter refuses whatever the step would cost ("requested 0" said nothing).
        used = "already spent" if what == "budget" else "already used in the window"
        detail = f"{decimal_text(short.spent)} of {limit} {used}"
    message = f"{short.meter} {what} refused a {kind}: {detail}"

    def error(refusal_id: str) -> PollardError:
        return BudgetExceeded(message, refusal_id, meter=short.meter, reason=short.reason)

    yield from refuse(state, payload, error, meta=meta)


def refuse(
    state: CursorState,
    payload: Mapping[str, Any],
    error: Callable[[str], PollardError],
    *,
    meta: Mapping[str, Any] | None = None,
    legacy_digests: Sequence[str] = (),
) -> Generator[Effect, Any, NoReturn]:
    """Record a refusal under the cursor, move onto it and raise ``error(refusal_id)``.

    ``legacy_digests``: the blocked payload digests pollard 0.8 would have recorded for this
    refusal; replay serves such a recorded refusal (0.8's refusal payloads differ from ours).
    """
    rt = state.rt
    node = Node.create(
        NodeKind.REFUSAL,
        state.cursor_id,
        dict(payload),
        meta={"created_at": utc_now_iso(), **(meta or {})},
    )
    if rt.mode == "replay" and not (yield io(rt.store.exists, node.id)):
        if legacy_digests:
            siblings: list[Node] = yield io(rt.store.children, state.cursor_id)
            for sibling in siblings:
                recorded = sibling.payload if isinstance(sibling.payload, Mapping) else {}
                if (
                    sibling.kind is NodeKind.REFUSAL
                    and recorded.get("reason") == payload.get("reason")
                    and recorded.get("blocked_kind") == payload.get("blocked_kind")
                    and recorded.get("blocked_payload_digest") in legacy_digests
                ):
                    state.move(sibling)
                    raise error(sibling.id)
        shown = ", ".join(f"{key}={payload[key]}" for key in sorted(payload) if key != "detail")
        digest = hashlib.sha256(node.canonical_payload or b"").hexdigest()
        raise MissingRecording(
            f"replay: the recorded run has no refusal {node.id} at this point (payload {shown})",
            node.id,
            f"refusal digest={digest}",
        )
    if rt.mode != "replay" and (yield io(rt.store.put, node)) and rt.on_node is not None:
        yield Emit(rt.on_node, node, swallow=True)
    state.move(node)
    raise error(node.id)
