"""``pollux many``: prompts over shared sources, each answer written as soon as it arrives.

``run_many`` returns when every prompt has ended; the command needs each prompt's outcome as
it completes (to write it, to show progress, to keep it when interrupted). So each prompt is its
own call, ``Config.request_concurrency`` workers keep that many calls in flight, and the shared
sources are prepared once: in one ``Session`` (``prepare_environment``) without a ledger, or in
the event loop's shared session (``pollux.prepare_environment``, which ``pollux.run`` and so the
bridge reuse) with one.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import pollux
from pollux import Config, Environment, Session, Source

from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from .progress import QuotaWatch, fanout_progress
from .records import Record, RecordSink, record_for

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["attempts_of", "fan_out"]


def attempts_of(prompts: Sequence[str]) -> list[int]:
    """For each prompt, how many identical prompts come before it (its pollard attempt)."""
    seen: dict[str, int] = {}
    attempts = []
    for prompt in prompts:
        attempts.append(seen.get(prompt, 0))
        seen[prompt] = attempts[-1] + 1
    return attempts


async def _drive(
    todo: Sequence[int],
    one: Callable[[int], Awaitable[Record]],
    workers: int,
    on_record: Callable[[Record], None],
) -> bool:
    """Run ``one`` over ``todo`` with ``workers`` in flight; True when Ctrl-C stopped it.

    SIGINT stops the fan-out instead of raising KeyboardInterrupt somewhere inside a call: the
    calls in flight are cancelled (their records are not written, so a resume runs them again)
    and every record already written stays.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    try:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        handled = True
    except (NotImplementedError, RuntimeError, ValueError):  # no signals here (not main thread)
        handled = False
    pending = iter(todo)

    async def worker() -> None:
        for index in pending:  # one iterator shared by every worker: each index runs once
            on_record(await one(index))

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(workers, len(todo)))]
    stopper = asyncio.ensure_future(stop.wait())
    error: BaseException | None = None
    try:
        waiting: set[asyncio.Future[Any]] = {*tasks, stopper}
        while True:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            failed = [task for task in done if task is not stopper and task.exception()]
            if failed:  # a usage error (every prompt would hit it): stop the others
                error = failed[0].exception()
                break
            if stop.is_set() or waiting == {stopper}:
                break
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
        for task in (*tasks, stopper):
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if error is not None:
        raise error
    return stop.is_set()


async def fan_out(
    prompts: Sequence[str],
    todo: Sequence[int],
    *,
    sources: Sequence[Source],
    instructions: str | None,
    schema: dict[str, Any] | None,
    config: Config,
    ledger: Ledger | None,
    sink: RecordSink,
    skipped: int,
    settings: dict[str, Any] | None = None,
) -> int:
    """Run the prompts of ``todo``, writing each record as it arrives; return the exit code.

    ``settings`` are generation settings every call gets (``--max-output-tokens``).
    """
    settings = settings or {}
    watch = config.quota if isinstance(config.quota, QuotaWatch) else None
    progress = fanout_progress(
        len(prompts),
        skipped,
        records_on_terminal=sink.path is None and sys.stdout.isatty(),
        quota=watch,
    )

    def on_record(record: Record) -> None:
        sink.write(record)
        progress.done(record)

    workers = config.request_concurrency
    try:
        if ledger is None:
            async with Session(config) as session:
                environment = await session.prepare_environment(
                    sources=sources, instructions=instructions
                )

                async def plain(index: int) -> Record:
                    results = await session.run_many(
                        prompts[index], environment=environment, output=schema, **settings
                    )
                    return record_for(index, results.outputs[0], prompt=prompts[index])

                interrupted = await _drive(todo, plain, workers, on_record)
        else:
            if ledger.options.replay:  # preparing could upload: replay calls no provider
                environment = Environment(instructions=instructions, sources=tuple(sources))
            else:
                environment = await pollux.prepare_environment(
                    sources=sources, instructions=instructions, config=config
                )
            attempts = attempts_of(prompts)

            async def governed(index: int) -> Record:
                return await ledger.one(
                    index,
                    prompts[index],
                    attempts[index],
                    environment=environment,
                    output=schema,
                    settings=settings,
                )

            interrupted = await _drive(todo, governed, workers, on_record)
    finally:
        progress.close()
    return _summary(len(prompts), len(todo), skipped, sink, interrupted)


def _summary(total: int, ran: int, skipped: int, sink: RecordSink, interrupted: bool) -> int:
    counts = sink.counts
    finished = sum(counts.values())
    parts = [f"{counts['ok'] + skipped} of {total} answered"]
    if skipped:
        parts[0] += f" ({skipped} earlier)"
    parts.append(f"{counts['failed']} failed")
    # Refusals and misses only happen with --ledger: named when there are any.
    parts += [f"{counts[s]} {s}" for s in ("refused", "missing") if counts[s]]
    parts.append(f"{sink.tokens:,} tokens")
    cache = sink.cache_summary()
    if cache is not None:
        parts.append(cache)
    where = f"; records in {sink.path}" if sink.path is not None else ""
    sys.stderr.write(f"pollux: {', '.join(parts)}{where}\n")
    if interrupted:
        resume = (
            f"run the same command again to resume from {sink.path}"
            if sink.path is not None
            else "pass --out FILE to be able to resume"
        )
        sys.stderr.write(f"pollux: interrupted: {ran - finished} prompts not run; {resume}\n")
        return EXIT_INTERRUPTED
    return EXIT_OK if counts["ok"] + skipped == total else EXIT_FAILED
