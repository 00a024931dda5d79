"""``AsyncRuntime`` and ``AsyncRun``: the asynchronous shell over the same step machine."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from pollard._core._budget import Budget
from pollard._core._node import Node, NodeKind
from pollard._core._store import Store
from pollard._governance._approvals import actor_name
from pollard._runtime._sync import (
    ReplayMode,
    Run,
    RuntimeBase,
    RunView,
    branch_state,
    gate_of,
    run_state,
    tool_step,
)
from pollard._step._charged import record_charged
from pollard._step._cursor import PAYLOAD, RunState
from pollard._step._effects import Offload, Step, drive_async, drive_sync
from pollard._step._protocols import Meter
from pollard.errors import PollardError

if TYPE_CHECKING:
    from pollard.policy import Policy
    from pollard.registry import Registry

__all__ = [
    "AsyncBranch",
    "AsyncRun",
    "AsyncRuntime",
    "async_view",
    "fork",
    "offload_of",
    "on_state",
]


class AsyncRuntime(RuntimeBase):
    """The asynchronous `Runtime`: async step functions, async streams and async callbacks.

    It takes the same arguments as `Runtime` plus ``offload_store_io``. The step logic is the
    same code as the sync runtime (one core, two shells).

    Args:
        store: A `Store`, a SQLite path, a ``postgresql://`` DSN, or None for a `MemoryStore`.
        meters: See `Runtime`.
        registry: See `Runtime`.
        policies: See `Runtime`.
        dry_run: See `Runtime`.
        mode: See `Runtime`.
        on_node: See `Runtime`; it may be async (awaited, or scheduled on the loop for roots).
        reservation_lease_seconds: See `Runtime`.
        offload_store_io: Run store I/O in a worker thread so the event loop never waits on
            the database. Default: True for every store except `MemoryStore`. A `SQLiteStore`'s
            I/O runs on the store's own thread (`SQLiteStore.io_executor`: one connection,
            concurrent steps' writes committed together), or at once on the loop while that
            thread is idle, in a transaction that never waits for a lock, a sync or a
            checkpoint; other stores use the loop's default executor.

    Example:
        >>> import asyncio
        >>> from pollard import AsyncRuntime
        >>> async def model(payload):
        ...     return {"text": "ok"}
        >>> async def main():
        ...     async with AsyncRuntime().run("demo") as run:
        ...         return (await run.model_call({"model": "m"}, fn=model)).result["text"]
        >>> asyncio.run(main())
        'ok'
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        meters: Iterable[Meter] | None = None,
        registry: Registry | None = None,
        policies: Sequence[Policy] | None = None,
        dry_run: bool = False,
        mode: str | ReplayMode = "record",
        on_node: Callable[[Node], Any] | None = None,
        reservation_lease_seconds: float = 60,
        offload_store_io: bool | None = None,
    ) -> None:
        super().__init__(
            store,
            meters=meters,
            registry=registry,
            policies=policies,
            dry_run=dry_run,
            mode=mode,
            on_node=on_node,
            reservation_lease_seconds=reservation_lease_seconds,
        )
        if offload_store_io is None:
            from pollard.stores.memory import MemoryStore

            offload_store_io = not isinstance(self._core.store, MemoryStore)
        self.offload_store_io = offload_store_io
        self._offload: Offload = offload_store_io
        if offload_store_io:
            from pollard.stores.sqlite import SQLiteStore

            store = self._core.store
            if isinstance(store, SQLiteStore):
                # A store closed already keeps the default: its first operation then raises
                # the store's own "is closed" error, as on every other store.
                with contextlib.suppress(PollardError):
                    self._offload = store.io_executor

    def run(
        self,
        label: str,
        *,
        budget: Budget | None = None,
        attempt: int = 0,
        shared: bool = False,
    ) -> AsyncRun:
        """Start (or re-enter) a run; see `Runtime.run` (``shared``: many writers at the root)."""
        return AsyncRun(drive_sync(self._open(label, budget, attempt, shared)), self._offload)

    def resume(
        self,
        label: str,
        *,
        budget: Budget | None = None,
        attempt: int = 0,
        shared: bool = False,
    ) -> AsyncRun:
        """Re-enter a run at its deepest unpruned leaf; see `Runtime.resume`."""
        return AsyncRun(drive_sync(self._resume(label, budget, attempt, shared)), self._offload)

    async def __aenter__(self) -> AsyncRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __enter__(self) -> AsyncRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRun(RunView):
    """The asynchronous `Run`: the same cursor operations with awaitable steps.

    ``model_call``, ``tool_call``, ``note``, ``confirm`` and ``branch`` are coroutines (also
    available as ``amodel_call``, ``atool_call``, ``anote``, ``aconfirm``, ``abranch``).
    ``fn`` may be sync or async and may return a dict, an iterator or an async iterator of
    chunks; ``on_delta`` may be async.
    """

    def __init__(self, state: RunState, offload: Offload) -> None:
        self._state = state
        self._offload = offload

    @staticmethod
    def of(run: Run | AsyncRun) -> AsyncRun:
        """The async view of ``run``: an `AsyncRun` as is, or a sync `Run`'s cursor, async-driven.

        A sync run's store I/O stays inline, on the caller's thread, as the sync runtime
        expects; its cursor moves and charges are the sync run's.

        Raises:
            TypeError: ``run`` is not a pollard run.
        """
        if isinstance(run, (AsyncRun, Run)):
            return async_view(run)
        raise TypeError(
            "a pollard run is needed (from Runtime(...).run() or AsyncRuntime(...).run()), "
            f"got {type(run).__name__}"
        )

    def fork(self) -> AsyncRun:
        """A second cursor at this run's cursor that reports into this run (no anchor node).

        Concurrent steps on one cursor would race for it (each step moves it); a fan-out gives
        each concurrent step its own fork, so every step's node is a child of the same node and
        its charges count in this run's report.

        Example:
            >>> import asyncio
            >>> from pollard import AsyncRuntime
            >>> async def model(payload):
            ...     return {"text": payload["q"]}
            >>> async def main():
            ...     async with AsyncRuntime().run("fan") as run:
            ...         a, b = run.fork(), run.fork()
            ...         x, y = await asyncio.gather(
            ...             a.model_call({"q": "1"}, fn=model), b.model_call({"q": "2"}, fn=model)
            ...         )
            ...         return x.parent == y.parent == run.cursor_id
            >>> asyncio.run(main())
            True
        """
        return fork(self)

    async def _drive(self, gen: Step) -> Node:
        return cast(Node, await drive_async(gen, self._offload))

    async def __aenter__(self) -> AsyncRun:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __enter__(self) -> AsyncRun:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    async def model_call(
        self,
        payload: Any,
        *,
        fn: Callable[[Any], Any],
        attempt: int = 0,
        on_delta: Callable[[Any], Any] | None = None,
        keep_chunks: bool = False,
        resume: bool = False,
    ) -> Node:
        """Run a model call as one governed step; see `Run.model_call`."""
        if not callable(fn):
            raise TypeError("model_call needs fn=, the function that calls your model")
        return await self._drive(
            self._state.step(
                NodeKind.MODEL_CALL,
                payload,
                fn,
                PAYLOAD,
                attempt=attempt,
                on_delta=on_delta,
                keep_chunks=keep_chunks,
                resume=resume,
            )
        )

    async def tool_call(
        self,
        name: str,
        args: Any,
        *,
        fn: Callable[[Any], Any] | None = None,
        version: str | None = None,
        attempt: int = 0,
        actor: object = None,
    ) -> Node:
        """Run a tool call as one governed step; see `Run.tool_call` (``actor`` as there)."""
        gate = self._state.rt.gate
        if gate is not None:
            return await self._drive(
                gate.tool_call(
                    self._state,
                    name,
                    args,
                    version=version,
                    attempt=attempt,
                    actor=actor_name(actor),
                )
            )
        if not callable(fn):
            raise TypeError(
                "tool_call without a registry needs fn=, the function that runs the tool"
            )
        kind, payload, call, arg = tool_step(name, args, fn, version)
        return await self._drive(self._state.step(kind, payload, call, arg, attempt=attempt))

    async def confirm(self, token: str, *, args: Any = None) -> Node:
        """Execute a call held for confirmation; see `Run.confirm` (``args`` as there)."""
        gate = gate_of(self._state, "confirm()")
        return await self._drive(gate.confirm(self._state, token, args=args))

    async def record_charged(
        self,
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
    ) -> Node:
        """Record a node with caller-stated charges, exactly once; see `Run.record_charged`."""
        return await self._drive(
            record_charged(
                self._state,
                kind,
                payload,
                charges=charges,
                fn=fn,
                result=result,
                parent=parent,
                attempt=attempt,
                meta=meta,
                unknown=unknown,
            )
        )

    async def note(self, payload: Any, *, attempt: int = 0) -> Node:
        """Record a plain note; see `Run.note`."""
        return await self._drive(self._state.note(payload, attempt=attempt))

    def branch(self, *, attempt: int = 0, budget: Budget | None = None) -> AsyncBranch:
        """Create an alternate child cursor; see `Run.branch`.

        Use it as ``async with run.branch() as b:`` (or ``with``, as in pollard 0.8) or await
        it (``b = await run.branch()``); each form writes one anchor and gives an `AsyncRun` on
        it. This run's cursor does not move.
        """
        return AsyncBranch(self, attempt, budget)

    amodel_call = model_call
    atool_call = tool_call
    aconfirm = confirm
    anote = note
    abranch = branch


class AsyncBranch:
    """What `AsyncRun.branch` returns: awaitable, and an (async) context manager."""

    __slots__ = ("_attempt", "_budget", "_run")

    def __init__(self, run: AsyncRun, attempt: int, budget: Budget | None) -> None:
        self._run, self._attempt, self._budget = run, attempt, budget

    async def _open(self) -> AsyncRun:
        run = self._run
        step = branch_state(run._state, self._attempt, self._budget)
        return AsyncRun(await drive_async(step, run._offload), run._offload)

    def __await__(self) -> Generator[Any, None, AsyncRun]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncRun:
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __enter__(self) -> AsyncRun:
        # pollard 0.8's sync form: the anchor is written inline (one small store write).
        run = self._run
        return AsyncRun(
            drive_sync(branch_state(run._state, self._attempt, self._budget)), run._offload
        )

    def __exit__(self, *exc: object) -> None:
        return None


def async_view(run: Run | AsyncRun) -> AsyncRun:
    """The async view of a run: an `AsyncRun` as is, or a sync `Run`'s cursor, async-driven.

    A sync run's store I/O stays inline, on the caller's thread, as the sync runtime expects.
    """
    if isinstance(run, AsyncRun):
        return run
    return AsyncRun(run_state(run), False)


def fork(run: AsyncRun) -> AsyncRun:
    """A second cursor at ``run``'s cursor that reports into ``run`` (no anchor node).

    Concurrent steps on one cursor would race for it (each step moves it); a fan-out gives each
    call its own fork, so every call's node is a child of the same node.
    """
    return AsyncRun(run_state(run).fork(), run._offload)


def offload_of(run: AsyncRun) -> Offload:
    """Where an `AsyncRun` runs its store I/O (for edge code driving steps itself)."""
    return run._offload


def on_state(run: AsyncRun, state: RunState) -> AsyncRun:
    """An `AsyncRun` on another cursor of ``run``'s runtime, driven the way ``run`` is."""
    return AsyncRun(state, run._offload)
