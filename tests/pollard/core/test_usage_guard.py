"""A usage count pollard cannot charge is treated like a missing one, and said so in meta.

A string, a float, a bool, a negative or a larger-than-64-bit int used to be charged 0 without a
flag (or, when negative, to refund the budget); now each such field is named in
``meta["usage_invalid"]`` and the model call is marked ``usage_missing``, as a call with no usage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, BudgetExceeded, Runtime
from pollard.meters import CostMeter, TokenmasterMeter, TokenMeter, token_usage

BAD = [
    ("lots", "str"),
    (-5, "negative int"),
    (1.5, "float"),
    (3.0, "float"),
    (True, "bool"),
    (2**63, "int above 2**63-1"),
    (10**40, "int above 2**63-1"),
]


def _result(value: Any) -> dict[str, Any]:
    return {"text": "x", "usage": {"input_tokens": value, "output_tokens": 2}}


@pytest.mark.parametrize(("value", "described"), BAD)
def test_an_unusable_count_is_flagged_not_a_silent_zero(value: Any, described: str) -> None:
    rt = Runtime()
    run = rt.run("bad", budget=Budget(tokens=100))
    node = run.model_call({"model": "m"}, fn=lambda p: _result(value))
    assert node.meta["usage_invalid"] == {"input_tokens": described}
    assert node.meta["usage_missing"] is True
    assert node.meta["charges"]["tokens"] == 2  # the usable output count is still charged
    assert token_usage(_result(value)) == {"output_tokens": 2}
    # Replay serves the recorded meta, flags included.
    replayed = Runtime(rt.store, mode="replay").run("bad", budget=Budget(tokens=100))
    again = replayed.model_call({"model": "m"}, fn=lambda p: _result(value))
    assert again.meta["usage_invalid"] == {"input_tokens": described}
    rt.close()


def test_good_usage_is_not_flagged() -> None:
    rt = Runtime()
    run = rt.run("good")
    usage = {"input_tokens": 3, "output_tokens": 2, "reasoning_tokens": None}
    node = run.model_call({"model": "m"}, fn=lambda p: {"text": "x", "usage": usage})
    assert "usage_invalid" not in node.meta and "usage_missing" not in node.meta
    assert node.meta["charges"]["tokens"] == 5
    assert run.model_call({"model": "m", "i": 2}, fn=lambda p: {"text": "x"}).meta["usage_missing"]


def test_a_negative_count_does_not_refund_a_tokens_budget() -> None:
    rt = Runtime()
    run = rt.run("refund", budget=Budget(tokens=100))
    run.model_call({"model": "m"}, fn=lambda p: _result(97))  # 99 tokens
    credit = {"input_tokens": 1, "cache_read_input_tokens": -1000, "output_tokens": 0}
    node = run.model_call({"model": "m", "i": 2}, fn=lambda p: {"text": "x", "usage": credit})
    assert node.meta["charges"]["tokens"] == 1
    assert node.meta["usage_invalid"] == {"cache_read_input_tokens": "negative int"}
    assert run.report()["spent"]["tokens"] == 100  # not 99 - 999
    with pytest.raises(BudgetExceeded):
        run.model_call({"model": "m", "i": 3}, fn=lambda p: _result(1))
    rt.close()


def test_a_tool_call_names_unusable_usage_without_usage_missing() -> None:
    run = Runtime().run("tool")
    node = run.tool_call("t", {}, fn=lambda a: {"value": 1, "usage": {"input_tokens": "many"}})
    assert node.meta["usage_invalid"] == {"input_tokens": "str"}
    assert "usage_missing" not in node.meta  # tool calls without usage are not flagged either
    assert "tokens" not in node.meta["charges"]


def _chunks() -> Iterator[dict[str, Any]]:
    yield {"delta": {"text": "he"}}
    yield {"delta": {"text": "llo", "usage": {"input_tokens": "4", "output_tokens": 2}}}


@pytest.mark.parametrize("keep_chunks", [False, True])
def test_a_stream_with_unusable_usage_is_flagged(keep_chunks: bool) -> None:
    run = Runtime().run("stream")
    node = run.model_call({"model": "m"}, fn=lambda p: _chunks(), keep_chunks=keep_chunks)
    assert node.result is not None and node.result["text"] == "hello"
    assert ("chunks" in node.result) is keep_chunks
    assert node.meta["usage_invalid"] == {"input_tokens": "str"}
    assert node.meta["usage_missing"] is True
    assert node.meta["charges"]["tokens"] == 2


def test_a_stream_final_result_chunk_with_unusable_usage_is_flagged() -> None:
    def fn(payload: Any) -> Iterator[dict[str, Any]]:
        yield {"delta": {"text": "x"}}
        yield {"result": {"text": "x", "usage": {"input_tokens": -3, "output_tokens": 1}}}

    node = Runtime().run("final").model_call({"model": "m"}, fn=fn, keep_chunks=True)
    assert node.meta["usage_invalid"] == {"input_tokens": "negative int"}
    assert node.meta["charges"]["tokens"] == 1


async def test_async_runtime_flags_unusable_usage_in_results_and_streams() -> None:
    async def call(payload: Any) -> dict[str, Any]:
        return _result(1.5)

    async def stream(payload: Any) -> AsyncIterator[dict[str, Any]]:
        yield {"delta": {"text": "a"}}
        yield {"delta": {"usage": {"input_tokens": True, "output_tokens": 3}}}

    async with AsyncRuntime() as rt:
        run = rt.run("async", budget=Budget(tokens=100))
        node = await run.model_call({"model": "m"}, fn=call)
        assert node.meta["usage_invalid"] == {"input_tokens": "float"}
        assert node.meta["usage_missing"] is True
        streamed = await run.model_call({"model": "m", "i": 2}, fn=stream, keep_chunks=True)
        assert streamed.meta["usage_invalid"] == {"input_tokens": "bool"}
        assert streamed.meta["charges"]["tokens"] == 3


def test_cost_meter_ignores_unusable_counts() -> None:
    meter = CostMeter({"m": {"input_per_1m": "2", "output_per_1m": "8"}})
    valid = meter.charge("model_call", {"model": "m"}, {"usage": {"output_tokens": 100}}, {})
    assert valid == Decimal(800) / Decimal(1_000_000)
    for value, _ in BAD:
        result = {"usage": {"input_tokens": value, "output_tokens": 100}}
        assert meter.charge("model_call", {"model": "m"}, result, {}) == valid
    credit = {"usage": {"input_tokens": 0, "cache_read_input_tokens": -(10**9)}}
    assert meter.charge("model_call", {"model": "m"}, credit, {}) == 0


def test_genai_prices_meter_ignores_unusable_counts() -> None:
    meter = CostMeter.from_genai_prices(provider_id="openai")
    payload = {"model": "gpt-4o"}
    valid = meter.charge("model_call", payload, {"usage": {"output_tokens": 100}}, {})
    assert valid > 0
    for value, _ in BAD:
        result = {"usage": {"input_tokens": value, "output_tokens": 100}}
        assert meter.charge("model_call", payload, result, {}) == valid


def test_tokenmaster_meter_ignores_unusable_counts() -> None:
    meter = TokenmasterMeter(model="anthropic:claude-sonnet-4-6")
    for value, _ in BAD:
        result = {"usage": {"input_tokens": 100, "output_tokens": 10, "reasoning_tokens": value}}
        assert meter.charge("model_call", {"model": "m"}, result, {}) == 110
    raw = {"usage": {"input_tokens": 100, "cache_read_input_tokens": -1000, "output_tokens": 10}}
    assert meter.charge("model_call", {"model": "m"}, raw, {}) == 110
    assert TokenMeter().charge("model_call", {}, raw, {}) == 110


def test_nan_usage_fails_the_step_rather_than_charging_zero() -> None:
    rt = Runtime()
    run = rt.run("nan", budget=Budget(tokens=100))
    with pytest.raises(ValueError, match="JSON"):
        run.model_call({"model": "m"}, fn=lambda p: _result(float("nan")))
    failed = [n for n in rt.store.children(run.root_id) if n.kind.value == "note"]
    assert [n.payload["event"] for n in failed] == ["call_failed"]
    assert "tokens" not in failed[0].meta["charges"]
    rt.close()


@pytest.mark.parametrize(
    "usage",
    [{}, {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}, {"input_tokens": None}],
)
def test_usage_without_a_field_the_meters_read_is_marked_missing(usage: dict[str, Any]) -> None:
    # ``{}`` (an adapter with nothing to report) or a raw shape pollard does not read charged 0
    # tokens with no flag at all; it is a call without usage, and says so.
    rt = Runtime()
    run = rt.run("unread usage")
    node = run.model_call({"model": "m"}, fn=lambda p: {"text": "x", "usage": usage})
    assert node.meta["usage_missing"] is True
    assert "usage_invalid" not in node.meta
    assert node.meta["charges"].get("tokens", 0) == 0
    # A tool call has no usage to miss.
    tool = run.tool_call("t", {"q": 1}, fn=lambda p: {"ok": True, "usage": usage})
    assert "usage_missing" not in tool.meta
    rt.close()
