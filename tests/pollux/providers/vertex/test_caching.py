"""Vertex AI context caches report their life to ``observe_caches`` as Gemini's do, as ``vertex``.

A cache's creation (a ``CachePolicy`` call), refresh and early delete are each one
:class:`~pollux.interaction.CacheEvent` with ``provider="vertex"`` and provider-clock times, so
a ledger prices Vertex storage like Gemini's; ``known_context_cache`` tells, without I/O, whether
the next call may create the cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.oauth2.credentials import Credentials

from pollux import CachePolicy, Config, ConfigurationError, Environment, RetryPolicy, Source, run
from pollux.interaction import CacheEvent, observe_caches
from pollux.providers.gemini.caching import REGISTRY
from pollux.providers.vertex import (
    delete_context_cache,
    known_context_cache,
    refresh_context_cache,
)
from pollux.testing import Emulator
from tests._google import without_google

TOKEN = "ya29.vertex-cache-token-0123456789"
MODEL = "gemini-2.5-flash"
LONG = Source.from_text("rule " * 1500, identifier="rule book")


@pytest.fixture(autouse=True)
def _no_google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    without_google(monkeypatch, tmp_path)


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator(api_key=TOKEN, models=(MODEL,)) as emulator:
        monkeypatch.setattr(REGISTRY, "clock", emulator.now)  # pollux's clock is the provider's
        yield emulator
    REGISTRY._entries.clear()  # virtual-clock entries mean nothing on the real clock


def vertex(emu: Emulator, **fields: object) -> Config:
    options: dict[str, object] = {
        "provider": "vertex",
        "model": MODEL,
        "project": "acme-prod",
        "location": "us-central1",
        "base_url": emu.base_url("vertex"),
        "credentials": Credentials(token=TOKEN),
        "retry": RetryPolicy(max_attempts=1),
        "request_timeout_s": 5.0,
    }
    options.update(fields)
    return Config(**options)  # type: ignore[arg-type]


async def test_create_refresh_and_delete_are_reported_as_vertex_on_the_provider_clock(
    emu: Emulator,
) -> None:
    config = vertex(emu)
    seen: list[CacheEvent] = []
    env = Environment(sources=[LONG], cache=CachePolicy(ttl_seconds=600))
    t0 = emu.now()
    assert known_context_cache(env, config=config) is None
    with observe_caches(seen.append):
        await run("Q1", environment=env, config=config)
        await run("Q2", environment=env, config=config)  # a hit: no event
        assert known_context_cache(env, config=config) == t0 + 600
        emu.advance(100)
        assert await refresh_context_cache(env, config=config, ttl_seconds=3600) == t0 + 3700
        emu.advance(50)
        assert await delete_context_cache(env, config=config) is True
        assert await delete_context_cache(env, config=config) is False  # gone: no event
    await refresh_context_cache(env, config=config)  # outside the block: nothing is reported
    created, refreshed, deleted = seen
    assert {e.provider for e in seen} == {"vertex"}
    assert (created.kind, created.at, created.expires_at) == ("created", t0, t0 + 600)
    assert created.ttl_seconds == 600 and created.tokens == 1500 and created.model == MODEL
    assert (refreshed.kind, refreshed.at, refreshed.ttl_seconds) == ("refreshed", t0 + 100, 3600)
    assert (refreshed.previous_expires_at, refreshed.expires_at) == (t0 + 600, t0 + 3700)
    assert refreshed.tokens == 1500
    assert (deleted.kind, deleted.at, deleted.expires_at) == ("deleted", t0 + 150, t0 + 3700)
    assert {e.name for e in seen} == {created.name} and deleted.tokens == 1500
    assert known_context_cache(env, config=config) is None


async def test_known_context_cache_is_per_project_and_location_and_needs_no_io(
    emu: Emulator,
) -> None:
    config = vertex(emu)
    env = Environment(sources=[LONG], cache=CachePolicy(ttl_seconds=600))
    await run("Q", environment=env, config=config)
    sent = len(emu.requests)
    assert known_context_cache(env, config=config) == emu.now() + 600
    # Another project or location is another account: its cache is not this one.
    assert known_context_cache(env, config=vertex(emu, project="acme-dev")) is None
    assert known_context_cache(env, config=vertex(emu, location="europe-west4")) is None
    # The project named by the injected credentials is settled without I/O, as calls settle it.
    named = Credentials(token=TOKEN, quota_project_id="acme-prod")
    assert known_context_cache(env, config=vertex(emu, project=None, credentials=named))
    # No project without reading the Application Default Credentials: "not known".
    assert known_context_cache(env, config=vertex(emu, project=None, credentials=None)) is None
    assert len(emu.requests) == sent  # none of it reached Vertex AI


def test_known_context_cache_refuses_another_provider() -> None:
    env = Environment(sources=[LONG], cache=CachePolicy())
    with pytest.raises(ConfigurationError) as info:
        known_context_cache(env, config=Config(provider="gemini", model=MODEL, api_key="k"))
    assert "provider='vertex'" in str(info.value) and info.value.hint
