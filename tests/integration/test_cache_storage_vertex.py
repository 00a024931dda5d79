"""Vertex AI explicit-cache storage through the bridge, held, charged and settled as Gemini's.

Vertex AI runs Gemini's ``cachedContents`` under a project and location and bills them the same
way (creation at the input rate, storage per token-hour for as long as the cache exists): a call
that may create a cache is admitted against its worst case before any request, and a refresh or
an early delete settles the storage, so the ledger equals the bill computed by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from google.oauth2.credentials import Credentials

from pollard import AsyncRuntime, Budget, BudgetExceeded
from pollard.adapters.pollux import (
    PolluxTokenEstimator,
    governed_delete_cache,
    governed_refresh_cache,
    governed_run,
    governed_run_many,
)
from pollard.meters import CostMeter, StepMeter, TokenMeter
from pollux import CachePolicy, Config, Environment, RetryPolicy, Source
from pollux.providers.gemini.caching import REGISTRY
from pollux.testing import Emulator
from tests._google import without_google
from tests.integration._ledger import notes, usd

TOKEN = "ya29.vertex-storage-token-0123456789"
MODEL = "gemini-2.5-pro"
M = Decimal(1_000_000)
# Vertex AI prices the Gemini models at Google's list prices (what the bridge charges, as
# genai-prices lists no Vertex AI provider): Gemini 2.5 Pro per 1M tokens, prompts up to 200K,
# input $1.25, output $10, cached input $0.125; cache storage $4.50 per 1M tokens per hour, for
# the time the cache exists. Creating the cache bills its tokens once at the input rate.
INPUT, OUTPUT, CACHE_READ = Decimal("1.25"), Decimal("10"), Decimal("0.125")
STORAGE_PER_HOUR = Decimal("4.50")
# 6000 words: the emulator counts 6000 tokens; the hold estimates 48000 bytes / 4 = 12000.
ARCHIVE = Source.from_text("archive " * 6000)


@pytest.fixture(autouse=True)
def _no_google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    without_google(monkeypatch, tmp_path)


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator(api_key=TOKEN, models=(MODEL,)) as emulator:
        monkeypatch.setattr(REGISTRY, "clock", emulator.now)  # the provider's clock
        yield emulator
    REGISTRY._entries.clear()  # virtual-clock entries mean nothing on the real clock


@pytest.fixture
def cfg(emu: Emulator) -> Config:
    return Config(
        provider="vertex",
        model=MODEL,
        project="acme-prod",
        location="us-central1",
        base_url=emu.base_url("vertex"),
        credentials=Credentials(token=TOKEN),
        retry=RetryPolicy(max_attempts=1),
        request_timeout_s=30.0,
    )


async def test_vertex_ledger_equals_the_bill_for_a_cache_created_refreshed_and_deleted(
    emu: Emulator, cfg: Config
) -> None:
    env = Environment(sources=(ARCHIVE,), cache=CachePolicy(ttl_seconds=3600))
    meters = [StepMeter(), TokenMeter(), CostMeter.from_genai_prices()]
    async with AsyncRuntime(meters=meters) as rt:
        created_at = emu.now()
        run = rt.run("vertex", budget=Budget(usd=100))
        answers = [await governed_run(run, q, config=cfg, environment=env) for q in ("Q1", "Q2")]
        # Ten minutes in, the cache is refreshed for two hours from then (to 7800 s); at 40
        # minutes it is deleted. Storage is billed for the 2400 s it existed.
        emu.advance(600)
        assert await governed_refresh_cache(run, env, config=cfg, ttl_seconds=7200)
        emu.advance(1800)
        assert await governed_delete_cache(run, env, config=cfg) is True
        assert not emu.wire("vertex").caches
        created = answers[0].diagnostics.raw["cache"]
        assert created["created"] is True and not answers[1].diagnostics.raw["cache"]["created"]
        tokens = created["tokens"]
        assert tokens == 6000 and all(a.usage.cached_tokens == tokens for a in answers)
        bill = sum(
            (
                a.usage.uncached_input_tokens * INPUT
                + (a.usage.cached_tokens or 0) * CACHE_READ
                + a.usage.output_tokens * OUTPUT
            )
            / M
            for a in answers
        )
        bill += tokens * INPUT / M  # creation
        bill += tokens * STORAGE_PER_HOUR * Decimal(2400) / Decimal(3600) / M  # 2400 s held
        assert usd(run) == bill
        (storage,) = notes(run, "cache_storage")
        refreshed, deleted = sorted(
            notes(run, "cache_settlement"), key=lambda n: n.payload["event"] != "refreshed"
        )
        assert refreshed.parent == deleted.parent == storage.id
        per_hour = tokens * STORAGE_PER_HOUR / M
        assert Decimal(refreshed.meta["cache"]["storage_usd"]) == per_hour * 4200 / 3600
        assert Decimal(deleted.meta["cache"]["storage_usd"]) == -per_hour * 5400 / 3600
        (hold,) = notes(run, "cache_hold")  # the first call held; the second knew the cache
        (release,) = notes(run, "cache_hold_release")
        assert release.parent == hold.id
        assert Decimal(hold.result["usd"]) == 12000 * INPUT / M + 12000 * STORAGE_PER_HOUR / M
        assert emu.now() - created_at == 2400


async def test_a_budget_that_cannot_afford_the_vertex_cache_refuses_before_any_request(
    emu: Emulator, cfg: Config
) -> None:
    cached = Environment(sources=(ARCHIVE,), cache=CachePolicy(ttl_seconds=3600))
    prices = {MODEL: {"input_per_1m": "1.25", "cache_read_per_1m": "0.125", "output_per_1m": "10"}}
    meter = CostMeter(prices, estimator=PolluxTokenEstimator(), reserved_output_tokens=100)
    # The call alone fits (12001 tokens x $1.25 + 100 x $10 per 1M = $0.016); with the cache's
    # worst case (12000 x $1.25 + 12000 x $4.50 x 1 h, per 1M = $0.069) it does not.
    async with AsyncRuntime(meters=[meter]) as rt:
        run = rt.run("small", budget=Budget(usd="0.03"))
        with pytest.raises(BudgetExceeded) as info:
            await governed_run(run, "Q", config=cfg, environment=cached, max_tokens=100)
        assert info.value.meter == "usd" and info.value.refusal_id
        with pytest.raises(BudgetExceeded):
            await governed_run_many(run, ["A", "B"], config=cfg, environment=cached, max_tokens=100)
        assert emu.requests == []  # no token, no countTokens, no caches.create, no generate
        assert usd(run) == 0 and notes(run, "cache_storage") == []
        # Without the cache the same budget runs the call: the refusal was the cache's.
        plain = Environment(sources=(ARCHIVE,))
        answer = await governed_run(run, "Q", config=cfg, environment=plain, max_tokens=100)
        assert answer.usage.input_tokens > 6000
