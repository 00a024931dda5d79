"""What every run of one runtime shares: store, typed meters, mode, gate, caches, reservations."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pollard._core._ledger import Admission, BudgetClaim, WindowClaim, WindowEvent
from pollard._core._node import Node
from pollard._step._lease import LeaseKeeper
from pollard._step._protocols import Annotator, Gate, Measurer, Meter, WindowedMeter
from pollard.errors import IntegrityError, PollardError
from pollard.stores._host import this_process

if TYPE_CHECKING:
    from pollard._core._store import Store

__all__ = ["RuntimeCore", "Scope", "Unrecorded"]

# Every live runtime core of this process, so a forked child can make each one a writer of its
# own (see `RuntimeCore._after_fork`).
_CORES: weakref.WeakSet[RuntimeCore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for core in list(_CORES):
        core._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(slots=True)
class Scope:
    """A budget scope: the node it is anchored at and its limits (treat as immutable).

    Attributes:
        id: The anchor node id (the run root, a branch, team or agent anchor), or the ledger
            key of a shared scope (``shared:<name>``), which no node anchors.
        limits: The limits by meter, including ``depth``.
        tally: Settle charges into this scope even without limits (a team or an agent: its
            running totals are its accounting).
        shared: A named scope across independent roots: kept wherever the cursor moves.
        metered: The ledger-checked limits (all but ``depth``), sorted by meter.
        depth: The depth limit, or None.
    """

    id: str
    limits: dict[str, Decimal]
    tally: bool = False
    shared: bool = False
    metered: tuple[tuple[str, Decimal], ...] = field(init=False)
    depth: Decimal | None = field(init=False)

    def __post_init__(self) -> None:
        self.metered = tuple(sorted(i for i in self.limits.items() if i[0] != "depth"))
        self.depth = self.limits.get("depth")


@dataclass(slots=True)
class Unrecorded:
    """A step that ran but whose commit did not reach the store (see `RuntimeCore`)."""

    node: Node
    scopes: tuple[str, ...]
    charges: Mapping[str, Decimal]
    windows: Sequence[WindowEvent]
    reservation: str | None


class RuntimeCore:
    """What every run of one runtime shares.

    Meters are classified once here, so a step iterates typed lists and never probes a meter.
    """

    def __init__(
        self,
        store: Store,
        *,
        meters: Sequence[Meter],
        mode: str,
        gate: Gate[Any] | None,
        dry_run: bool,
        on_node: Callable[[Node], Any] | None,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.meters: list[Meter] = list(meters)
        self.meter_names = frozenset(m.name for m in self.meters)
        self.windows: list[WindowedMeter] = [m for m in self.meters if isinstance(m, WindowedMeter)]
        self.measurers: list[Measurer] = [m for m in self.meters if isinstance(m, Measurer)]
        self.annotators: list[Annotator] = [m for m in self.meters if isinstance(m, Annotator)]
        # Meters that can estimate before a step, with whether the estimate is approximate.
        self.estimating: list[tuple[Meter, bool]] = [
            (m, bool(getattr(m, "precheck_is_estimate", False))) for m in self.meters
        ]
        # Hard meters bound a call's worst case; their None estimate means "cannot be bounded",
        # which a budget on that meter refuses rather than admit unreserved.
        self.hard: dict[str, Meter] = {m.name: m for m in self.meters if getattr(m, "hard", False)}
        self.mode = mode
        self.gate = gate
        self.dry_run = dry_run
        self.on_node = on_node
        self.lease_seconds = lease_seconds
        self.verified: set[str] = set()
        self.keeper = LeaseKeeper(store, lease_seconds)
        # Steps that ran but whose commit lost the store connection: their holds stay renewed
        # (never silently released) and `record_unrecorded` commits them before the next step
        # of this runtime is admitted.
        self.unrecorded: list[Unrecorded] = []
        self.pinned: set[str] = set()
        # This runtime's writer id: stamped on the steps it commits (meta["writer"]) and kept
        # alive in the store, so another process appending under the same node is refused.
        self.writer = uuid.uuid4().hex
        self._writer_live = False
        # Nodes this writer took the append lease of (a run's root, a resumed cursor): any
        # cursor of this runtime appends there without asking the store again.
        # Each with the keeper's lapse count when taken: a lapse since makes it taken again.
        self.appending: dict[str, int] = {}
        # A step's reserve takes the condition's lock itself (`_reserving_lock`): entering the
        # condition only acquires it, through two more Python calls.
        self._reserving_lock = threading.Lock()
        self._reserving = threading.Condition(self._reserving_lock)
        self._closing = False  # set by close(release=True): reserves are refused
        self._draining = False  # set by close(): finishing reserves wake it
        self._in_flight = 0  # reserve calls running (close waits for them)
        _CORES.add(self)

    def _after_fork(self) -> None:
        """In a forked child: become a writer of its own, holding nothing of the parent's.

        The child inherits the parent's writer id, append leases and reservations, but neither
        its lease-renewing thread nor the right to use them: with the parent's id a child
        appending at the parent's cursor would fork the run unnoticed (both are "the same
        writer"). So the child gets a new id and takes every node again before appending
        (a parent still writing there refuses it with `WriterConflict`, as any second process);
        the parent's reservations and unrecorded steps stay the parent's to settle or release.
        """
        self.writer = uuid.uuid4().hex
        self._writer_live = False
        self.appending = {}
        lapses = self.keeper.writer_lapses
        self.keeper = LeaseKeeper(self.store, self.lease_seconds)
        # Every run object's cursor, taken under the parent's id, is taken again.
        self.keeper.writer_lapses = lapses + 1
        self.unrecorded = []
        self.pinned = set()
        # Locks another thread of the parent may have held at the fork.
        self._reserving_lock = threading.Lock()
        self._reserving = threading.Condition(self._reserving_lock)
        self._in_flight = 0
        self._draining = False

    def reserve(self, claims: Sequence[BudgetClaim], windows: Sequence[WindowClaim]) -> Admission:
        """``store.reserve`` for a step; a reservation is tracked (and renewed) at once.

        Tracking starts in the same call (possibly a worker thread), so `close` sees every
        reservation a step holds, even one whose step was cancelled meanwhile.
        """
        with self._reserving_lock:
            if self._closing:
                raise PollardError(
                    "the runtime is closed (its store is closing)",
                    hint="create a new runtime to run more steps",
                )
            self._in_flight += 1
        try:
            # The writer's id starts the hold's id: a resume on this host releases the holds of
            # a writer whose process is gone at once (`Store.release_gone`).
            admission = self.store.reserve(
                claims, windows, lease_seconds=self.lease_seconds, owner=self.writer
            )
            if admission.reservation_id is not None:
                self.keeper.add(admission.reservation_id)
            return admission
        finally:
            with self._reserving_lock:
                self._in_flight -= 1
                if self._draining:
                    self._reserving.notify_all()

    def register_writer(self) -> None:
        """Record this runtime's writer as alive (before its first commit), renewed from then."""
        if not self._writer_live:
            # Its process too, so a resume on this host after a crash (SIGKILL, an OOM kill)
            # can take the lease over at once instead of waiting for it to expire.
            self.store.lease_writer(self.writer, self.lease_seconds, holder=this_process())
            self._writer_live = True
            self.keeper.keep_writer(self.writer)

    @property
    def writer_due(self) -> bool:
        """Whether the writer must be registered before the next commit."""
        return not self._writer_live

    def writer_stale(self) -> bool:
        """Whether this writer's liveness may have lapsed (no renewal within a lease)."""
        return time.monotonic() - self.keeper.writer_renewed >= self.lease_seconds

    def keep_unrecorded(self, item: Unrecorded) -> None:
        """Keep a step whose commit lost the connection: its hold stays, to be committed later."""
        self.unrecorded.append(item)
        if item.reservation is not None:
            self.pinned.add(item.reservation)

    def record_unrecorded(self) -> None:
        """Commit the steps kept by `keep_unrecorded` (idempotently); raise while the store is down.

        A node found stored already is the commit that landed before its answer was lost: its
        hold is released (idempotent), nothing is charged twice.
        """
        while self.unrecorded:
            item = self.unrecorded[0]
            if (
                not self.store.commit(
                    item.node,
                    scopes=item.scopes,
                    charges=item.charges,
                    windows=item.windows,
                    reservation_id=item.reservation,
                )
                and item.reservation is not None
            ):
                self.store.release(item.reservation)
            self.unrecorded.pop(0)
            if item.reservation is not None:
                self.pinned.discard(item.reservation)
                self.keeper.remove(item.reservation)

    def release_admission(self, admission: Admission) -> None:
        """Release the reservation of an admission nobody will use (a cancelled step)."""
        rid = admission.reservation_id
        if rid is not None and self.keeper.remove(rid):  # not already released by close()
            self.store.release(rid)

    def close(self, *, release: bool) -> None:
        """Stop reserving and renewing; with ``release``, release reservations still held.

        Waits for reservations being made in other threads. ``release`` is for a store the
        runtime is about to close: steps still running can no longer settle there, so their
        holds are dropped now instead of lingering until their leases expire.
        """
        if self.unrecorded:
            with contextlib.suppress(Exception):  # still down: the holds expire, not released
                self.record_unrecorded()
        with self._reserving:
            # A reserve queued for a worker thread but not yet started must not slip in
            # between the drain below and the store's close: refuse it.
            self._closing = release
            self._draining = True
            self._reserving.wait_for(lambda: self._in_flight == 0, timeout=60)
            held = self.keeper.drain()
        self.keeper.close()
        if self._writer_live:  # a closed runtime appends nothing more: others may take over
            with contextlib.suppress(Exception):
                self.store.lease_writer(self.writer, 0)
        if release:
            for rid in held:
                if rid in self.pinned:  # a step that ran and is not recorded: never released
                    continue
                with contextlib.suppress(Exception):  # best effort: the lease still expires
                    self.store.release(rid)

    def verify_ancestry(self, node: Node) -> None:
        """Verify a node and its unverified ancestors (cached, so replay stays linear)."""
        chain: list[str] = []
        current: Node | None = node
        while current is not None and current.id not in self.verified:
            current.check()
            chain.append(current.id)
            if current.parent is None:
                break
            parent = self.store.find(current.parent)
            if parent is None:
                raise IntegrityError(
                    f"node {current.id} has a parent {current.parent} that is not stored",
                    current.id,
                )
            current = parent
        self.verified.update(chain)
