"""Bounded concurrency that keeps the window full, with per-item outcomes.

``run_bounded`` starts at most ``concurrency`` workers; each pulls the next index as soon as its
previous call finishes, so ``concurrency`` calls stay in flight until the queue drains (no batch
boundaries, and no N tasks created up front). A failed item does not stop the others: its
exception is returned in its slot, and the caller decides (``run_many`` turns it into an error
Output; ``run`` re-raises it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["run_bounded"]

T = TypeVar("T")


async def run_bounded(
    count: int, call: Callable[[int], Awaitable[T]], *, concurrency: int
) -> list[T | Exception]:
    """Run ``call(i)`` for ``i in range(count)`` with at most ``concurrency`` in flight.

    Returns one slot per index, in index order: the result, or the exception it raised.
    Cancellation of the caller cancels every worker.
    """
    results: list[T | Exception] = [None] * count  # type: ignore[list-item]
    if count == 0:
        return results
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            try:
                results[index] = await call(index)
            except Exception as exc:
                results[index] = exc

    workers = min(count, concurrency)
    if workers == 1:
        await worker()
        return results
    tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results
