"""A fan-out over one shared source is served from the cache, and pollux's own metrics say so.

On the emulator, through the real SDKs: after the first request, at least 99% of the prompt
tokens are cache reads on Anthropic (``cache_control``, the first call warms the cache), Gemini
(an explicit ``CachePolicy`` cache) and OpenAI (implicit prefix caching). The ratio and the
dollars saved come from ``Output.metrics`` and ``OutputCollection``, not from the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pollux import CachePolicy, Config, Environment, Output, RetryPolicy, Source, run_many
from pollux.interaction import Metrics, OutputCollection, Usage
from pollux.testing import Emulator

SHARED = Source.from_text("The archive records every voyage of the Argo. " * 3000)
PROMPTS = [f"What happened on voyage {i}?" for i in range(6)]


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url("anthropic"))
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emulator.base_url("gemini"))
        yield emulator


@pytest.mark.parametrize(
    ("provider", "model", "cache"),
    [
        ("anthropic", "claude-sonnet-4-5", None),
        ("gemini", "gemini-2.5-flash", CachePolicy(ttl_seconds=3600)),
        ("openai", "gpt-5-nano", None),
    ],
)
async def test_a_fan_out_over_one_source_reads_the_cache_after_the_first_request(
    emu: Emulator, provider: str, model: str, cache: CachePolicy | None
) -> None:
    config = Config(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key="offline",
        retry=RetryPolicy(max_attempts=1),
    )
    env = Environment(sources=(SHARED,), cache=cache)
    results = await run_many(PROMPTS, environment=env, config=config)
    assert results.status == "ok", results.errors

    ratio = results.cache_hit_ratio_after_first()
    assert ratio is not None and ratio >= 0.99, (provider, ratio)
    for output in results.outputs[1:]:
        assert output.metrics.cache_hit_ratio is not None
        assert output.metrics.cache_hit_ratio >= 0.99
    # The whole collection (the first request included: it wrote, or on Gemini created, the
    # cache) and its savings against the same calls with no cache.
    assert results.cache_hit_ratio is not None and results.cache_hit_ratio <= ratio
    assert results.cost_usd is not None and results.cost_usd > 0
    assert results.cache_savings_usd is not None and results.cache_savings_usd > 0
    assert all(o.metrics.cost_usd is not None for o in results.outputs)


def test_unreported_usage_is_marked_and_never_priced_as_zero() -> None:
    missing = Output(text="hi", usage=Usage(reported=False))
    assert Usage.from_jsonable(missing.usage.to_jsonable()) == missing.usage
    assert missing.usage.to_jsonable()["reported"] is False
    priced = Output(text="ok", metrics=Metrics(cost_usd=0.5, cache_savings_usd=0.25))
    unpriced = Output(text="ok")  # cost unknown
    assert OutputCollection((priced, priced)).cost_usd == 1.0
    # A partial sum would read as the bill: unknown when any answered output is unpriced.
    assert OutputCollection((priced, unpriced)).cost_usd is None
    assert OutputCollection((missing,)).cache_hit_ratio is None


def test_the_cache_write_split_is_part_of_the_total() -> None:
    usage = Usage(input_tokens=100, cache_write_5m_tokens=30, cache_write_1h_tokens=20)
    assert usage.cache_write_tokens == 50 and usage.uncached_input_tokens == 50
    assert Usage.from_jsonable(usage.to_jsonable()) == usage
    with pytest.raises(Exception, match="exceeds cache_write_tokens"):
        Usage(input_tokens=100, cache_write_tokens=10, cache_write_1h_tokens=20)


@pytest.mark.parametrize(
    ("provider", "price_provider", "model"),
    [
        ("anthropic", "anthropic", "claude-sonnet-4-5"),
        ("openai", "openai", "gpt-5.4"),
        ("gemini", "google", "gemini-2.5-pro"),
        ("openrouter", "openrouter", "google/gemini-2.5-flash"),
    ],
)
def test_pollux_prices_every_field_as_genai_prices_does(
    provider: str, price_provider: str, model: str
) -> None:
    # pollux resolves a model's rates once and does the arithmetic itself (genai-prices' own
    # calculation is too slow for every call of a fan-out): the two must agree exactly, long
    # context tiers, 1-hour writes and the batch variant included.
    from decimal import Decimal

    import genai_prices

    from pollux._pricing import list_price

    for total, read, write, long, batch in [
        (1000, 0, 0, 0, False),
        (150_000, 500, 300, 100, False),
        (250_000, 500, 300, 0, False),
        (300_000, 0, 300, 300, True),
    ]:
        usage = Usage(
            input_tokens=total,
            output_tokens=777,
            cached_tokens=read,
            cache_write_tokens=write,
            cache_write_1h_tokens=long or None,
        )
        fields = {"input_tokens": total, "output_tokens": 777, "cache_read_tokens": read}
        fields["cache_write_tokens"] = write
        if long:
            fields["cache_write_1h_tokens"] = long
        expected = genai_prices.calc_price(
            genai_prices.Usage(**fields),
            model_ref=model,
            provider_id=price_provider,
            price_context={"processing": "batch"} if batch else None,
        ).total_price
        assert list_price(provider, model, usage, batch=batch) == Decimal(str(expected))
