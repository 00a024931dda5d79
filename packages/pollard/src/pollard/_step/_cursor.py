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

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, NoReturn

from pollard._core._ledger import utc_now_iso
from pollard._core._node import Node, NodeKind
from pollard._step import _admission as admission
from pollard._step import _execute as execute
from pollard._step import _intent as intent
from pollard._step import _replay as replay
from pollard._step import _resume
from pollard._step import _settle as settle
from pollard._step._effects import Effect, Step, io
from pollard._step._state import CursorState
from pollard.errors import MissingRecording, PollardError, WriterConflict

__all__ = ["ARGS", "PAYLOAD", "RunState"]

PAYLOAD: Any = object()
"""``arg`` sentinel for `RunState.step`: call ``fn`` with the payload the caller passed."""
ARGS: Any = object()
"""``arg`` sentinel for `RunState.step`: call ``fn`` with ``payload["args"]``."""


class RunState(CursorState):
    """The cursor of one run (or branch): its state plus the step primitives.

    The primitives are short pipelines over the stage modules; the state they share is
    `CursorState`.
    """

    __slots__ = ()

    def fork(self) -> RunState:
        """A second cursor at this cursor that reports into this run (no anchor node)."""
        child = RunState(self.rt, self.label, self.root_id, self.cursor_id, self.depth, self.scopes)
        child.spent = self.spent
        child.avoided = self.avoided
        child.owner = self.owner
        child.leased = self.leased
        child.own_cursor = self.own_cursor
        child.lapses = self.lapses
        child.actor = self.actor
        child.tools = self.tools
        child.floor = self.floor
        child.shared = self.shared
        return child

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
