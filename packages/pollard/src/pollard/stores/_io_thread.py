"""`IoThread`: one thread that runs a store's offloaded operations, a queued batch at a time.

An `AsyncRuntime` hands its store I/O to a thread so the event loop never waits on the database.
A pool of threads, each with its own SQLite connection, makes them queue for SQLite's one write
lock, and a waiting writer sleeps in SQLite's busy handler (milliseconds at a time) instead of
being woken when the lock is free. One thread per store, on one connection, never contends with
itself. It also lets the store *group* work: whatever was queued while the thread was busy is
taken as one batch, and the store runs the batch in one transaction (`SQLiteStore` commits it
once), so a burst of concurrent steps pays for one commit instead of one each. Every operation
of a batch is acknowledged (its future completed) only after the batch's ``run_batch`` returned,
that is after the batch is durable.

Operations submitted from an event loop (`IoThread.run_soon`) get a `Pending`: an asyncio future
completed on the loop by one callback per batch, instead of a `concurrent.futures.Future` chained
to one, so the hand-off back to the loop is one wake-up per batch, not per operation, and the
awaiting task resumes one loop iteration after it.

The thread starts on the first operation and exits after ``idle_seconds`` without work (the next
operation starts a new one), so an idle or forgotten store keeps no thread alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any

__all__ = ["Batch", "IoThread", "Outcome", "Pending", "run_each"]

Outcome = tuple[bool, Any]
"""``(True, value)`` or ``(False, exception)``: how one operation of a batch ended."""
Batch = Callable[[Sequence[Callable[[], Any]]], list[Outcome]]
"""Runs a batch of operations (in order) and returns each one's outcome."""


class Pending:
    """An operation queued from an event loop (see `IoThread.run_soon`).

    Attributes:
        waiter: Completed on the loop with the operation's outcome, unless it was cancelled
            first (a cancelled waiter does not stop the operation).
        outcome: The `Outcome`, set on the loop once the operation's batch has run.
    """

    __slots__ = ("_finished", "loop", "outcome", "undo", "undo_outcome", "waiter")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, undo: Callable[[Any], Any] | None = None
    ) -> None:
        self.loop = loop
        self.waiter: asyncio.Future[Any] = loop.create_future()
        self.outcome: Outcome | None = None
        #: Called with the value on the I/O thread, right after the operation, when the waiter
        #: was cancelled meanwhile (nobody will see the value); its outcome in ``undo_outcome``.
        self.undo = undo
        self.undo_outcome: Outcome | None = None
        self._finished: asyncio.Future[None] | None = None

    def finished(self) -> asyncio.Future[None]:
        """A future completed (on the loop) once ``outcome`` is set; for a cancelled waiter."""
        if self._finished is None:
            self._finished = self.loop.create_future()
            if self.outcome is not None:
                self._finished.set_result(None)
        return self._finished

    def settle(self, ok: bool, value: Any) -> None:
        """On the loop: record the outcome and complete the waiter (unless it was cancelled)."""
        self.outcome = (ok, value)
        waiter = self.waiter
        if not waiter.done():
            if ok:
                waiter.set_result(value)
            elif isinstance(value, asyncio.CancelledError):  # never ran (a cancelling shutdown)
                waiter.cancel()
            else:
                waiter.set_exception(value)
                waiter.exception()  # handed to the awaiting task; never "never retrieved"
        if self._finished is not None and not self._finished.done():
            self._finished.set_result(None)


# A queued operation: what to complete (a concurrent future, or a Pending of a loop) and the
# operation itself.
_Item = tuple["Future[Any] | Pending", Callable[[], Any]]
_WAKE: Any = object()
"""Queued by `IoThread.shutdown` so a waiting thread wakes at once (and retires when done)."""


def run_each(operations: Sequence[Callable[[], Any]]) -> list[Outcome]:
    """Run operations one after another, each on its own (a batch that is not grouped)."""
    outcomes: list[Outcome] = []
    for operation in operations:
        try:
            outcomes.append((True, operation()))
        except BaseException as exc:  # delivered to the caller through its future
            outcomes.append((False, exc))
    return outcomes


class IoThread(Executor):
    """A `concurrent.futures.Executor` with one thread that runs batches of queued operations.

    Args:
        run_batch: Runs one batch (at most ``max_batch`` operations, in submission order) and
            returns each outcome; it is where a store groups a batch into one transaction.
        closed_error: The exception ``submit`` raises once the executor is shut down.
        on_start: Called first in every new thread (a store binds its connection there).
        name: The thread's name.
        max_batch: The most operations one batch takes (bounds how long a batch holds a lock).
        idle_seconds: How long the thread waits for work before it exits.
    """

    def __init__(
        self,
        run_batch: Batch,
        *,
        closed_error: Callable[[], BaseException],
        on_start: Callable[[], None] | None = None,
        name: str = "pollard-store-io",
        max_batch: int = 64,
        idle_seconds: float = 1.0,
        run_now: Callable[[Callable[[], Any]], Outcome | None] | None = None,
    ) -> None:
        self._run_batch = run_batch
        self._run_now = run_now
        self._pending = 0  # operations queued and not yet delivered
        self._closed_error = closed_error
        self._on_start = on_start
        self._name = name
        self._max_batch = max_batch
        self._idle = idle_seconds
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()  # _Item or _WAKE
        # Guards starting and retiring the thread against a concurrent submit, and shutdown.
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._shutdown = False

    @property
    def thread(self) -> threading.Thread | None:
        """The running thread, or None while idle."""
        return self._thread

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue ``fn(*args, **kwargs)``; its future completes once its batch has run.

        Raises:
            Exception: ``closed_error()`` after `shutdown`.
        """
        future: Future[Any] = Future()
        self._put((future, functools.partial(fn, *args, **kwargs)))
        return future

    def run_soon(
        self,
        loop: asyncio.AbstractEventLoop,
        operation: Callable[[], Any],
        undo: Callable[[Any], Any] | None = None,
    ) -> Pending:
        """Queue ``operation()`` from ``loop``; its `Pending` settles there after its batch.

        Cancelling ``Pending.waiter`` does not stop the operation: it still runs, and its
        outcome is still recorded (``Pending.finished()`` tells when). If the waiter was
        cancelled by the time the operation returned a value, ``undo(value)`` runs on this
        thread before anything queued later, so a store closed meanwhile (its close waits for
        this thread) is never left holding what the operation created.

        Raises:
            Exception: ``closed_error()`` after `shutdown`.
        """
        pending = Pending(loop, undo)
        self._put((pending, operation))
        return pending

    def try_now(self, operation: Callable[[], Any]) -> Outcome | None:
        """Run ``operation`` on the calling thread when this thread has nothing to do.

        Only with a ``run_now`` (the store decides whether it can run the operation at once
        without waiting, see `SQLiteStore`), and only while nothing is queued or running here,
        so no queued operation is overtaken. Returns the `Outcome`, or None: queue it instead.
        """
        if self._run_now is None or self._pending or self._shutdown:
            return None
        return self._run_now(operation)

    def _put(self, item: _Item) -> None:
        with self._lock:
            if self._shutdown:
                raise self._closed_error()
            self._pending += 1
            self._queue.put(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()

    def shutdown(
        self, wait: bool = True, *, cancel_futures: bool = False, timeout: float | None = None
    ) -> None:
        """Refuse new operations; the queued ones still run (with ``wait``, wait for them).

        Args:
            wait: Wait (up to ``timeout`` seconds) until the queued operations have run. A call
                from the executor's own thread never waits for itself.
            cancel_futures: Cancel the queued operations that have not started instead.
            timeout: The longest wait, or None for no limit.
        """
        with self._lock:
            self._shutdown = True
            thread = self._thread
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not _WAKE:
                        _cancel(item[0])
            if thread is not None:
                self._queue.put(_WAKE)
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _next_batch(self) -> list[_Item] | None:
        """Wait for work; the queued items (at most ``max_batch``), or None to retire."""
        while True:
            try:
                # Once shut down, the queue is only drained: no waiting for more work.
                first = self._queue.get(block=not self._shutdown, timeout=self._idle)
            except queue.Empty:
                first = None  # idle
            if first is not None and first is not _WAKE:
                break
            with self._lock:  # a submit holds the lock while it queues: nothing is stranded
                if self._queue.empty() and (first is None or self._shutdown):
                    self._thread = None
                    return None
        batch = [first]
        get_nowait = self._queue.get_nowait
        while len(batch) < self._max_batch:
            try:
                item = get_nowait()
            except queue.Empty:
                break
            if item is not _WAKE:
                batch.append(item)
        return batch

    def _loop(self) -> None:
        if self._on_start is not None:
            try:
                self._on_start()
            except BaseException as exc:  # no connection: fail what is queued
                with self._lock:
                    failed: list[_Item] = []
                    while not self._queue.empty():
                        item = self._queue.get_nowait()
                        if item is not _WAKE:
                            failed.append(item)
                    self._pending -= len(failed)
                    self._thread = None
                _deliver([(target, False, exc) for target, _ in failed])
                return
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            live = [item for item in batch if _claim(item[0])]
            if not live:
                self._delivered(len(batch))
                continue
            try:
                outcomes = self._run_batch([operation for _, operation in live])
            except BaseException as exc:  # the batch runner itself failed: every operation did
                outcomes = [(False, exc)] * len(live)
            self._undo_abandoned(live, outcomes)
            _deliver(
                [
                    (target, ok, value)
                    for (target, _), (ok, value) in zip(live, outcomes, strict=True)
                ]
            )
            self._delivered(len(batch))
            del batch, live, outcomes  # drop references to results before waiting again

    def _delivered(self, count: int) -> None:
        with self._lock:
            self._pending -= count

    def _undo_abandoned(self, live: list[_Item], outcomes: list[Outcome]) -> None:
        # A waiter is cancelled on its loop (Task.cancel cancels the future it awaits at once);
        # reading that flag here is a plain attribute read. A cancellation that lands after this
        # check is undone by the awaiting side instead (see pollard._step._effects).
        undos: list[tuple[Pending, Callable[[], Any]]] = []
        for (target, _), (ok, value) in zip(live, outcomes, strict=True):
            if (
                ok
                and isinstance(target, Pending)
                and target.undo is not None
                and target.waiter.cancelled()
            ):
                undos.append((target, functools.partial(target.undo, value)))
        if not undos:
            return
        try:
            results = self._run_batch([undo for _, undo in undos])
        except BaseException as exc:
            results = [(False, exc)] * len(undos)
        for (target, _), result in zip(undos, results, strict=True):
            target.undo_outcome = result


def _claim(target: Future[Any] | Pending) -> bool:
    """Mark a queued operation as started; False when its concurrent future was cancelled."""
    if isinstance(target, Future):
        return target.set_running_or_notify_cancel()
    return True  # a Pending always runs: its caller waits for the outcome even if cancelled


def _cancel(target: Future[Any] | Pending) -> None:
    if isinstance(target, Future):
        target.cancel()
    else:  # never ran: nothing to undo
        _deliver([(target, False, asyncio.CancelledError())])


def _deliver(done: list[tuple[Future[Any] | Pending, bool, Any]]) -> None:
    """Complete a batch: concurrent futures here, each loop's `Pending`s by one callback there."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Pending, bool, Any]]] = {}
    for target, ok, value in done:
        if isinstance(target, Future):
            if ok:
                target.set_result(value)
            else:
                target.set_exception(value)
        else:
            by_loop.setdefault(target.loop, []).append((target, ok, value))
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle_all, items)


def _settle_all(items: list[tuple[Pending, bool, Any]]) -> None:
    for pending, ok, value in items:
        pending.settle(ok, value)
