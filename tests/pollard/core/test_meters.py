"""Budget validation and the optional meters (energy with a fake NVML, tokenmaster)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from pollard import Budget, BudgetExceeded, PollardError, Runtime, WindowMeter
from pollard.meters import EnergyMeter, StepMeter, TokenmasterMeter, TokenMeter, token_usage


def test_budget_limits_are_exact_decimals() -> None:
    assert Budget(usd=0.1, tokens=5, extra={"joules": "2.5"}).limits() == {
        "usd": Decimal("0.1"),
        "tokens": Decimal(5),
        "joules": Decimal("2.5"),
    }
    for bad in ({"tokens": True}, {"steps": -1}, {"usd": float("nan")}, {"usd": "abc"}):
        with pytest.raises((TypeError, ValueError)):
            Budget(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Budget(tokens=1, extra={"tokens": 2})


def test_token_usage_counts_cache_fields() -> None:
    result = {
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 3,
            "cache_creation_input_tokens": 2,
            "bogus": 7,
        }
    }
    assert TokenMeter().charge("model_call", {}, result, {}) == 20
    assert token_usage({"usage": "x"}) is None
    assert TokenMeter().charge("note", {}, result, {}) == 0


def test_meter_validation() -> None:
    with pytest.raises(ValueError, match="unique"):
        Runtime(meters=[StepMeter(), StepMeter()])
    with pytest.raises(TypeError):
        Runtime(meters=[object()])
    with pytest.raises(ValueError):
        WindowMeter("requests", 1, 0)
    with pytest.raises(TypeError):
        TokenMeter(object())  # type: ignore[arg-type]


def test_run_scoped_window_is_per_root() -> None:
    rt = Runtime(meters=[WindowMeter("requests", 1, 60, scope="run")])
    fn = lambda p: {"text": "x"}  # noqa: E731
    rt.run("a").model_call({"model": "m"}, fn=fn)
    rt.run("b").model_call({"model": "m"}, fn=fn)
    with pytest.raises(BudgetExceeded):
        rt.run("a").model_call({"model": "m", "i": 2}, fn=fn)


class FakeNVML:
    def __init__(self) -> None:
        self.millijoules = 1_000

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index != 0:
            raise RuntimeError("no such GPU")
        return "gpu0"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        self.millijoules += 2_500
        return self.millijoules


def test_energy_meter_charges_joules_from_the_nvml_counter() -> None:
    meter = EnergyMeter(nvml=FakeNVML())
    run = Runtime(meters=[meter]).run("gpu", budget=Budget(extra={"joules": 100}))
    node = run.model_call({"model": "local"}, fn=lambda p: {"text": "x"})
    assert node.meta["joules"] == "2.5" and node.meta["charges"]["joules"] == 2.5


def test_energy_meter_errors_are_clear() -> None:
    with pytest.raises(PollardError, match="NVML") as info:
        EnergyMeter(index=3, nvml=FakeNVML())
    assert info.value.hint
    try:
        import pynvml  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pollard\[nvml\]"):
            EnergyMeter()


def test_tokenmaster_meter_records_state_and_advice() -> None:
    meter = TokenmasterMeter(model="anthropic:claude-sonnet-4-6", expected_remaining_turns=5)
    rt = Runtime(meters=[StepMeter(), meter])
    run = rt.run("tm", budget=Budget(tokens=120_000, steps=20))
    usage = {"input_tokens": 1000, "output_tokens": 300, "cache_read_input_tokens": 50}

    def fn(payload: Any) -> dict[str, Any]:
        return {"text": "x", "usage": usage}

    node = run.model_call({"model": "anthropic:claude-sonnet-4-6"}, fn=fn)
    assert node.meta["charges"]["tokens"] == 1350
    record = node.meta["tokenmaster"]
    assert record["state"]["zone"] in {"green", "caution", "critical"}
    assert record["task"]["expected_remaining_turns"] == 5 and "action" in record["advice"]
    # Replay serves the step without recording another tokenmaster turn.
    turns = len(meter.meter.turns)
    Runtime(rt.store, meters=[StepMeter(), meter], mode="replay").run("tm").model_call(
        {"model": "anthropic:claude-sonnet-4-6"}, fn=fn
    )
    assert len(meter.meter.turns) == turns


def test_cost_meter_from_genai_prices() -> None:
    from pollard.meters import CostMeter

    meter = CostMeter.from_genai_prices(provider_id="openai")
    run = Runtime(meters=[meter]).run("priced", budget=Budget(usd="1"))
    node = run.model_call(
        {"model": "gpt-4o"},
        fn=lambda p: {"text": "x", "usage": {"input_tokens": 1000, "output_tokens": 100}},
    )
    assert Decimal(node.meta["charges"]["usd"]) > 0
    with pytest.raises(ValueError, match="no price"):
        run.model_call({"model": "no-such-model-zz"}, fn=lambda p: {"text": "x"})


def test_tokenmaster_meter_counts_adapter_usage_once() -> None:
    meter = TokenmasterMeter(model="anthropic:claude-sonnet-4-6")
    # pollard's adapters: input includes cache reads, output includes reasoning.
    usage = {
        "input_tokens": 1000,
        "output_tokens": 300,
        "cache_read_tokens": 200,
        "cache_write_tokens": 0,
        "reasoning_tokens": 100,
    }
    result = {"text": "x", "usage": usage}
    assert meter.charge("model_call", {"model": "m"}, result, {}) == 1300
    record = meter.settle_meta("model_call", {"model": "m"}, result, {})
    assert record is not None
    turn = record["tokenmaster"]["turn"]
    assert (turn["input_tokens"], turn["cache_read_tokens"], turn["output_tokens"]) == (
        800,
        200,
        200,
    )
    assert TokenMeter().charge("model_call", {}, result, {}) == 1300


def test_cost_meter_prices_cached_tokens_once_in_both_usage_shapes() -> None:
    from pollard.meters import CostMeter

    meter = CostMeter(
        {"m": {"input_per_1m": "2", "output_per_1m": "8", "cache_read_per_1m": "0.5"}}
    )
    adapter_shape = {
        "usage": {"input_tokens": 1000, "cache_read_tokens": 400, "output_tokens": 100}
    }
    raw_shape = {
        "usage": {"input_tokens": 600, "cache_read_input_tokens": 400, "output_tokens": 100}
    }
    expected = (600 * 2 + 400 * Decimal("0.5") + 100 * 8) / Decimal(1_000_000)
    assert meter.charge("model_call", {"model": "m"}, adapter_shape, {}) == expected
    assert meter.charge("model_call", {"model": "m"}, raw_shape, {}) == expected
    assert TokenMeter().charge("model_call", {}, adapter_shape, {}) == 1100
    assert TokenMeter().charge("model_call", {}, raw_shape, {}) == 1100
