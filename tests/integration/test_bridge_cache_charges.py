"""What the bridge charges for prompt-cache tokens: each token once, at its own price.

pollux's `Usage` counts cache reads (``cached_tokens``) and writes (``cache_write_tokens``) inside
``input_tokens`` on every provider (Anthropic reports them apart and pollux folds them in), which
is the shape of pollard's adapters and of genai-prices' ``Usage``. So a ``usd`` meter charges the
uncached rest at the input price, reads at the read price and writes at the write price (1.25x
input for Anthropic's 5-minute cache), and the token meter charges ``input + output`` tokens.

The emulator's Anthropic wire accounts the prompt cache as the API does: instructions above the
minimum cacheable length are written by the first call (``cache_creation_input_tokens``) and read
by the next (``cache_read_input_tokens``).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from pollard import AsyncRuntime, Budget, Node
from pollard.adapters.pollux import (
    batch_price,
    governed_run,
    governed_run_many,
    governed_stream,
)
from pollard.adapters.pollux._identity import result_of
from pollard.meters import CostMeter, StepMeter, TokenMeter, token_usage
from pollux import Config, Environment, Input, Output, RetryPolicy, Usage
from pollux.testing import Emulator

MODEL = "claude-sonnet-4-5"
POLICY = "policy " * 1500  # above the 1024-token minimum, so the first call writes it
QUESTIONS = ["Who were the twins?", "Why a constellation?"]
# Per million tokens, each price distinct, so a token priced at the wrong rate changes the sum.
TABLE = {
    MODEL: {
        "input_per_1m": "3",
        "output_per_1m": "15",
        "cache_read_per_1m": "0.3",
        "cache_write_per_1m": "3.75",
    }
}


@pytest.fixture
def anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[Config]:
    with Emulator() as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
        yield Config(
            provider="anthropic",
            model=MODEL,
            api_key="offline",
            retry=RetryPolicy(max_attempts=1),
            request_timeout_s=10.0,
        )


def meters() -> list[Any]:
    return [
        StepMeter(),
        TokenMeter(),
        CostMeter.from_genai_prices(),
        CostMeter(TABLE, name="table"),
    ]


def genai_price(usage: Usage) -> Decimal:
    """What genai-prices says the call costs (its ``input_tokens`` includes the cache fields)."""
    tokens = genai_prices.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cached_tokens or 0,
        cache_write_tokens=usage.cache_write_tokens or 0,
    )
    calc = genai_prices.calc_price(tokens, model_ref=MODEL, provider_id="anthropic")
    return Decimal(str(calc.total_price))


def table_price(usage: Usage) -> Decimal:
    read, write = usage.cached_tokens or 0, usage.cache_write_tokens or 0
    uncached = usage.input_tokens - read - write
    per_1m = (
        uncached * Decimal("3")
        + read * Decimal("0.3")
        + write * Decimal("3.75")
        + usage.output_tokens * Decimal("15")
    )
    return per_1m / 1_000_000


def charges(node: Node) -> dict[str, Decimal]:
    return {name: Decimal(str(value)) for name, value in node.meta["charges"].items()}


def assert_charged_once_at_its_price(node: Node, usage: Usage) -> None:
    charged = charges(node)
    assert charged["usd"] == genai_price(usage)
    assert charged["table"] == table_price(usage)
    assert charged["tokens"] == usage.input_tokens + usage.output_tokens


def model_calls(rt: AsyncRuntime, parent: str) -> list[Node]:
    return [n for n in rt.store.children(parent) if n.kind.value == "model_call"]


async def test_a_cache_write_is_charged_the_write_premium_and_a_read_the_read_price(
    anthropic: Config,
) -> None:
    async with AsyncRuntime(meters=meters()) as rt:
        run = rt.run("cache", budget=Budget(usd="1", tokens=100_000))
        written = await governed_run(run, QUESTIONS[0], config=anthropic, instructions=POLICY)
        first = run.cursor
        served = await governed_run(run, QUESTIONS[1], config=anthropic, instructions=POLICY)
        second = run.cursor
        spent = run.report(exact=True)["spent"]

    assert (written.usage.cache_write_tokens or 0) >= 1024
    assert first.result["usage"]["cache_write_tokens"] == written.usage.cache_write_tokens
    assert_charged_once_at_its_price(first, written.usage)
    # Charging the write at the input price instead would have cost exactly the premium less.
    premium = Decimal(written.usage.cache_write_tokens or 0) * Decimal("0.75") / 1_000_000
    assert charges(first)["table"] - premium == (
        Decimal(written.usage.input_tokens) * 3 + Decimal(written.usage.output_tokens) * 15
    ) / Decimal(1_000_000)

    assert (served.usage.cached_tokens or 0) >= 1024 and not served.usage.cache_write_tokens
    assert_charged_once_at_its_price(second, served.usage)

    assert Decimal(spent["usd"]) == genai_price(written.usage) + genai_price(served.usage)
    assert Decimal(spent["tokens"]) == sum(
        u.input_tokens + u.output_tokens for u in (written.usage, served.usage)
    )


async def test_stream_and_fan_out_charge_cache_writes_the_same_way(anthropic: Config) -> None:
    env = Environment(instructions=POLICY)
    async with AsyncRuntime(meters=meters()) as rt:
        run = rt.run("stream", budget=Budget(usd="1"))
        events = [e async for e in governed_stream(run, env, Input("Tell me"), config=anthropic)]
        streamed = events[-1].output
        assert streamed is not None
        assert (streamed.usage.cache_write_tokens or 0) >= 1024
        assert_charged_once_at_its_price(run.cursor, streamed.usage)

        fan = rt.run("fan-out", budget=Budget(usd="1"))
        answers = await governed_run_many(
            fan, QUESTIONS, config=anthropic, instructions=POLICY + "again "
        )
        assert answers.status == "ok", answers.errors
        steps = {n.result["text"]: n for n in model_calls(rt, fan.root_id)}
        assert len(steps) == len(QUESTIONS)
        assert any(o.usage.cache_write_tokens for o in answers.outputs)
        for output in answers.outputs:
            assert_charged_once_at_its_price(steps[output.text], output.usage)


@pytest.mark.parametrize("mode", ["replay", "hybrid"])
async def test_replay_and_hybrid_avoid_exactly_what_the_recording_spent(
    anthropic: Config, tmp_path: Path, mode: str
) -> None:
    db = str(tmp_path / "runs.db")
    async with AsyncRuntime(db, meters=meters()) as rt:
        run = rt.run("cache", budget=Budget(usd="1"))
        outputs = [
            await governed_run(run, question, config=anthropic, instructions=POLICY)
            for question in QUESTIONS
        ]
        recorded = run.report(exact=True)["spent"]
    assert outputs[0].usage.cache_write_tokens and outputs[1].usage.cached_tokens
    assert Decimal(recorded["usd"]) == sum(genai_price(o.usage) for o in outputs)
    async with AsyncRuntime(db, mode=mode, meters=meters()) as rt:
        run = rt.run("cache", budget=Budget(usd="1"))
        for question in QUESTIONS:
            await governed_run(run, question, config=anthropic, instructions=POLICY)
        served = run.report(exact=True)
    assert served["spent"] and all(amount == "0" for amount in served["spent"].values())
    assert served["avoided"] == recorded


def test_the_recorded_usage_keeps_the_cache_breakdown_for_every_call_kind() -> None:
    usage = Usage(
        input_tokens=2000,
        output_tokens=50,
        total_tokens=2050,
        reasoning_tokens=10,
        cached_tokens=300,
        cache_write_tokens=1200,
    )
    answer = Output(text="ok", usage=usage)
    expected = {
        "input_tokens": 2000,
        "output_tokens": 50,
        "cache_read_tokens": 300,
        "cache_write_tokens": 1200,
        "reasoning_tokens": 10,
    }
    for batch in (False, True):
        assert result_of(answer, batch=batch)["usage"] == expected
    # A deferred answer is priced from the same usage: writes at the write price, at batch tier.
    recorded = token_usage(result_of(answer, batch=True)) or {}
    standard = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=2000, output_tokens=50, cache_read_tokens=300, cache_write_tokens=1200
        ),
        model_ref=MODEL,
        provider_id="anthropic",
    )
    assert batch_price("anthropic", MODEL, recorded) == Decimal(str(standard.total_price)) / 2


def test_a_call_that_reports_no_cache_records_zeros() -> None:
    usage = result_of(Output(text="ok", usage=Usage(input_tokens=5, output_tokens=2)))["usage"]
    assert usage["cache_read_tokens"] == 0 and usage["cache_write_tokens"] == 0
