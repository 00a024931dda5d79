"""Fixtures: an emulator with the Gemini wire, and a config pointed at it.

google-genai reads ``GOOGLE_GEMINI_BASE_URL``; that is how the provider reaches the emulator
(``Config(base_url=...)`` is for local servers only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pollux import Config, RetryPolicy
from pollux.providers.gemini.caching import REGISTRY
from pollux.testing import Emulator

from ._fake import camel

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_delay_s=0.005)


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emulator.base_url("gemini"))
        # Deferred lifecycle calls take only the handle: the key comes from the environment.
        monkeypatch.setenv("GEMINI_API_KEY", "test-key")
        yield emulator


@pytest.fixture(autouse=True)
def _fresh_cache_registry() -> Iterator[None]:
    # The registry is process-wide by design; each test starts as a new process would.
    REGISTRY._entries.clear()
    yield
    REGISTRY._entries.clear()


@pytest.fixture
def config(emu: Emulator) -> Config:
    return Config(
        provider="gemini",
        model="gemini-2.5-flash",
        api_key="test-key",
        retry=FAST_RETRY,
        request_timeout_s=10.0,
    )


def bodies(emu: Emulator, selector: str = "gemini.generate") -> list[dict[str, Any]]:
    """Request bodies with keys camelCased (the SDK leaves nested keys of plain dicts as given)."""
    return [camel(r.json) for r in emu.requests_for(selector)]


def routes(emu: Emulator) -> list[str]:
    return [r.route for r in emu.requests]
