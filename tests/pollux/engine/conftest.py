"""Fixtures for the engine tests: a running emulator and fast-retry configs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pollux import Config, RetryPolicy
from pollux.testing import Emulator

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_delay_s=0.005, jitter=True)


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


@pytest.fixture
def local_config(emu: Emulator) -> Config:
    return Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        retry=FAST_RETRY,
        request_timeout_s=5.0,
    )


@pytest.fixture
def mock_config() -> Config:
    return Config(provider="openai", model="gpt-5-nano", use_mock=True)
