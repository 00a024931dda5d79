"""The retry loop and the scheduler, with a fake clock and gates (no timing assertions)."""

from __future__ import annotations

import asyncio

import pytest

from pollux import APIError, ContextOverflowError, RetryPolicy
from pollux._engine.retry import is_retryable, with_retries
from pollux._engine.schedule import run_bounded


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay


def _failing(errors: list[Exception], result: str = "ok"):  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    async def attempt() -> str:
        calls["n"] += 1
        if errors:
            raise errors.pop(0)
        return result

    return attempt, calls


async def test_full_jitter_stays_within_the_backoff() -> None:
    fake = FakeTime()
    policy = RetryPolicy(max_attempts=5, initial_delay_s=1.0, max_delay_s=3.0, max_elapsed_s=None)
    errors: list[Exception] = [APIError("x", retryable=True) for _ in range(4)]
    attempt, calls = _failing(errors)
    assert await with_retries(attempt, policy, clock=fake.clock, sleep=fake.sleep) == "ok"
    assert calls["n"] == 5
    for delay, cap in zip(fake.sleeps, [1.0, 2.0, 3.0, 3.0], strict=True):
        assert 0.0 <= delay <= cap


async def test_retry_after_is_honoured() -> None:
    fake = FakeTime()
    policy = RetryPolicy(max_attempts=2, initial_delay_s=0.1, jitter=False, max_elapsed_s=None)
    attempt, _ = _failing([APIError("slow down", retryable=True, retry_after_s=7.0)])
    await with_retries(attempt, policy, clock=fake.clock, sleep=fake.sleep)
    assert fake.sleeps == [7.0]


async def test_retry_after_beyond_the_deadline_gives_up() -> None:
    fake = FakeTime()
    policy = RetryPolicy(max_attempts=5, max_elapsed_s=2.0)
    attempt, calls = _failing([APIError("later", retryable=True, retry_after_s=30.0)])
    with pytest.raises(APIError, match="later"):
        await with_retries(attempt, policy, clock=fake.clock, sleep=fake.sleep)
    assert calls["n"] == 1 and fake.sleeps == []


async def test_deadline_clips_the_delay_and_stops() -> None:
    fake = FakeTime()
    policy = RetryPolicy(
        max_attempts=10,
        initial_delay_s=1.0,
        backoff_multiplier=2.0,
        jitter=False,
        max_delay_s=10.0,
        max_elapsed_s=2.5,
    )
    errors: list[Exception] = [APIError(str(i), retryable=True) for i in range(10)]
    attempt, calls = _failing(errors)
    with pytest.raises(APIError):
        await with_retries(attempt, policy, clock=fake.clock, sleep=fake.sleep)
    assert fake.sleeps == [1.0, 1.5]
    assert calls["n"] == 3


@pytest.mark.parametrize(
    "error",
    [
        APIError("bad request", retryable=False, status_code=400),
        APIError("auth", retryable=True, error_category="auth_refreshable"),
        ContextOverflowError("too long"),
        ValueError("not an API error"),
    ],
)
async def test_final_errors_are_not_retried(error: Exception) -> None:
    fake = FakeTime()
    attempt, calls = _failing([error])
    with pytest.raises(type(error)):
        await with_retries(attempt, RetryPolicy(max_attempts=5), clock=fake.clock, sleep=fake.sleep)
    assert calls["n"] == 1
    assert not is_retryable(error)


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_scheduler_keeps_the_window_full_and_returns_errors_in_place() -> None:
    in_flight = 0
    peak = 0
    started: list[int] = []
    gates = {i: asyncio.Event() for i in range(10)}

    async def call(index: int) -> int:
        nonlocal in_flight, peak
        started.append(index)
        in_flight += 1
        peak = max(peak, in_flight)
        await gates[index].wait()
        in_flight -= 1
        if index == 3:
            raise APIError("boom")
        return index * 10

    task = asyncio.ensure_future(run_bounded(10, call, concurrency=4))
    await _settle()
    assert started == [0, 1, 2, 3]
    # Finishing one call starts exactly one more: no batch boundaries.
    gates[2].set()
    await _settle()
    assert started == [0, 1, 2, 3, 4]
    for gate in gates.values():
        gate.set()
    results = await task
    assert peak == 4
    assert isinstance(results[3], APIError)
    assert [r for i, r in enumerate(results) if i != 3] == [0, 10, 20, 40, 50, 60, 70, 80, 90]


async def test_scheduler_cancellation_cancels_workers() -> None:
    started = asyncio.Event()

    async def call(index: int) -> int:
        started.set()
        await asyncio.sleep(60)
        return index

    task = asyncio.ensure_future(run_bounded(5, call, concurrency=2))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_pacer_holds_every_call_for_a_rate_limit_pause() -> None:
    from pollux import RateLimitError
    from pollux._engine.retry import Pacer

    fake = FakeTime()
    pacer = Pacer(clock=fake.clock, sleep=fake.sleep)
    await pacer.wait()
    assert fake.sleeps == []
    pacer.note(APIError("server error", retryable=True, retry_after_s=9.0))  # not a rate limit
    pacer.note(RateLimitError("slow down", retryable=True))  # no Retry-After
    assert pacer.pause_s() == 0.0
    pacer.note(RateLimitError("slow down", retryable=True, retry_after_s=2.0))
    fake.now += 0.5
    assert pacer.pause_s() == 1.5
    await pacer.wait()
    await pacer.wait()  # the pause is over: the second caller does not wait again
    assert fake.sleeps == [1.5]
