"""Effects and their two drivers: how the step core talks to the sync and async shells.

A core operation is a generator that yields `Effect` objects and returns its value. `drive_sync`
performs each effect in the calling thread; `drive_async` awaits awaitables, iterates async
streams and runs store I/O in a worker thread when asked to (`Offload`: the loop's default
executor, or the store's own I/O thread). Exceptions raised by an effect are thrown back into the
generator, so the core can record failed dispatches.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import warnings
from collections.abc import Callable, Generator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from pollard.stores._io_thread import IoThread

__all__ = [
    "END",
    "CloseStream",
    "Effect",
    "Emit",
    "Invoke",
    "Io",
    "NextChunk",
    "Offload",
    "Pause",
    "Step",
    "drive_async",
    "drive_sync",
    "io",
    "offload_call",
]

Step = Generator["Effect", Any, Any]
Offload = bool | Executor
"""Where store I/O runs: inline (False), in the loop's default executor (True), or an executor."""
END = object()
"""What `NextChunk` returns when the stream is exhausted."""
_END = END


def _no_awaitable(value: Any, what: str) -> Any:
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: close it so no "never awaited" warning leaks
        raise TypeError(f"{what} returned an awaitable; use AsyncRuntime for async functions")
    return value


class Effect:
    """Something the core asks its shell to do."""

    __slots__ = ()

    def run_sync(self) -> Any:
        """Perform the effect in the calling thread."""
        raise NotImplementedError

    async def run_async(self, offload: Offload) -> Any:
        """Perform the effect on the event loop (store I/O in a thread when ``offload``)."""
        raise NotImplementedError


@dataclass(slots=True)
class Invoke(Effect):
    """Call a step function: ``fn(arg)``."""

    fn: Callable[[Any], Any]
    arg: Any

    def run_sync(self) -> Any:
        value = self.fn(self.arg)
        if type(value) is dict:  # the common result: certainly not awaitable
            return value
        return _no_awaitable(value, "the step function")

    async def run_async(self, offload: Offload) -> Any:
        value = self.fn(self.arg)
        if inspect.isawaitable(value):
            value = await value
        return value


@dataclass(slots=True)
class NextChunk(Effect):
    """Pull the next chunk of a stream (``_END`` when exhausted)."""

    source: Any

    def run_sync(self) -> Any:
        if hasattr(self.source, "__anext__"):
            raise TypeError("the step function returned an async stream; use AsyncRuntime")
        return next(self.source, _END)

    async def run_async(self, offload: Offload) -> Any:
        if hasattr(self.source, "__anext__"):
            try:
                return await self.source.__anext__()
            except StopAsyncIteration:
                return _END
        return next(self.source, _END)


@dataclass(slots=True)
class CloseStream(Effect):
    """Close a stream the core stops reading early (a failure or a cancellation)."""

    source: Any

    def run_sync(self) -> Any:
        close = getattr(self.source, "close", None)
        if callable(close):
            close()

    async def run_async(self, offload: Offload) -> Any:
        aclose = getattr(self.source, "aclose", None)
        if callable(aclose):
            await aclose()
            return
        close = getattr(self.source, "close", None)
        if callable(close):
            close()


@dataclass(slots=True)
class Pause(Effect):
    """Wait ``seconds`` without holding the event loop (a step waiting for room in a budget)."""

    seconds: float

    def run_sync(self) -> Any:
        import time

        time.sleep(self.seconds)

    async def run_async(self, offload: Offload) -> Any:
        await asyncio.sleep(self.seconds)


@dataclass(slots=True)
class Emit(Effect):
    """Deliver a callback (``on_delta`` or ``on_node``)."""

    callback: Callable[[Any], Any]
    value: Any
    swallow: bool = False

    def run_sync(self) -> Any:
        try:
            value = self.callback(self.value)
            if self.swallow and inspect.isawaitable(value) and _schedule(value):
                return  # an async on_node hook, called from code running on an event loop
            _no_awaitable(value, "the callback")
        except Exception as exc:
            if not self.swallow:
                raise
            _warn_callback(exc)

    async def run_async(self, offload: Offload) -> Any:
        try:
            value = self.callback(self.value)
            if inspect.isawaitable(value):
                await value
        except Exception as exc:
            if not self.swallow:
                raise
            _warn_callback(exc)


_PENDING: set[asyncio.Future[Any]] = set()


def _schedule(awaitable: Any) -> bool:
    """Run an awaitable hook on the running loop (fire and forget); False without a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    future = asyncio.ensure_future(awaitable)
    _PENDING.add(future)  # keep a reference until it finishes
    future.add_done_callback(_hook_done)
    return True


def _hook_done(future: asyncio.Future[Any]) -> None:
    _PENDING.discard(future)
    if not future.cancelled() and isinstance(future.exception(), Exception):
        _warn_callback(future.exception())  # type: ignore[arg-type]


def _warn_callback(exc: Exception) -> None:
    warnings.warn(
        f"on_node callback raised {type(exc).__name__}: {exc}; the node is kept",
        RuntimeWarning,
        stacklevel=4,
    )


@dataclass(slots=True)
class Io(Effect):
    """Store I/O: ``fn(*args, **kwargs)``.

    ``undo`` (optional) is called with the value when the operation completed in a worker
    thread but the awaiting task was cancelled meanwhile, so the value never reaches the core
    (for example: release the reservation that a cancelled ``reserve`` created).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    undo: Callable[[Any], Any] | None = None

    def run_sync(self) -> Any:
        return self.fn(*self.args, **(self.kwargs or {}))

    async def run_async(self, offload: Offload) -> Any:
        if offload is False:
            return self.fn(*self.args, **(self.kwargs or {}))
        executor = None if offload is True else offload
        return await offload_call(self.fn, self.args, self.kwargs or {}, self.undo, executor)


async def offload_call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    undo: Callable[[Any], Any] | None = None,
    executor: Executor | None = None,
) -> Any:
    """Run ``fn`` in a worker thread; a cancellation waits for the thread before propagating.

    ``executor`` runs it (the store's own I/O thread), or the loop's default executor when None.
    A thread cannot be stopped, so a task cancelled while its store I/O runs would otherwise
    finish (and let the runtime close the store) while the thread still uses a connection. Here
    the cancellation is delivered only once the call has returned; if it returned a value, it is
    passed to ``undo`` (in a default worker thread) because the caller will never see it.
    """
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    if isinstance(executor, IoThread):
        return await _on_io_thread(executor, loop, call, undo)
    future = loop.run_in_executor(executor, call)
    # Whoever stops waiting (a cancellation, a closed coroutine), the outcome is consumed here,
    # so asyncio never logs "exception was never retrieved" for it.
    future.add_done_callback(_consume)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await _finish(future)
        if undo is not None and not future.cancelled() and future.exception() is None:
            await _undo(loop, undo, future.result())
        raise


async def _on_io_thread(
    io_thread: IoThread,
    loop: asyncio.AbstractEventLoop,
    call: Callable[[], Any],
    undo: Callable[[Any], Any] | None,
) -> Any:
    """`offload_call` on a store's I/O thread: the task resumes right after the batch settles.

    An idle thread's store may run the operation at once instead (`IoThread.try_now`).
    """
    outcome = io_thread.try_now(call)
    if outcome is not None:
        ok, value = outcome
        if ok:
            return value
        raise value
    pending = io_thread.run_soon(loop, call, undo)
    try:
        return await pending.waiter
    except asyncio.CancelledError:
        if pending.outcome is None:  # still queued or running: the thread cannot be stopped
            await _finish(pending.finished())
        assert pending.outcome is not None
        ok, value = pending.outcome
        if pending.undo_outcome is not None:  # the I/O thread undid it right after the call
            undone, error = pending.undo_outcome
            if not undone:
                _warn_undo(error)
        elif undo is not None and ok:
            await _undo(loop, undo, value)
        raise


async def _undo(loop: asyncio.AbstractEventLoop, undo: Callable[[Any], Any], value: Any) -> None:
    """Run ``undo(value)`` in a worker thread (riding out cancellations); warn if it fails."""
    cleanup = loop.run_in_executor(None, undo, value)
    await _finish(cleanup)
    if not cleanup.cancelled() and cleanup.exception() is not None:
        _warn_undo(cleanup.exception())


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _finish(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, riding out further cancellations (re-raised by callers)."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({future})


def _warn_undo(exc: BaseException | None) -> None:
    warnings.warn(
        f"cleanup after a cancelled store operation failed ({type(exc).__name__}: {exc}); "
        "a reservation may be held until its lease expires",
        RuntimeWarning,
        stacklevel=2,
    )


def io(
    fn: Callable[..., Any],
    *args: Any,
    undo: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> Io:
    """Build the effect of one store operation, to be yielded (the step machine's one idiom).

    For example ``found = yield io(store.find, node_id)``. ``undo`` (see
    `Io`) is the cleanup for a value a cancelled step will never see.
    """
    return Io(fn, args, kwargs or None, undo)


def drive_sync(gen: Step) -> Any:
    """Run a core generator to completion in the calling thread."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if type(effect) is Io:  # the common cases, without a method call
                kwargs = effect.kwargs
                value = effect.fn(*effect.args, **kwargs) if kwargs else effect.fn(*effect.args)
            elif type(effect) is Invoke:
                value = effect.fn(effect.arg)
                if type(value) is not dict:
                    value = _no_awaitable(value, "the step function")
            else:
                value = effect.run_sync()
        except BaseException as exc:
            error = exc


async def drive_async(gen: Step, offload: Offload) -> Any:
    """Run a core generator to completion on the event loop."""
    io_thread = offload if isinstance(offload, IoThread) else None
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if io_thread is not None and type(effect) is Io:  # the common case, no extra frames
                kwargs = effect.kwargs or {}
                call = functools.partial(
                    contextvars.copy_context().run, effect.fn, *effect.args, **kwargs
                )
                loop = asyncio.get_running_loop()
                value = await _on_io_thread(io_thread, loop, call, effect.undo)
            else:
                value = await effect.run_async(offload)
        except BaseException as exc:
            error = exc
