"""`SharedQuota` admits waiters in arrival order, across workers, on every store.

Each quota below is its own `SharedQuota` with its own store connection, as separate hosts
would have. The window holds one request (for a minute), so room appears only when a test frees
it: who is admitted next is decided by the queue alone, never by timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import MemoryStore
from pollard.adapters.pollux import SharedQuota
from pollux import RateLimitError
from pollux.quota import QuotaPermit, QuotaRequest
from tests.pollard._postgres import fresh_schema

Make = Callable[..., SharedQuota]


@pytest.fixture(params=["sqlite", "memory", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | MemoryStore]:
    """One quota store per test: a SQLite file, a MemoryStore, a fresh PostgreSQL schema, or a
    Redis server (each test's quota has a name of its own, so its keys are fresh)."""
    if request.param == "sqlite":
        yield str(tmp_path / "quota.db")
    elif request.param == "memory":
        yield MemoryStore()
    elif request.param == "postgres":
        with fresh_schema(request.getfixturevalue("pg_dsn")) as dsn:
            yield f"{dsn}#quota"
    else:
        yield request.getfixturevalue("redis_url")


@pytest.fixture
async def make(store: str | MemoryStore) -> AsyncIterator[Make]:
    """Open quotas on the one store (each with its own connection); closed after the test."""
    name = f"fifo-{os.urandom(4).hex()}"
    opened: list[SharedQuota] = []

    def open_quota(**options: Any) -> SharedQuota:
        settings: dict[str, Any] = {"requests_per_minute": 1, "name": name, "poll_s": 0.01}
        settings.update(options)
        quota = SharedQuota(store, **settings)
        opened.append(quota)
        return quota

    yield open_quota
    for quota in opened:
        quota.close()


def _request(deadline: float | None = None) -> QuotaRequest:
    return QuotaRequest("openai", "gpt-5-nano", None, 10, deadline)


async def _free(quota: SharedQuota, permit: QuotaPermit) -> None:
    """Drop an admitted attempt's hold: the window has room for one more."""
    reservation = permit._reservation  # type: ignore[attr-defined]
    if quota._redis is not None:
        scope = quota._window_keys(_request())[2]
        await quota._call(quota._redis.release, scope, reservation)
    else:
        await quota._call(lambda: quota._open_store().release(reservation))


async def _queued(quota: SharedQuota) -> asyncio.Task[QuotaPermit]:
    """Start a waiter and return once its first attempt was refused and queued."""
    task = asyncio.create_task(quota.acquire(_request()))
    for _ in range(5):  # the task submits its first attempt at its first step
        await asyncio.sleep(0)
    await quota._call(lambda: None)  # the quota's thread ran that attempt
    assert not task.done()
    return task


async def test_waiters_are_admitted_in_arrival_order_across_quotas(make: Make) -> None:
    a, b = make(), make()
    held = await a.acquire(_request())
    # Six waiters arrive in turn on the two "hosts" (jittered polling, one poller per host,
    # would serve them in an order decided by which host asks first after each release).
    waiters = [await _queued(quota) for quota in (a, a, b, a, b, b)]
    order = []
    pending = set(waiters)
    while pending:
        await _free(a, held)
        done, pending = await asyncio.wait(pending, timeout=30, return_when="FIRST_COMPLETED")
        assert len(done) == 1, "room for one request admitted exactly one waiter"
        task = done.pop()
        order.append(waiters.index(task))
        held = task.result()
        assert held.waited_s > 0
    assert order == [0, 1, 2, 3, 4, 5]


async def test_a_newcomer_queues_behind_and_a_cancelled_waiter_leaves(make: Make) -> None:
    # The first quota's waiter asks the window rarely, so the room freed below stays free.
    a = make(poll_s=60.0, queue_lease_s=600.0)
    b = make()
    held = await a.acquire(_request())
    waiter = await _queued(a)
    await _free(a, held)
    # The window has room, but someone waits: a first attempt does not overtake it.
    slot: list[Any] = [None]
    admitted, _ = await b._call(b._attempt, _request(), slot)
    assert not admitted
    assert slot[0] is not None and slot[0].ahead == 1
    # Cancelled, the waiter gives its place up: the newcomer heads the line and is admitted.
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    await a._call(lambda: None)  # its ticket's release ran on the quota's thread
    admitted, _ = await b._call(b._attempt, _request(), slot)
    assert admitted
    assert slot[0] is None


async def test_a_waiter_past_its_deadline_leaves_the_queue(make: Make) -> None:
    a = make()
    held = await a.acquire(_request())
    loop = asyncio.get_running_loop()
    with pytest.raises(RateLimitError):
        await a.acquire(_request(deadline=loop.time() + 0.05))
    await a._call(lambda: None)
    await _free(a, held)
    # Nobody waits any more, so a first attempt on the freed window is admitted at once.
    slot: list[Any] = [None]
    admitted, _ = await a._call(a._attempt, _request(), slot)
    assert admitted
    assert slot[0] is None


async def test_a_dead_waiters_ticket_ends_with_its_lease(make: Make) -> None:
    live = make()
    dead = make(queue_lease_s=0.2)
    held = await live.acquire(_request())
    # A waiter takes the head of the line, then its process dies: it never renews its ticket.
    slot: list[Any] = [None]
    admitted, _ = await dead._call(dead._attempt, _request(), slot)
    assert not admitted and slot[0] is not None and slot[0].ahead == 0
    waiter = await _queued(live)
    await _free(live, held)
    # Once the dead ticket's lease ends, the live waiter heads the line and is admitted.
    permit = await asyncio.wait_for(waiter, timeout=30)
    assert permit.waited_s > 0


async def test_an_uncontended_attempt_takes_no_ticket(make: Make) -> None:
    a = make(requests_per_minute=2)
    slot: list[Any] = [None]
    admitted, _ = await a._call(a._attempt, _request(), slot)
    assert admitted and slot[0] is None


_KILLED_WAITER = """
import asyncio, sys, time
from pollard.adapters.pollux import SharedQuota
from pollux.quota import QuotaRequest

async def main():
    quota = SharedQuota(sys.argv[1], requests_per_minute=1, name=sys.argv[2], queue_lease_s=0.3)
    slot = [None]
    admitted, _ = await quota._call(
        quota._attempt, QuotaRequest("openai", "gpt-5-nano", None, 10), slot
    )
    print("queued" if not admitted and slot[0] is not None else "admitted", flush=True)
    time.sleep(600)  # killed here, its ticket still in the line

asyncio.run(main())
"""


async def test_a_killed_waiter_process_does_not_block_the_line(tmp_path: Path) -> None:
    path, name = str(tmp_path / "quota.db"), "killed"
    with SharedQuota(path, requests_per_minute=1, name=name, poll_s=0.01) as quota:
        held = await quota.acquire(_request())
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_WAITER, path, name], stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "queued"
            waiter = await _queued(quota)  # behind the child in the line
        finally:
            child.kill()
            child.communicate()
        await _free(quota, held)
        permit = await asyncio.wait_for(waiter, timeout=30)
        assert permit.waited_s > 0
