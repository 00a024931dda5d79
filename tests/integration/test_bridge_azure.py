"""The pollard bridge over provider="azure_openai": recorded, charged and replayed offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import (
    PolluxTokenEstimator,
    governed_collect,
    governed_defer,
    governed_run,
    governed_run_many,
)
from pollard.errors import PollardError
from pollard.meters import CostMeter, StepMeter
from pollux import Config, RetryPolicy
from pollux.testing import Emulator
from tests.pollux.providers.azure_openai._azure import without_azure

KEY = "azure-bridge-key-0123456789"
DEPLOYMENT = "prod-gpt5-mini"


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    without_azure(monkeypatch)


async def test_a_governed_fan_out_records_and_replays_without_the_resource(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    prompts = ["One?", "Two?"]
    with Emulator(api_key=KEY, models=(DEPLOYMENT,)) as emu:
        config = Config(
            provider="azure_openai",
            model=DEPLOYMENT,
            base_url=emu.base_url("azure_openai"),
            credentials=lambda: KEY,
            retry=RetryPolicy(max_attempts=1),
        )
        async with AsyncRuntime(db) as rt:
            run = rt.run("azure", budget=Budget(steps=5))
            recorded = await governed_run_many(run, prompts, config=config)
            nodes = [n for n in run.store.children(run.root_id) if n.kind.value == "model_call"]
        sent = len(emu.requests)
    assert recorded.status == "ok" and sent == 2
    for node in nodes:
        assert node.payload["provider"] == "azure_openai"
        assert node.payload["model"] == DEPLOYMENT
        assert node.payload["_pollard"] == {"provider": "azure.ai.openai"}
        assert KEY not in json.dumps(node.payload) + json.dumps(node.result)
    # The resource is gone: replay answers from the ledger.
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("azure", budget=Budget(steps=5))
        replayed = await governed_run_many(run, prompts, config=config)
    assert replayed.answers == recorded.answers


SERVED = "gpt-5-mini-2025-08-07"


def _priced_config(emu: Emulator, **fields: object) -> Config:
    return Config(
        provider="azure_openai",
        model=DEPLOYMENT,
        base_url=emu.base_url("azure_openai"),
        api_key=KEY,
        retry=RetryPolicy(max_attempts=1),
        **fields,  # type: ignore[arg-type]
    )


async def test_a_hard_usd_cap_admits_by_pricing_model_and_settles_at_the_served_model(
    tmp_path: Path,
) -> None:
    meters = [
        StepMeter(),
        CostMeter.from_genai_prices(estimator=PolluxTokenEstimator()),  # hard
    ]
    with Emulator(api_key=KEY, models={DEPLOYMENT: SERVED}) as emu:
        async with AsyncRuntime(tmp_path / "runs.db", meters=meters) as rt:
            run = rt.run("capped", budget=Budget(usd=1))
            # The deployment alone cannot be priced before the call: refused, nothing sent.
            with pytest.raises(ValueError, match="pricing_model") as refused:
                await governed_run(run, "Hi", config=_priced_config(emu), max_tokens=64)
            assert "POLLUX_AZURE_PRICING_MODEL" in str(refused.value)
            assert not emu.requests_for("azure_openai.responses.create")
            # Declared as a dearer model: held at its worst case, settled at what was served.
            config = _priced_config(emu, pricing_model="gpt-5")
            out = await governed_run(run, "Hi", config=config, max_tokens=64)
            node = next(n for n in run.store.children(run.root_id) if n.kind.value == "model_call")
            report = run.report()
    assert node.payload["_pollard"] == {"provider": "azure.ai.openai", "pricing_model": "gpt-5"}
    assert out.diagnostics.raw["response"]["artifacts"]["model_version"] == SERVED
    assert out.metrics.cost_usd is not None and out.metrics.cost_usd > 0
    assert float(node.meta["charges"]["usd"]) == pytest.approx(out.metrics.cost_usd)
    assert float(report["total"]["usd"]) == pytest.approx(out.metrics.cost_usd)


async def test_a_governed_global_batch_settles_at_the_served_models_batch_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Emulator(api_key=KEY, models={DEPLOYMENT: SERVED}) as emu:
        # Collecting reads the resource from the environment (a handle holds no credentials).
        monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", emu.base_url("azure_openai"))
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
        config = _priced_config(emu, pricing_model="gpt-5-mini")
        meters = [StepMeter(), CostMeter.from_genai_prices()]
        async with AsyncRuntime(tmp_path / "runs.db", meters=meters) as rt:
            run = rt.run("batch", budget=Budget(usd=1))
            job = await governed_defer(run, ["One?", "Two?"], config=config, max_tokens=64)
            emu.advance(30)
            answers = await governed_collect(run, job)
            total = run.report()["total"]["usd"]
        unpriced = _priced_config(emu)
        async with AsyncRuntime(tmp_path / "other.db", meters=meters) as rt:
            with pytest.raises(PollardError, match="charge is unknown") as refused:
                await governed_defer(
                    rt.run("x", budget=Budget(usd=1)), ["One?"], config=unpriced, max_tokens=64
                )
    costs = [o.metrics.cost_usd for o in answers.outputs]
    assert all(c is not None and c > 0 for c in costs)
    assert float(total) == pytest.approx(sum(c for c in costs if c is not None))
    assert "POLLUX_AZURE_PRICING_MODEL" in (refused.value.hint or "")
