"""Gemini explicit-cache storage through the bridge: admitted before the call, settled after.

A call that may create a ``CachePolicy`` cache holds the cache's worst case (creation plus the
whole TTL of storage) before any provider I/O, so a budget that cannot afford the cache refuses
the call; a refresh charges the extension and a delete before the expiry credits the unused
storage, each a new note (the provider's bill is storage for the time the cache existed).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from pollard import AsyncRuntime, Budget, BudgetExceeded
from pollard.adapters.pollux import (
    PolluxTokenEstimator,
    governed_delete_cache,
    governed_refresh_cache,
    governed_run,
    governed_run_many,
    settle_cache_events,
)
from pollard.meters import CostMeter, StepMeter
from pollux import APIError, CachePolicy, Config, Environment, RetryPolicy, Source
from pollux.providers.gemini import delete_context_cache, refresh_context_cache
from pollux.providers.gemini.caching import REGISTRY
from pollux.testing import Emulator, ErrorResponse
from tests.integration._ledger import notes, usd

MODEL = "gemini-2.5-pro"
M = Decimal(1_000_000)
STORAGE_PER_HOUR = Decimal("4.50")  # ai.google.dev pricing, Gemini 2.5 Pro cache storage
# 6000 words of 8 bytes: the emulator counts 6000 tokens; the hold estimates 48000 / 4 = 12000.
ARCHIVE = Source.from_text("archive " * 6000)


def hard_runtime(db: Path | None = None) -> AsyncRuntime:
    """A hard dollar budget: each call is admitted against its priced worst case."""
    prices = {MODEL: {"input_per_1m": "1.25", "cache_read_per_1m": "0.125", "output_per_1m": "10"}}
    meter = CostMeter(prices, estimator=PolluxTokenEstimator(), reserved_output_tokens=100)
    return AsyncRuntime(db, meters=[StepMeter(), meter]) if db else AsyncRuntime(meters=[meter])


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emulator.base_url("gemini"))
        monkeypatch.setattr(REGISTRY, "clock", emulator.now)  # the provider's clock
        yield emulator
    # Entries timed on the virtual clock mean nothing on the real one (a later emulator may
    # reuse this port, and so the caches' identities).
    REGISTRY._entries.clear()


@pytest.fixture
def cfg() -> Config:
    return Config(
        provider="gemini",
        model=MODEL,
        api_key="offline",
        retry=RetryPolicy(max_attempts=1),
        request_timeout_s=30.0,
    )


async def test_a_budget_that_cannot_afford_the_cache_refuses_before_any_io(
    emu: Emulator, cfg: Config
) -> None:
    cached = Environment(sources=(ARCHIVE,), cache=CachePolicy(ttl_seconds=3600))
    # The call alone fits (12001 tokens x $1.25 + 100 x $10 per 1M = $0.016); with the cache's
    # worst case (12000 x $1.25 + 12000 x $4.50 x 1 h, per 1M = $0.069) it does not.
    async with hard_runtime() as rt:
        run = rt.run("small", budget=Budget(usd="0.03"))
        with pytest.raises(BudgetExceeded) as info:
            await governed_run(run, "Q", config=cfg, environment=cached, max_tokens=100)
        assert info.value.meter == "usd" and info.value.refusal_id
        assert emu.requests == []  # no countTokens, no caches.create, no generateContent
        assert usd(run) == 0 and notes(run, "cache_storage") == []
        # The fan-out holds the shared cache once, and is refused the same way.
        with pytest.raises(BudgetExceeded):
            await governed_run_many(run, ["A", "B"], config=cfg, environment=cached, max_tokens=100)
        assert emu.requests == []
        # Without the cache the same budget runs the call: the refusal was the cache's.
        plain = Environment(sources=(ARCHIVE,))
        answer = await governed_run(run, "Q", config=cfg, environment=plain, max_tokens=100)
        assert answer.usage.input_tokens > 6000 and emu.requests_for("gemini.generate.content")


async def test_the_hold_is_given_back_and_taken_only_when_the_cache_may_be_created(
    emu: Emulator, cfg: Config, tmp_path: Path
) -> None:
    cached = Environment(sources=(ARCHIVE,), cache=CachePolicy(ttl_seconds=1800))
    db = tmp_path / "run.db"
    async with hard_runtime(db) as rt:
        run = rt.run("fanout", budget=Budget(usd=1))
        first = await governed_run_many(run, ["A", "B", "C"], config=cfg, environment=cached)
        again = await governed_run(run, "D", config=cfg, environment=cached, max_tokens=100)
        (hold,) = notes(run, "cache_hold")  # once for the fan-out, none for a known cache
        (release,) = notes(run, "cache_hold_release")
        (storage,) = notes(run, "cache_storage")
        held = Decimal(hold.result["usd"])
        assert held == 12000 * Decimal("1.25") / M + 12000 * STORAGE_PER_HOUR / 2 / M
        assert release.parent == hold.id
        # Net of the hold, the run paid the calls plus 6000 tokens' creation and half an hour.
        tokens = 6000
        cache = tokens * Decimal("1.25") / M + tokens * STORAGE_PER_HOUR / 2 / M
        calls = usd(run) - cache
        assert (
            Decimal(storage.meta["cache"]["creation_usd"])
            + Decimal(storage.meta["cache"]["storage_usd"])
            == cache
        )
        assert calls > 0 and first.status == "ok" and again.text
    sent = len(emu.requests)
    # Replay makes no call and holds nothing: every note is served from the recording.
    async with hard_runtime(db) as rt:
        replay = rt.run("fanout", budget=Budget(usd=1))
        assert (
            await governed_run_many(replay, ["A", "B", "C"], config=cfg, environment=cached)
        ).answers == first.answers
    assert len(emu.requests) == sent


async def test_pollux_own_refresh_and_delete_settle_inside_settle_cache_events(
    emu: Emulator, cfg: Config
) -> None:
    cached = Environment(sources=(ARCHIVE,), cache=CachePolicy(ttl_seconds=3600))
    per_hour = 6000 * STORAGE_PER_HOUR / M
    async with AsyncRuntime() as rt:
        run = rt.run("own")
        await governed_run(run, "Q", config=cfg, environment=cached)
        (storage,) = notes(run, "cache_storage")
        emu.advance(900)
        with settle_cache_events(run):
            # A refresh that shortens the life (to 900 + 600 s) credits what it cut off.
            await refresh_context_cache(cached, config=cfg, ttl_seconds=600)
            emu.advance(300)
            assert await delete_context_cache(cached, config=cfg) is True
        shortened, deleted = sorted(
            notes(run, "cache_settlement"),
            key=lambda n: n.payload["event"] != "refreshed",
        )
    assert shortened.parent == deleted.parent == storage.id
    cut = Decimal(shortened.meta["cache"]["storage_usd"])
    unused = Decimal(deleted.meta["cache"]["storage_usd"])
    assert cut == -per_hour * Decimal(2100) / 3600  # 3600 s -> 1500 s
    assert unused == -per_hour * Decimal(300) / 3600  # deleted at 1200 s
    held = Decimal(storage.meta["cache"]["storage_usd"]) + cut + unused
    assert held == per_hour * Decimal(1200) / 3600


async def test_a_delete_credits_only_the_run_that_paid(emu: Emulator, cfg: Config) -> None:
    cached = Environment(sources=(ARCHIVE,), cache=CachePolicy(ttl_seconds=3600))
    async with AsyncRuntime() as rt:
        creator = rt.run("creator")
        await governed_run(creator, "Q", config=cfg, environment=cached)
        other = rt.run("other")
        emu.advance(60)
        # Extending a cache is new storage whoever created it: charged to the run that extends.
        await governed_refresh_cache(other, cached, config=cfg, ttl_seconds=3600)
        assert await governed_delete_cache(other, cached, config=cfg) is True
        assert await governed_delete_cache(other, cached, config=cfg) is False  # gone: no note
        refreshed, deleted = sorted(
            notes(other, "cache_settlement"),
            key=lambda n: n.payload["event"] != "refreshed",
        )
    assert (
        Decimal(refreshed.meta["cache"]["storage_usd"]) == 6000 * STORAGE_PER_HOUR * 60 / 3600 / M
    )
    assert deleted.meta["cache"]["settled"] is False
    assert "storage_usd" not in deleted.meta["cache"]
    assert notes(creator, "cache_settlement") == []


async def test_a_call_that_fails_after_creating_the_cache_still_pays_for_it(
    emu: Emulator, cfg: Config
) -> None:
    cached = Environment(sources=(ARCHIVE,), cache=CachePolicy(ttl_seconds=3600))
    emu.script("gemini.generate.content", ErrorResponse(400, message="refused"))
    async with AsyncRuntime() as rt:
        run = rt.run("failed")
        with pytest.raises(APIError):
            await governed_run(run, "Q", config=cfg, environment=cached)
        assert emu.requests_for("gemini.caches.create")  # the cache exists, and is billed
        (hold,) = notes(run, "cache_hold")
        (storage,) = notes(run, "cache_storage")
        (release,) = notes(run, "cache_hold_release")
    assert storage.parent == release.parent == hold.id
    tokens = 6000
    assert storage.meta["cache"]["tokens"] == tokens
    paid = Decimal(storage.meta["cache"]["creation_usd"]) + Decimal(
        storage.meta["cache"]["storage_usd"]
    )
    assert paid == tokens * Decimal("1.25") / M + tokens * STORAGE_PER_HOUR / M


def test_settle_cache_events_needs_a_run() -> None:
    with pytest.raises(TypeError, match="needs a pollard run"), settle_cache_events(object()):  # type: ignore[arg-type]
        pass


async def test_a_cache_pollux_creates_itself_is_charged_once_inside_settle_cache_events(
    emu: Emulator, cfg: Config
) -> None:
    from pollux import prepare_environment

    async with AsyncRuntime() as rt:
        run = rt.run("prepared")
        with settle_cache_events(run):
            env = await prepare_environment(
                sources=[ARCHIVE], cache=CachePolicy(ttl_seconds=3600), config=cfg
            )
            await governed_run(run, "Q", config=cfg, environment=env)
        other = rt.run("governed inside")
        fresh = Environment(sources=(ARCHIVE,), instructions="Be brief.", cache=CachePolicy())
        with settle_cache_events(other):
            await governed_run(other, "Q", config=cfg, environment=fresh)
        (prepared,) = notes(run, "cache_storage")
        (governed,) = notes(other, "cache_storage")  # the call's and the observer's: one charge
    assert prepared.parent == run.root_id and prepared.meta["cache"]["tokens"] == 6000
    assert notes(run, "cache_hold") == []  # pollux knew the cache: nothing to hold
    assert governed.meta["cache"]["ttl_seconds"] == 3600
    per = Decimal("1.25") / M + STORAGE_PER_HOUR / M
    assert usd(run) == 6000 * per  # no cost meter here: the ledger's dollars are the cache's
    assert (
        Decimal(prepared.meta["cache"]["creation_usd"])
        + Decimal(prepared.meta["cache"]["storage_usd"])
        == 6000 * per
    )
