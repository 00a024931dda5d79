"""Hard token and dollar caps under a concurrent governed fan-out (issue 25).

A hard meter reserves each call's worst case (input estimate plus its output cap) at admission
and settles the actual usage after, so concurrent prompts cannot overspend together; a prompt
whose worst case cannot be bounded is refused with a hint; a budget with room never refuses.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, Store
from pollard._core._ledger import BudgetClaim
from pollard.adapters.pollux import PolluxTokenEstimator, _estimator, _identity, governed_run_many
from pollard.meters import CostMeter, StepMeter, TokenMeter
from pollux import Config, Source
from pollux.media_tokens import image_tokens

CONFIG = Config(provider="openai", model="gpt-5-nano", use_mock=True, request_concurrency=8)
# The mock answers a prompt of 100 characters with 25 input and 27 output tokens (52 in all);
# with max_tokens=50 its worst case is 25 + 50 = 75.
PROMPTS = [f"Question number {i:02d}? " * 5 for i in range(24)]
PRICES = {"gpt-5-nano": {"input_per_1m": "1", "output_per_1m": "10"}}


def reserved(store: Store, scope: str, meter: str) -> Decimal:
    """The unexpired amount held against ``scope``'s ``meter`` (read through the admission rule)."""
    big = Decimal(10**12)
    admission = store.reserve([BudgetClaim(scope, meter, big, big)], lease_seconds=1, hold=False)
    if admission.shortfall is None:
        return Decimal(0)
    return big - admission.shortfall.spent - admission.shortfall.remaining


def _fan_out(
    where: str | None, meters: list[Any], budget: Budget, **settings: Any
) -> tuple[list[str], dict[str, Any], dict[str, Decimal]]:
    async def main() -> tuple[list[str], dict[str, Any], dict[str, Decimal]]:
        async with AsyncRuntime(where, meters=meters) as rt:
            run = rt.run("fan", budget=budget)
            answers = await governed_run_many(run, PROMPTS, config=CONFIG, **settings)
            statuses = [o.metrics.completion_status for o in answers.outputs]
            errors = [o.diagnostics.raw.get("error") for o in answers.outputs]
            held = {name: reserved(rt.store, run.root_id, name) for name in budget.limits()}
            return statuses, {"total": run.report()["total"], "errors": errors}, held

    return asyncio.run(main())


@pytest.fixture(params=["memory", "sqlite"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return None if request.param == "memory" else str(tmp_path / "caps.db")


def test_a_concurrent_fan_out_never_overspends_a_hard_token_budget(where: str | None) -> None:
    hard = [StepMeter(), TokenMeter(PolluxTokenEstimator())]
    statuses, seen, held = _fan_out(where, hard, Budget(tokens=500), max_tokens=50)
    assert seen["total"]["tokens"] <= 500
    assert statuses.count("clean") == seen["total"]["tokens"] // 52 >= 6
    assert held == {"tokens": 0}
    # The same fan-out under the estimated (soft) meter overspends: that is what a hard cap fixes.
    soft = [StepMeter(), TokenMeter(PolluxTokenEstimator(), estimated=True)]
    _, seen, _ = _fan_out(None, soft, Budget(tokens=500), max_tokens=50)
    assert seen["total"]["tokens"] > 500


def test_a_hard_budget_with_room_never_refuses(where: str | None) -> None:
    # Eight worst cases (8 x 75) do not fit at once; their actual usage (8 x 52) does, and the
    # last one's worst case fits beside the seven others' actual usage.
    hard = [StepMeter(), TokenMeter(PolluxTokenEstimator())]
    config_prompts = 8
    budget = Budget(tokens=52 * (config_prompts - 1) + 75)
    global PROMPTS
    saved, PROMPTS = PROMPTS, PROMPTS[:config_prompts]
    try:
        statuses, seen, held = _fan_out(where, hard, budget, max_tokens=50)
    finally:
        PROMPTS = saved
    assert statuses == ["clean"] * config_prompts
    assert seen["total"]["tokens"] == 52 * config_prompts
    assert held == {"tokens": 0}


def test_a_prompt_whose_worst_case_cannot_be_bounded_is_refused_with_a_hint() -> None:
    hard = [StepMeter(), TokenMeter(PolluxTokenEstimator())]
    statuses, seen, held = _fan_out(None, hard, Budget(tokens=10_000))  # no max_tokens
    assert statuses == ["error"] * len(PROMPTS)
    error = seen["errors"][0]
    assert "cannot be bounded" in error["message"]
    assert "max_tokens" in error["hint"] and "reserved_output_tokens" in error["hint"]
    assert seen["total"].get("tokens", 0) == 0  # nothing was sent
    assert held == {"tokens": 0}
    # A default cap bounds it.
    capped = [StepMeter(), TokenMeter(PolluxTokenEstimator(), reserved_output_tokens=50)]
    statuses, seen, _ = _fan_out(None, capped, Budget(tokens=500))
    assert "clean" in statuses and seen["total"]["tokens"] <= 500


def test_a_concurrent_fan_out_never_overspends_a_hard_dollar_budget(where: str | None) -> None:
    # One answer costs 25 x $1 + 27 x $10 per million = $0.000295; its worst case $0.000525.
    limit = Decimal("0.003")
    hard = [StepMeter(), CostMeter(PRICES, estimator=PolluxTokenEstimator())]
    statuses, seen, held = _fan_out(where, hard, Budget(usd=limit), max_tokens=50)
    assert Decimal(str(seen["total"]["usd"])) <= limit
    assert statuses.count("clean") == 9  # the tenth's worst case no longer fits
    assert held == {"usd": 0}
    soft = [StepMeter(), CostMeter(PRICES)]
    _, seen, _ = _fan_out(None, soft, Budget(usd=limit), max_tokens=50)
    assert Decimal(str(seen["total"]["usd"])) > limit


def test_a_genai_prices_meter_with_an_estimator_is_a_hard_dollar_cap(where: str | None) -> None:
    pytest.importorskip("genai_prices")
    # genai-prices prices gpt-5-nano at $0.05 in, $0.40 out per million: an answer (25 + 27
    # tokens) costs $0.00001205, its worst case (25 + 50) $0.00002125.
    limit = Decimal("0.0001")
    estimator = PolluxTokenEstimator()
    hard = [StepMeter(), CostMeter.from_genai_prices(provider_id="openai", estimator=estimator)]
    statuses, seen, held = _fan_out(where, hard, Budget(usd=limit), max_tokens=50)
    spent = Decimal(str(seen["total"]["usd"]))
    assert spent <= limit
    assert statuses.count("clean") == 7  # the eighth's worst case no longer fits beside seven
    assert held == {"usd": 0}
    # The estimated meter, named so, overspends the same budget.
    soft = [
        StepMeter(),
        CostMeter.from_genai_prices(provider_id="openai", estimator=estimator, estimated=True),
    ]
    _, seen, _ = _fan_out(None, soft, Budget(usd=limit), max_tokens=50)
    assert Decimal(str(seen["total"]["usd"])) > limit


def test_a_genai_prices_hard_meter_refuses_an_unbounded_call_with_a_hint() -> None:
    pytest.importorskip("genai_prices")
    hard = [
        StepMeter(),
        CostMeter.from_genai_prices(provider_id="openai", estimator=PolluxTokenEstimator()),
    ]
    statuses, seen, held = _fan_out(None, hard, Budget(usd=1))  # no max_tokens
    assert statuses == ["error"] * len(PROMPTS)
    error = seen["errors"][0]
    assert "usd budget" in error["message"] and "cannot be bounded" in error["message"]
    assert "max_tokens" in error["hint"]
    assert seen["total"].get("usd", 0) == 0 and held == {"usd": 0}


def test_a_genai_prices_worst_case_is_priced_at_the_dearest_input_rate() -> None:
    pytest.importorskip("genai_prices")

    class Thousand:
        def estimate_input_tokens(self, payload: Any) -> int:
            return 1000

    meter = CostMeter.from_genai_prices(provider_id="anthropic", estimator=Thousand())
    payload = {"model": "claude-sonnet-4-5", "max_tokens": 100}
    # $3 fresh, $0.30 read, $3.75 5-minute write, $6 1-hour write per million in; $15 out.
    assert meter.precheck_estimate("model_call", payload) == Decimal("0.0075")
    assert meter.precheck_estimate("model_call", {"model": "claude-sonnet-4-5"}) is None
    assert meter.precheck_estimate("tool_call", {}) == 0
    soft = CostMeter.from_genai_prices(
        provider_id="anthropic", estimator=Thousand(), estimated=True
    )
    assert soft.precheck_estimate("model_call", payload) is None
    assert "estimated=True" in repr(soft)


def test_a_hard_token_budget_admits_images_by_their_pixels_and_never_overspends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1023 x 767 PNG padded to 300 KB was estimated at its bytes (75,000 tokens), so a
    # 20,000-token hard budget refused every prompt about it. The bridge now reads its size when
    # it builds the payload and holds what gpt-5-nano charges for its 768 patches (1,890), which
    # the mock settles at, so the budget answers as many prompts as fit and no more.
    png = (Path(__file__).resolve().parent.parent / "pollux" / "media" / "wide.png").read_bytes()
    photo = tmp_path / "photo.png"
    photo.write_bytes(png + bytes(300_000))
    source = Source.from_file(photo)
    estimator = PolluxTokenEstimator()

    async def main(label: str) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        meters = [StepMeter(), TokenMeter(estimator)]
        async with AsyncRuntime(str(tmp_path / "caps.db"), meters=meters) as rt:
            run = rt.run(label, budget=Budget(tokens=20_000))
            prompts = [f"Describe part {i}." for i in range(16)]
            answers = await governed_run_many(
                run, prompts, sources=[source], config=CONFIG, max_tokens=50
            )
            statuses = [o.metrics.completion_status for o in answers.outputs]
            calls = [n for n in rt.store.walk(run.root_id) if n.kind.value == "model_call"]
            return statuses, run.report()["total"], calls[0].payload

    statuses, total, payload = asyncio.run(main("images"))
    pixels = image_tokens("openai", "gpt-5-nano", (1023, 767))
    assert estimator.estimate_input_tokens(payload) == pixels + 4 == 1_894  # image + prompt
    answered = statuses.count("clean")
    assert statuses == ["clean"] * answered + ["error"] * (16 - answered)
    # Each answer: the image's 1,890 tokens, the prompt's 4 and the mock's 15 of output.
    assert total["tokens"] == (pixels + 4 + 15) * answered == 1_909 * 10
    assert 20_000 - total["tokens"] < 1_894 + 50  # refused only once the next could not fit

    # A payload this process did not build (replayed, imported) has no size to read: its image
    # counts the most one costs on the model, which still fits the budget's first prompts.
    monkeypatch.setattr(_estimator, "_KNOWN", {})
    bound = image_tokens("openai", "gpt-5-nano")
    assert estimator.estimate_input_tokens(payload) == bound + 4 == 3_783
    monkeypatch.setattr(_estimator, "remember_media", lambda *args: None)
    monkeypatch.setattr(_identity, "remember_media", lambda *args: None)
    statuses, total, _ = asyncio.run(main("unread"))
    assert total["tokens"] <= 20_000 and statuses.count("clean") == 9  # held 3,833 each


@pytest.mark.parametrize(
    "model",
    ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-nano", "gpt-5", "gpt-5-mini", "gpt-5.2-nano",
     "o4-mini", "o3", "openai/gpt-5-nano"],
)  # fmt: skip
def test_pollard_and_pollux_agree_on_the_most_an_openai_image_costs(model: str) -> None:
    # pollard's OpenAITokenEstimator keeps its own copy of OpenAI's rules (pollard does not
    # import pollux): the two must not drift apart.
    from pollard.estimators.openai import image_part_tokens

    assert image_part_tokens(model) == image_tokens("openai", model)
