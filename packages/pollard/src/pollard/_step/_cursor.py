"""`RunState`: the thin cursor of one run (or branch), shared by the sync and async shells.

The cursor holds where steps attach and what this run object spent; each operation is a short
pipeline over the stage modules, all generators of effects (`pollard._step._effects`):

* `step`: `replay.recorded` (hybrid/replay lookup) -> `admission.admit` (depth, precheck,
  reserve) -> `execute.execute` (call, stream, charge) -> `settle.settle` (commit, account).
* `note`, `refuse`, `record_dry_run`, `lookup`: the other primitives governance builds on.

Identity rule (every mode): a node id is a pure function of ``(kind, payload, parent, attempt)``,
so an identical call under the same parent is the same node whether it is recorded, served or
repeated. ``attempt`` is the caller's word for a deliberate repeat (sampling the same prompt
twice); a repeated dispatch of an existing node in record mode is charged and recorded as a
``call_repeated`` note beside it, and a failed or cancelled dispatch as a ``call_failed`` /
``call_cancelled`` note, so retrying after a failure records the call at the same id.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

from pollard._core._amounts import exact_map, plain_map
from pollard._core._ledger import ZERO, utc_now_iso
from pollard._core._node import Node, NodeKind
from pollard._step import _admission as admission
from pollard._step import _execute as execute
from pollard._step import _intent as intent
from pollard._step import _replay as replay
from pollard._step import _resume
from pollard._step import _settle as settle
from pollard._step._context import RuntimeCore, Scope
from pollard._step._effects import Effect, Step, io
from pollard.errors import MissingRecording, PollardError, WriterConflict

if TYPE_CHECKING:
    from pollard._core._store import Store

__all__ = ["ARGS", "PAYLOAD", "RunState"]

_SPENT_LOCK = threading.Lock()

PAYLOAD: Any = object()
"""``arg`` sentinel for `RunState.step`: call ``fn`` with the payload the caller passed."""
ARGS: Any = object()
"""``arg`` sentinel for `RunState.step`: call ``fn`` with ``payload["args"]``."""


class RunState:
    """The cursor and accounting of one run (or branch).

    Attributes:
        rt: The runtime core.
        label: The run label.
        root_id: The root node id.
        cursor_id: The node new steps attach to.
        depth: The cursor depth (the root is 0).
        scopes: Budget scopes, outermost first (the root scope is always first).
        spent: Charges settled through this run object, by meter.
        avoided: Charges served from recordings instead of executed, by meter.
        branch_counts: Branches made from each node by this run object.
        owner: The runtime object that opened the run (kept alive while the run is used).
    """

    __slots__ = (
        "_scope_ids",
        "_scopes",
        "avoided",
        "branch_counts",
        "cursor_id",
        "depth",
        "label",
        "leased",
        "own_cursor",
        "owner",
        "root_id",
        "rt",
        "spent",
    )

    def __init__(
        self,
        rt: RuntimeCore,
        label: str,
        root_id: str,
        cursor_id: str,
        depth: int,
        scopes: tuple[Scope, ...],
    ) -> None:
        self.rt = rt
        self.label = label
        self.root_id = root_id
        self.cursor_id = cursor_id
        self.depth = depth
        self.scopes = scopes
        self.spent: dict[str, Decimal] = {}
        self.avoided: dict[str, Decimal] = {}
        self.branch_counts: dict[str, int] = {}
        # Holding the runtime keeps one created inline (``Runtime("runs.db").run(...)``) and its
        # store open for as long as the run is used.
        self.owner: Any = None
        # One writer per node: the cursor this run holds the append lease of, and whether this
        # runtime committed the cursor itself (then it holds the node without asking).
        self.leased: str | None = None
        self.own_cursor = False

    @property
    def store(self) -> Store:
        """The runtime's store."""
        return self.rt.store

    @property
    def mode(self) -> str:
        """``record``, ``hybrid`` or ``replay``."""
        return self.rt.mode

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """Budget scopes, outermost first (the root scope is always first)."""
        return self._scopes

    @scopes.setter
    def scopes(self, scopes: tuple[Scope, ...]) -> None:
        self._scopes = scopes
        # Charges settle into the root and every budgeted branch anchor; computed once per
        # change of scopes rather than on every step.
        self._scope_ids = tuple(
            scope.id for i, scope in enumerate(scopes) if i == 0 or scope.limits
        )

    @property
    def limited(self) -> bool:
        """Whether a budget or a rate window can refuse this run's steps."""
        return any(scope.limits for scope in self.scopes) or bool(self.rt.windows)

    def fork(self) -> RunState:
        """A second cursor at this cursor that reports into this run (no anchor node)."""
        child = RunState(self.rt, self.label, self.root_id, self.cursor_id, self.depth, self.scopes)
        child.spent = self.spent
        child.avoided = self.avoided
        child.owner = self.owner
        child.leased = self.leased
        child.own_cursor = self.own_cursor
        return child

    def move(self, node: Node) -> None:
        """Put the cursor on ``node``, a child of the current cursor."""
        self.cursor_id = node.id
        self.depth += 1
        self.own_cursor = False

    def check_writer(self) -> Step:
        """Refuse (`WriterConflict`) when another live writer appends under the cursor.

        The run's root is shared (workers start their own lines under one label); any other
        node has one writer at a time. A node this runtime committed is its own; any other is
        taken once (a fencing token in the store), and again when this writer's liveness may
        have lapsed meanwhile (a paused process whose node another writer took over).
        """
        rt = self.rt
        parent = self.cursor_id
        if parent == self.root_id or rt.mode == "replay":
            return
        stale = rt.writer_stale()
        if not stale and (self.own_cursor or self.leased == parent):
            return
        token = yield io(rt.store.take_append, parent, rt.writer)
        if not token:
            raise WriterConflict(
                f"another writer is appending to run {self.label!r} at node {parent}: two "
                "processes at one cursor would fork the run, so this one does not write",
                parent,
            )
        self.leased = parent

    def scope_ids(self) -> tuple[str, ...]:
        """The scopes a charge settles into: the root and every budgeted branch anchor."""
        return self._scope_ids

    def add_spent(self, charges: Mapping[str, Decimal]) -> None:
        """Count settled charges as spent by this run object.

        Locked: a cancelled step's finished commit is counted from a worker thread.
        """
        with _SPENT_LOCK:
            spent = self.spent
            for name, amount in charges.items():
                spent[name] = spent.get(name, ZERO) + amount

    # -- primitives ----------------------------------------------------------------------------

    def step(
        self,
        kind: str | NodeKind,
        payload: Any,
        fn: Callable[[Any], Any],
        arg: Any = PAYLOAD,
        *,
        attempt: int = 0,
        on_delta: Callable[[Any], Any] | None = None,
        keep_chunks: bool = False,
        meta: Mapping[str, Any] | None = None,
        resume: bool = False,
        rerun: bool = False,
    ) -> Step:
        """Run one step: lookup, admission, ``fn(arg)`` once, settlement; return the node.

        ``resume`` (always on in hybrid mode): a stored answer of this call is served, and
        the charges of its cancelled dispatches count toward this one (`_resume`). A stored
        tool step is served, not run again, unless ``rerun`` (a newly confirmed request: a
        person approved running it once more).
        """
        node = Node.create(kind, self.cursor_id, payload, attempt=attempt)
        # fn gets the caller's own object: the identity was snapshotted above, so nothing fn or
        # the caller does to it later can change the recorded payload.
        if arg is PAYLOAD:
            arg = payload
        elif arg is ARGS:
            arg = payload.get("args") if isinstance(payload, Mapping) else None
        if self.rt.mode != "record":
            found = yield from replay.recorded(self, node, executable=True)
            if found is not None:
                return (yield from replay.serve(self, found, on_delta))
        if self.rt.unrecorded:  # a step that ran is recorded before anything else
            yield io(self.rt.record_unrecorded)
        effect = node.kind is NodeKind.TOOL_CALL
        if effect:
            # A completed effect is served from the ledger, never run twice.
            done: Node | None = yield io(self.rt.store.find, node.id)
            completed = done is not None and done.result is not None
            if completed and not rerun:
                assert done is not None
                return (yield from replay.serve(self, done, on_delta))
        credit = None
        if self.rt.mode == "record" and resume:
            found, credit = yield from _resume.lookup(self, node)
            if found is not None:
                return (yield from replay.serve(self, found, on_delta))
        elif self.rt.mode == "hybrid":
            credit = yield from _resume.credit(self, node)
        if self.rt.writer_due:  # alive in the store before its first step names it the writer
            yield io(self.rt.register_writer)
        yield from self.check_writer()
        estimates, reservation = yield from admission.admit(self, node, credit)
        flag = admission.holding()
        token = flag.set(True) if reservation is not None else None
        key = None
        try:
            if effect:
                intent_id = yield from intent.begin(self, node, completed=completed)
                key = intent.running().set(node.id)
                try:
                    return (
                        yield from execute.execute(
                            self,
                            node,
                            fn,
                            arg,
                            estimates,
                            reservation,
                            on_delta,
                            keep_chunks,
                            meta,
                            credit,
                        )
                    )
                except GeneratorExit:
                    raise
                except Exception as exc:
                    # A failure the tool raised is recorded, so it may be retried; a step that
                    # ran but is not recorded (kept by the runtime, or fenced off at commit), or
                    # a cancellation, may have had its effect: those stay ambiguous.
                    kept = any(item.node.id == node.id for item in self.rt.unrecorded)
                    if not kept and not isinstance(exc, WriterConflict):
                        yield from intent.fail(self, intent_id)
                    raise
            return (
                yield from execute.execute(
                    self, node, fn, arg, estimates, reservation, on_delta, keep_chunks, meta, credit
                )
            )
        finally:
            if key is not None:
                try:
                    intent.running().reset(key)
                except ValueError:
                    intent.running().set(None)
            if token is not None:
                try:
                    flag.reset(token)
                except ValueError:  # finalized in another context (a closed generator)
                    flag.set(False)
            if reservation is not None and reservation not in self.rt.pinned:
                self.rt.keeper.remove(reservation)

    def refuse(
        self,
        payload: Mapping[str, Any],
        error: Callable[[str], PollardError],
        *,
        meta: Mapping[str, Any] | None = None,
        legacy_digests: Sequence[str] = (),
    ) -> Generator[Effect, Any, NoReturn]:
        """Record a refusal under the cursor, move onto it and raise ``error(refusal_id)``.

        In replay mode the refusal must already be recorded (it is never written); one pollard
        0.8 recorded is found by its blocked payload digest among ``legacy_digests``.
        """
        yield from admission.refuse(self, payload, error, meta=meta, legacy_digests=legacy_digests)
        raise AssertionError("unreachable: refuse() raises")  # pragma: no cover

    def lookup(self, kind: str, payload: Any, attempt: int = 0) -> Step:
        """Return the recorded node for a step in hybrid/replay mode, else None (no effects)."""
        if self.rt.mode == "record":
            return None
        node = Node.create(kind, self.cursor_id, payload, attempt=attempt)
        return (yield io(self.rt.store.find, node.id))

    def note(self, payload: Any, *, attempt: int = 0) -> Step:
        """Record a plain note (idempotent); only the depth limit can refuse it."""
        rt = self.rt
        node = Node.create(NodeKind.NOTE, self.cursor_id, payload, attempt=attempt)
        found: Node | None = yield io(rt.store.find, node.id)
        if found is not None:
            if rt.mode == "replay":
                yield io(rt.verify_ancestry, found)
            self.move(found)
            return found
        if rt.mode == "replay":
            summary = replay.summary("note", node.payload, node.canonical_payload or b"")
            raise MissingRecording(
                f"replay: no recorded note {summary} under {node.parent}", node.id, summary
            )
        # A note runs nothing and costs nothing, so only the depth limit applies (pollard 0.8 also
        # refused notes once any meter was spent, which hid "giving up" notes and branches).
        yield from admission.check_depth(self, node)
        node = node.with_meta({"created_at": utc_now_iso()})
        if (yield io(rt.store.put, node)):
            yield from settle.stored(self, node)
        self.move(node)
        return node

    def record_dry_run(
        self,
        kind: str | NodeKind,
        payload: Any,
        *,
        attempt: int = 0,
        charges: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Step:
        """Record a step without executing it (``meta.dry_run = True``, no result).

        Charges default to ``{"steps": 1}``. In hybrid/replay a recorded dry-run node is served.
        """
        node = Node.create(kind, self.cursor_id, payload, attempt=attempt)
        if self.rt.mode != "record":
            found = yield from replay.recorded(self, node, executable=False)
            if found is not None:
                return (yield from replay.serve(self, found, None))
        yield from admission.precheck(self, node)
        return (yield from settle.settle_dry_run(self, node, charges, meta))

    # -- reads ---------------------------------------------------------------------------------

    def ancestors(self, node_id: str) -> list[str]:
        """Ids from ``node_id`` up to the run root (inclusive), nearest first."""
        # SQL stores read the whole chain in one query (a round trip per node on PostgreSQL
        # made every rollback cost as many round trips as the run was deep).
        ancestry = getattr(self.rt.store, "ancestry", None)
        if ancestry is not None:
            chain = list(ancestry(node_id))
            if self.root_id in chain:
                return chain[: chain.index(self.root_id) + 1]
            raise ValueError(f"node {node_id} is not in run {self.label!r}")
        chain = []
        current: str | None = node_id
        while current is not None:
            chain.append(current)
            if current == self.root_id:
                return chain
            current = self.rt.store.get(current).parent
        raise ValueError(f"node {node_id} is not in run {self.label!r}")

    def report(self, *, exact: bool = False) -> dict[str, dict[str, Any]]:
        """Spent and avoided charges of this run object, plus the root scope's ledger totals.

        Plain numbers by default; ``exact=True`` gives exact decimal strings. Every meter of
        the runtime is listed, at zero when nothing was charged to it, so a report reads the
        same whether or not this run object spent anything (a replay, a refused step).
        """
        form = exact_map if exact else plain_map
        zeros = dict.fromkeys(self.rt.meter_names, Decimal(0))
        return {
            "spent": form(zeros | dict(self.spent)),
            "avoided": form(zeros | dict(self.avoided)),
            "total": form(zeros | dict(self.rt.store.totals(self.root_id))),
        }
