"""What an Azure OpenAI call costs: a deployment is priced by the model behind it.

``Config.model`` names a deployment ("prod-gpt5-mini"), which genai-prices cannot price. After
the call the response names the model that served it ("gpt-5-mini-2025-08-07"); before the call
only ``Config.pricing_model`` says it. The emulator's ``models={deployment: model}`` is a
resource whose deployment serves that model.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from pollux import APIError, Config, ConfigurationError, Environment, Input, Session, run, stream
from pollux.testing import Emulator

from ._azure import KEY, VERSION, azure_config

DEPLOYMENT = "prod-gpt5-mini"
SERVED = "gpt-5-mini-2025-08-07"


def list_price(model: str, input_tokens: int, output_tokens: int) -> float:
    calc = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens),
        model_ref=model,
        provider_id="azure",
    )
    return float(calc.total_price)


@pytest.fixture
def resource() -> Any:
    with Emulator(api_key=KEY, models={DEPLOYMENT: SERVED}) as emulator:
        yield emulator


async def test_a_custom_named_deployment_is_priced_by_the_model_it_serves(
    resource: Emulator,
) -> None:
    # The regression: every call of a deployment not named like a model was unpriced.
    out = await run("Name a colour", config=azure_config(resource, DEPLOYMENT), max_tokens=64)
    assert out.diagnostics.raw["response"]["artifacts"]["model_version"] == SERVED
    usage = out.usage
    assert out.metrics.cost_usd == pytest.approx(
        list_price(SERVED, usage.input_tokens, usage.output_tokens)
    )
    assert out.metrics.cost_usd > 0


async def test_a_streamed_call_is_priced_like_a_plain_one(resource: Emulator) -> None:
    config = azure_config(resource, DEPLOYMENT, api_version=VERSION)
    plain = await run("Name a colour", config=config, max_tokens=64)
    streamed = None
    async for event in stream(Environment(), Input("Name a colour"), config=config, max_tokens=64):
        if event.type == "done":
            streamed = event.output
    assert streamed is not None
    assert streamed.diagnostics.raw["response"]["artifacts"]["model_version"] == SERVED
    assert streamed.metrics.cost_usd == plain.metrics.cost_usd
    assert plain.metrics.cost_usd is not None


async def test_a_global_batch_answer_is_priced_at_the_batch_tier_of_its_model() -> None:
    with Emulator(api_key=KEY, models={"gpt5-mini-batch": SERVED}) as emu:
        async with Session(azure_config(emu, "gpt5-mini-batch")) as session:
            handle = await session.defer(["One?"], max_tokens=64)
            emu.advance(30)
            (answer,) = (await session.collect_deferred(handle)).outputs
    assert answer.diagnostics.raw["response"]["artifacts"]["model_version"] == SERVED
    usage = answer.usage
    # Global batch costs half the Global Standard price (genai-prices' Azure table prices the
    # OpenAI models it borrows at the standard tier, so the discount is pollux's).
    expected = list_price(SERVED, usage.input_tokens, usage.output_tokens) / 2
    assert answer.metrics.cost_usd == pytest.approx(expected)


async def test_an_unknown_model_falls_back_to_pricing_model_else_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A resource that answers with a name genai-prices does not know (a new model, a proxy).
    with Emulator(api_key=KEY, models=("team-deployment",)) as emu:
        caplog.set_level(logging.WARNING, logger="pollux.pricing")
        unpriced = await run("Hi", config=azure_config(emu, "team-deployment"), max_tokens=16)
        declared = azure_config(emu, "team-deployment", pricing_model="gpt-5-mini")
        priced = await run("Hi", config=declared, max_tokens=16)
    assert unpriced.metrics.cost_usd is None  # unknown, never zero
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "pollux.pricing"]
    assert "'team-deployment'" in warning and "pricing_model" in warning
    assert "POLLUX_AZURE_PRICING_MODEL" in warning
    usage = priced.usage
    assert priced.metrics.cost_usd == pytest.approx(
        list_price("gpt-5-mini", usage.input_tokens, usage.output_tokens)
    )


def test_pricing_model_is_validated_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fields: dict[str, Any] = {"base_url": "https://contoso.openai.azure.com", "api_key": KEY}
    with pytest.raises(ConfigurationError, match="pricing_model is only valid for") as refused:
        Config(provider="openai", model="gpt-5-mini", api_key=KEY, pricing_model="gpt-5-mini")
    assert refused.value.hint == "Remove pricing_model, or use provider='azure_openai'."
    with pytest.raises(ConfigurationError, match="pricing_model must be a non-empty"):
        Config(provider="azure_openai", model=DEPLOYMENT, pricing_model=" ", **fields)
    assert Config(provider="azure_openai", model=DEPLOYMENT, **fields).pricing_model is None
    monkeypatch.setenv("POLLUX_AZURE_PRICING_MODEL", "gpt-5-mini")
    assert Config(provider="azure_openai", model=DEPLOYMENT, **fields).pricing_model == "gpt-5-mini"
    # Only Azure reads the variable: it is no error for the other providers.
    assert Config(provider="openai", model="gpt-5-mini", api_key=KEY).pricing_model is None


def _usd(line: str) -> Decimal:
    spent = line.split("spent ", 1)[1].split(";", 1)[0]
    amounts = dict(item.split("=") for item in spent.split())
    return Decimal(amounts["usd"])


def test_the_cli_hard_usd_cap_needs_the_pricing_model_and_then_reconciles(
    resource: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from pollux._cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", resource.base_url("azure_openai"))
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    flags = ["--provider", "azure_openai", "--model", DEPLOYMENT, "--ledger", "runs.db"]
    capped = ["--max-usd", "1", "--max-output-tokens", "64"]
    # Without it a ledger has no dollar meter, and its cost line says what to set.
    assert main(["ask", "Hi", *flags]) == 0
    unpriced = capsys.readouterr().err
    assert f"no usd price for deployment {DEPLOYMENT}: set POLLUX_AZURE_PRICING_MODEL" in unpriced
    # ... and a hard cap cannot price it before the call: refused, nothing sent.
    sent = len(resource.requests_for("azure_openai.responses.create"))
    assert main(["ask", "Hello", *flags, *capped]) == 2
    refused = capsys.readouterr().err
    assert f"no price is known for deployment {DEPLOYMENT!r}" in refused
    assert "POLLUX_AZURE_PRICING_MODEL" in refused
    assert len(resource.requests_for("azure_openai.responses.create")) == sent
    # A pricier model declared: admitted at its worst case, charged what the served model cost.
    monkeypatch.setenv("POLLUX_AZURE_PRICING_MODEL", "gpt-5")
    assert main(["ask", "Hi", "--json", *flags, *capped]) == 0
    done = capsys.readouterr()
    output = json.loads(done.out)
    assert output["diagnostics"]["response"]["artifacts"]["model_version"] == SERVED
    (line,) = [x for x in done.err.splitlines() if x.startswith("pollux: ledger ")]
    assert "no usd price" not in line
    assert _usd(line) == pytest.approx(Decimal(str(output["metrics"]["cost_usd"])))


async def test_the_emulator_maps_deployments_to_the_models_they_serve() -> None:
    with pytest.raises(ValueError, match="maps each name to the model it serves"):
        Emulator(models={DEPLOYMENT: ""})
    # The mapping's names are the resource's deployments, as a list's are.
    with (
        Emulator(api_key=KEY, models={DEPLOYMENT: SERVED}) as emu,
        pytest.raises(APIError, match="does not exist"),
    ):
        await run("Hi", config=azure_config(emu, "gpt-5-mini"), max_tokens=16)
