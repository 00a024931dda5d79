"""A session-wide rate-limit pause respects RetryPolicy.max_elapsed_s (no silent long blocks)."""

from __future__ import annotations

import pytest

from pollux import (
    Config,
    Environment,
    Input,
    RateLimitError,
    RetryPolicy,
    Session,
)
from pollux._engine.retry import Pacer
from pollux.testing import Emulator, ErrorResponse, Reply

from .test_retry_schedule import FakeTime


async def test_a_pause_longer_than_the_limit_raises_instead_of_sleeping() -> None:
    fake = FakeTime()
    pacer = Pacer(clock=fake.clock, sleep=fake.sleep)
    pacer.note(RateLimitError("slow down", retryable=True, retry_after_s=60.0))
    with pytest.raises(RateLimitError) as info:
        await pacer.wait(15.0)
    assert info.value.retry_after_s == 60.0 and info.value.hint
    assert "max_elapsed_s" in str(info.value)
    assert fake.sleeps == []
    await pacer.wait(None)  # no deadline: wait as long as the provider asked
    assert fake.sleeps == [60.0]


async def test_the_next_call_fails_fast_during_a_long_pause(emu: Emulator) -> None:
    config = Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        retry=RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_elapsed_s=1.0),
    )
    emu.script("local", ErrorResponse(429, retry_after=120), Reply("never sent"))
    async with Session(config) as session:
        with pytest.raises(RateLimitError):
            await session.interact(Environment(), Input("first"))
        with pytest.raises(RateLimitError) as info:
            await session.interact(Environment(), Input("second"))
    assert info.value.provider == "local" and info.value.call_idx == 0
    # The second call was refused locally: the server saw only the first request.
    assert len(emu.requests_for("local.chat")) == 1
