"""The ledger equals the provider's bill, to the cent, for a scripted session on each provider.

Each test runs a session through the bridge on the emulator (a cache written, cache hits, a
long-context call above the model's tier, a batch job where the provider has one), then prices
every call's reported usage *by hand* from the provider's published price sheet (the rates are
hard-coded below, each table naming its source) and asserts that the run's ledger total is that
bill exactly (Decimal). A rate priced wrong anywhere (a cache read billed as input, a 1-hour write
at the 5-minute rate, a long prompt at the base tier, a batch at the standard price, an
OpenRouter cost ignored) changes the sum.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

import pytest

from pollard import AsyncRun, AsyncRuntime, Budget
from pollard.adapters.pollux import (
    governed_collect,
    governed_defer,
    governed_delete_cache,
    governed_refresh_cache,
    governed_run,
)
from pollard.meters import CostMeter, StepMeter, TokenMeter
from pollux import CachePolicy, Config, Environment, Output, RetryPolicy, Source, Usage
from pollux.testing import Emulator, Reply

FAST = RetryPolicy(max_attempts=1)
M = Decimal(1_000_000)
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Sheet:
    """Per-million-token rates of one model at one tier."""

    input: str
    output: str
    cache_read: str
    cache_write_5m: str = "0"
    cache_write_1h: str = "0"

    def bill(self, usage: Usage, *, batch: Decimal = Decimal(1)) -> Decimal:
        long = usage.cache_write_1h_tokens or 0
        short = (usage.cache_write_tokens or 0) - long
        total = (
            usage.uncached_input_tokens * Decimal(self.input)
            + (usage.cached_tokens or 0) * Decimal(self.cache_read)
            + short * Decimal(self.cache_write_5m)
            + long * Decimal(self.cache_write_1h)
            + usage.output_tokens * Decimal(self.output)
        )
        return total * batch / M


def tiered(usage: Usage, base: Sheet, long: Sheet, threshold: int) -> Sheet:
    """The tier a call is billed at: every token at the long rate above the threshold."""
    return long if usage.input_tokens > threshold else base


def ledger_usd(run: AsyncRun) -> Decimal:
    return Decimal(run.report(exact=True)["spent"]["usd"])


def runtime() -> AsyncRuntime:
    return AsyncRuntime(meters=[StepMeter(), TokenMeter(), CostMeter.from_genai_prices()])


def words(n: int, word: str = "ledger") -> str:
    return f"{word} " * n  # the emulator counts one token per word


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        for variable, wire in (
            ("OPENAI_BASE_URL", "openai"),
            ("ANTHROPIC_BASE_URL", "anthropic"),
            ("GOOGLE_GEMINI_BASE_URL", "gemini"),
            ("OPENROUTER_BASE_URL", "openrouter"),
        ):
            monkeypatch.setenv(variable, emulator.base_url(wire))
        for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
            monkeypatch.setenv(variable, "offline")  # batch lifecycle calls read the key
        yield emulator


def config(provider: str, model: str) -> Config:
    return Config(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key="offline",
        retry=FAST,
        request_timeout_s=30.0,
    )


async def batch(run: AsyncRun, emu: Emulator, cfg: Config, prompts: list[str]) -> list[Output]:
    job = await governed_defer(run, prompts, config=cfg, max_tokens=4096)
    emu.advance(120)
    answers = await governed_collect(run, job)
    assert answers.status == "ok", answers.errors
    return list(answers.outputs)


# -- OpenAI ----------------------------------------------------------------------------------
# openai.com/api/pricing, GPT-5.4 (per 1M tokens): input $2.50, cached input $0.25, output
# $15.00; prompts above 272K tokens: input $5.00, cached input $0.50, output $22.50. Batch API:
# 50% of those prices. OpenAI's prompt cache has no write charge.
GPT = Sheet(input="2.50", cache_read="0.25", output="15.00")
GPT_LONG = Sheet(input="5.00", cache_read="0.50", output="22.50")


async def test_openai_ledger_equals_the_price_sheet_bill(emu: Emulator) -> None:
    cfg = config("openai", "gpt-5.4")
    env = Environment(instructions=words(3000, "policy"))
    async with runtime() as rt:
        run = rt.run("openai", budget=Budget(usd=100))
        first = await governed_run(run, "Q1", config=cfg, instructions=env.instructions)
        hits = [
            await governed_run(run, q, config=cfg, instructions=env.instructions)
            for q in ("Q2", "Q3")
        ]
        emu.script("openai", Reply(input_tokens=280_000))  # a prompt above the 272K tier
        long = await governed_run(run, "Summarise the archive", config=cfg)
        batched = await batch(run, emu, cfg, ["B1", "B2"])

        assert not first.usage.cached_tokens and all(
            (h.usage.cached_tokens or 0) > 2000 for h in hits
        )
        assert long.usage.input_tokens > 272_000
        bill = sum(
            (tiered(o.usage, GPT, GPT_LONG, 272_000).bill(o.usage) for o in [first, *hits, long]),
            Decimal(0),
        )
        bill += sum((GPT.bill(o.usage, batch=Decimal("0.5")) for o in batched), Decimal(0))
        assert ledger_usd(run) == bill
        assert ledger_usd(run).quantize(CENT) == bill.quantize(CENT) > 0


# -- Anthropic -------------------------------------------------------------------------------
# claude.com/pricing and docs.claude.com prompt caching, Claude Sonnet 4.5 (per 1M tokens):
# input $3, 5-minute cache write $3.75, 1-hour cache write $6, cache hit $0.30, output $15;
# prompts above 200K input tokens: input $6, writes $7.50 / $12, hit $0.60, output $22.50.
# Message Batches: 50% of those prices.
SONNET = Sheet(input="3", cache_read="0.30", cache_write_5m="3.75", cache_write_1h="6", output="15")
SONNET_LONG = Sheet(
    input="6", cache_read="0.60", cache_write_5m="7.50", cache_write_1h="12", output="22.50"
)


async def test_anthropic_ledger_equals_the_price_sheet_bill(emu: Emulator) -> None:
    cfg = config("anthropic", "claude-sonnet-4-5")
    policy = words(2000, "policy")
    hour = Environment(instructions=words(2500, "handbook"), cache=CachePolicy(ttl_seconds=3600))
    async with runtime() as rt:
        run = rt.run("anthropic", budget=Budget(usd=100))
        written = await governed_run(run, "Q1", config=cfg, instructions=policy)
        read = await governed_run(run, "Q2", config=cfg, instructions=policy)
        hour_written = await governed_run(run, "Q3", config=cfg, environment=hour)
        hour_read = await governed_run(run, "Q4", config=cfg, environment=hour)
        emu.script("anthropic", Reply(input_tokens=210_000))  # a prompt above the 200K tier
        long = await governed_run(run, "Summarise the archive", config=cfg)
        batched = await batch(run, emu, cfg, ["B1", "B2"])

        assert (written.usage.cache_write_5m_tokens or 0) > 1024
        assert (read.usage.cached_tokens or 0) > 1024
        assert (hour_written.usage.cache_write_1h_tokens or 0) > 1024
        assert (hour_read.usage.cached_tokens or 0) > 1024
        assert long.usage.input_tokens > 200_000
        direct = [written, read, hour_written, hour_read, long]
        bill = sum(
            (tiered(o.usage, SONNET, SONNET_LONG, 200_000).bill(o.usage) for o in direct),
            Decimal(0),
        )
        bill += sum((SONNET.bill(o.usage, batch=Decimal("0.5")) for o in batched), Decimal(0))
        assert ledger_usd(run) == bill
        # Pricing the 1-hour write at the 5-minute rate would be this much short.
        gap = (hour_written.usage.cache_write_1h_tokens or 0) * Decimal("2.25") / M
        assert gap > CENT / 100
        assert ledger_usd(run).quantize(CENT) == bill.quantize(CENT) > 0


# -- Gemini ----------------------------------------------------------------------------------
# ai.google.dev/gemini-api/docs/pricing, Gemini 2.5 Pro (per 1M tokens): input $1.25, output
# $10, context caching $0.125 (prompts up to 200K); above 200K: input $2.50, output $15, caching
# $0.25; cache storage $4.50 per 1M tokens per hour, for the time the cache exists (a refresh
# extends it, a delete ends it). Batch: 50% of the standard prices. Creating an explicit cache
# bills its tokens once at the input rate.
PRO = Sheet(input="1.25", cache_read="0.125", output="10")
PRO_LONG = Sheet(input="2.50", cache_read="0.25", output="15")
PRO_STORAGE_PER_HOUR = Decimal("4.50")


@pytest.fixture
def provider_clock(emu: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """pollux's cache clock is the emulator's virtual one (refresh and delete times are exact)."""
    from pollux.providers.gemini.caching import REGISTRY

    monkeypatch.setattr(REGISTRY, "clock", emu.now)
    yield
    REGISTRY._entries.clear()  # virtual-clock entries mean nothing on the real clock


@pytest.mark.usefixtures("provider_clock")
async def test_gemini_ledger_equals_the_price_sheet_bill(emu: Emulator) -> None:
    cfg = config("gemini", "gemini-2.5-pro")
    env = Environment(
        sources=(Source.from_text(words(6000, "archive")),), cache=CachePolicy(ttl_seconds=3600)
    )
    async with runtime() as rt:
        created_at = emu.now()
        run = rt.run("gemini", budget=Budget(usd=100))
        over_cache = [
            await governed_run(run, q, config=cfg, environment=env) for q in ("Q1", "Q2", "Q3")
        ]
        emu.script("gemini", Reply(input_tokens=210_000))  # a prompt above the 200K tier
        long = await governed_run(run, "Summarise the archive", config=cfg)
        batched = await batch(run, emu, cfg, ["B1", "B2"])  # the clock moves 120 s
        # Ten minutes in, the cache is refreshed for two hours from then (to 7800 s); at 40
        # minutes it is deleted. Google bills storage for the 2400 s it existed.
        emu.advance(600 - (emu.now() - created_at))
        assert await governed_refresh_cache(run, env, config=cfg, ttl_seconds=7200)
        emu.advance(1800)
        assert await governed_delete_cache(run, env, config=cfg) is True

        created = over_cache[0].diagnostics.raw["cache"]
        assert created["created"] is True and created["ttl_seconds"] == 3600
        assert not any(o.diagnostics.raw["cache"]["created"] for o in over_cache[1:])
        tokens = created["tokens"]
        assert tokens >= 4096 and all((o.usage.cached_tokens or 0) == tokens for o in over_cache)
        assert long.usage.input_tokens > 200_000
        bill = sum(
            (tiered(o.usage, PRO, PRO_LONG, 200_000).bill(o.usage) for o in [*over_cache, long]),
            Decimal(0),
        )
        bill += sum((PRO.bill(o.usage, batch=Decimal("0.5")) for o in batched), Decimal(0))
        creation = tokens * Decimal(PRO.input) / M
        held = tokens * PRO_STORAGE_PER_HOUR * Decimal(2400) / Decimal(3600) / M
        bill += creation + held
        assert ledger_usd(run) == bill
        assert ledger_usd(run).quantize(CENT) == bill.quantize(CENT) > 0
        # Charged as the ledger saw it happen: the whole TTL at creation, the extension at the
        # refresh, the unused time credited at the delete; each a new note under the charge.
        notes = {
            (n.payload["pollux"], n.payload.get("event")): n
            for n in rt.store.walk(run.root_id)
            if str(n.payload.get("pollux", "")).startswith("cache_")
        }
        per_hour = tokens * PRO_STORAGE_PER_HOUR / M
        charge = notes["cache_storage", None]
        assert charge.meta["cache"]["storage_usd"] == str(per_hour)
        refresh = notes["cache_settlement", "refreshed"]
        delete = notes["cache_settlement", "deleted"]
        assert refresh.parent == delete.parent == charge.id
        extension = Decimal(refresh.meta["cache"]["storage_usd"])
        credit = Decimal(delete.meta["cache"]["storage_usd"])
        assert extension == per_hour * Decimal(4200) / Decimal(3600)  # 3600 s -> 7800 s
        assert credit == -per_hour * Decimal(5400) / Decimal(3600)  # deleted at 2400 s
        # The first call held the cache's worst case before it ran, and gave it back after.
        hold, release = notes["cache_hold", None], notes["cache_hold_release", None]
        held_usd = Decimal(hold.result["usd"])
        assert release.parent == hold.id and held_usd > creation + per_hour
        assert release.result == {"released_usd": str(held_usd)}


# -- OpenRouter ------------------------------------------------------------------------------
# openrouter.ai/anthropic/claude-sonnet-4.5 (per 1M tokens): input $3, output $15, cache read
# $0.30, cache write $3.75; prompts above 200K tokens: input $6, output $22.50, read $0.60,
# write $7.50. OpenRouter bills what it reports as usage.cost; that is what the ledger charges
# (the computed price is kept beside it). OpenRouter has no batch API.
OR_SONNET = Sheet(input="3", cache_read="0.30", cache_write_5m="3.75", output="15")
OR_SONNET_LONG = Sheet(input="6", cache_read="0.60", cache_write_5m="7.50", output="22.50")


async def test_openrouter_ledger_equals_the_price_sheet_bill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = "anthropic/claude-sonnet-4.5"
    cfg = config("openrouter", model)
    policy = words(3000, "policy")
    with Emulator(models=[model]) as emu:
        monkeypatch.setenv("OPENROUTER_BASE_URL", emu.base_url("openrouter"))
        await _openrouter_session(emu, cfg, policy)


async def _openrouter_session(emu: Emulator, cfg: Config, policy: str) -> None:
    # OpenRouter reports the write its Anthropic upstream made on the first call.
    emu.script("openrouter", Reply(cache_write_tokens=3000))
    async with runtime() as rt:
        run = rt.run("openrouter", budget=Budget(usd=100))
        written = await governed_run(run, "Q1", config=cfg, instructions=policy)
        hits = [await governed_run(run, q, config=cfg, instructions=policy) for q in ("Q2", "Q3")]
        emu.script("openrouter", Reply(input_tokens=210_000))  # above the 200K tier
        long = await governed_run(run, "Summarise the archive", config=cfg)

        assert written.usage.cache_write_tokens == 3000
        assert all((h.usage.cached_tokens or 0) > 2000 for h in hits)
        direct = [written, *hits, long]
        assert all(o.usage.provider_cost_usd is not None for o in direct)
        bill = sum(
            (tiered(o.usage, OR_SONNET, OR_SONNET_LONG, 200_000).bill(o.usage) for o in direct),
            Decimal(0),
        )
        assert sum((o.usage.provider_cost_usd or Decimal(0) for o in direct), Decimal(0)) == bill
        assert ledger_usd(run) == bill
        assert ledger_usd(run).quantize(CENT) == bill.quantize(CENT) > 0
        # Both figures are kept: the provider's in the result, the computed one in the meta.
        node = next(
            n
            for n in rt.store.walk(run.root_id)
            if n.kind.value == "model_call" and "Q1" in str(n.payload)
        )
        assert node.result["usage"]["provider_cost_usd"] == str(written.usage.provider_cost_usd)
        assert "usd_computed" in node.meta
