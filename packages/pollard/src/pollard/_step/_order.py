"""Ordered admission: the first budgeted step of each fork of a fan-out, admitted in index order.

A fan-out that must refuse the same steps on every run (the last ones, when a budget runs out)
admits its steps in a fixed order: fork ``i`` reserves only after fork ``i - 1``'s reservation
returned. Each such hand-over is on the fan-out's path (a budgeted fan-out's steps are admitted
one after another), so it is made as short as the store allows: fork ``i - 1``'s turn passes in
the very callback that brings its reservation's answer back to the event loop, not once its step
resumed (a loop iteration later, after other ready callbacks) and got as far as its call.
(Queuing every fork's reservation at once, behind the previous one's, was measured too: the
reservations then commit together, which saves store CPU, but the calls leave in bursts and
their answers come back in bursts, which cost more wall time than the round trips saved.)

The order stays exactly that of one admission at a time, waits for room included. A
reservation that comes back short (or fails) breaks the order's fast path, where the store runs
it: a reservation of a later fork that reaches the store after it is not made (`DEFERRED`,
nothing held), and that step waits until the step before it has finished its admission
(admitted after waiting for room, or refused), then reserves. From then on the fan-out admits
one step at a time, each after the previous one's admission ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pollard._step._effects import Io, Step, Wait

if TYPE_CHECKING:
    from pollard._core._ledger import Admission, BudgetClaim, WindowClaim
    from pollard._step._context import RuntimeCore

__all__ = ["DEFERRED", "AdmissionOrder", "Turn"]

DEFERRED: Any = object()
"""What a reservation queued behind a short one returns instead of reserving (nothing held)."""


class AdmissionOrder:
    """The order in which ``count`` forks' first budgeted steps are admitted (see the module)."""

    __slots__ = ("_done", "_turn", "broken")

    def __init__(self, count: int) -> None:
        # _turn[i]: fork i's reservation returned (or its admission is over); _done[i]: over.
        self._turn = [asyncio.Event() for _ in range(count)]
        self._done = [asyncio.Event() for _ in range(count)]
        #: Set (where the store runs reservations) by the first reservation that came back short
        #: or failed; read on the loop to stop taking turns early.
        self.broken = False

    async def wait(self, index: int) -> None:
        """Wait until fork ``index`` may start its step (the fork before it took its turn)."""
        if index > 0:
            await (self._done if self.broken else self._turn)[index - 1].wait()

    def finished(self, index: int) -> None:
        """Fork ``index``'s admission is over (admitted, refused, failed, or never tried)."""
        self._turn[index].set()
        self._done[index].set()


class Turn:
    """Fork ``index``'s place in an `AdmissionOrder`, held by its cursor until its admission."""

    __slots__ = ("index", "order")

    def __init__(self, order: AdmissionOrder, index: int) -> None:
        self.order = order
        self.index = index

    def passed(self) -> None:
        """The reservation returned: the next fork may reserve."""
        self.order._turn[self.index].set()

    def finished(self) -> None:
        """The admission is over (see `AdmissionOrder.finished`)."""
        self.order.finished(self.index)

    def reserve(
        self,
        rt: RuntimeCore,
        claims: Sequence[BudgetClaim],
        windows: Sequence[WindowClaim],
    ) -> Step:
        """Reserve in this turn's order; return the `Admission` (yields the effects)."""
        order = self.order
        admission: Admission = DEFERRED
        if not order.broken:
            admission = yield Io(
                _ordered(order, rt.reserve),
                (claims, windows),
                None,
                _unless_deferred(rt.release_admission),
                self.passed,
            )
        if admission is DEFERRED:
            if self.index > 0:
                yield Wait(order._done[self.index - 1])
            admission = yield Io(rt.reserve, (claims, windows), None, rt.release_admission)
        return admission


def _ordered(
    order: AdmissionOrder, reserve: Callable[[Sequence[Any], Sequence[Any]], Admission]
) -> Callable[[Sequence[Any], Sequence[Any]], Admission]:
    def reserve_in_order(claims: Sequence[Any], windows: Sequence[Any]) -> Admission:
        if order.broken:  # an earlier reservation of this order came back short
            return DEFERRED  # type: ignore[no-any-return]
        try:
            admission = reserve(claims, windows)
        except BaseException:
            order.broken = True
            raise
        if admission.shortfall is not None:
            order.broken = True
        return admission

    return reserve_in_order


def _unless_deferred(undo: Callable[[Admission], Any]) -> Callable[[Admission], Any]:
    def undo_admission(admission: Admission) -> Any:
        if admission is not DEFERRED:
            return undo(admission)
        return None

    return undo_admission
