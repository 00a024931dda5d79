"""Budgeted deferred delivery through the bridge, end to end on the emulator's OpenAI batch wire,
recorded into SQLite (default emulator stages: validating 1 s, in_progress 10 s, finalizing 1 s)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, BudgetExceeded, PollardError, Runtime
from pollard.adapters.pollux import (
    GovernedJob,
    batch_price,
    governed_cancel,
    governed_collect,
    governed_defer,
    governed_inspect,
)
from pollard.errors import MissingRecording
from pollard.meters import CostMeter
from pollux import Config, ConfigurationError, DeferredNotReadyError, RetryPolicy
from pollux.testing import Emulator

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.005)
PROMPTS = ["Q1?", "Q2?", "Q3?"]


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield emulator


def config(model: str = "gpt-5-nano") -> Config:
    return Config(provider="openai", model=model, retry=FAST_RETRY, request_timeout_s=5.0)


def openai_requests(emu: Emulator) -> list[str]:
    return [r.route for r in emu.requests if r.route.startswith("openai")]


def runtime(db: Path, **kwargs: Any) -> AsyncRuntime:
    return AsyncRuntime(str(db), meters=[CostMeter.from_genai_prices()], **kwargs)


def totals(db: Path) -> dict[str, Any]:
    with Runtime(str(db), meters=[CostMeter.from_genai_prices()]) as rt:
        return rt.run("nightly").report(exact=True)["total"]


async def test_worst_case_that_does_not_fit_is_refused_before_anything_is_sent(
    emu: Emulator, tmp_path: Path
) -> None:
    async with runtime(tmp_path / "runs.db") as rt:
        run = rt.run("nightly", budget=Budget(tokens=100))
        with pytest.raises(BudgetExceeded) as refused:
            await governed_defer(run, PROMPTS, config=config(), max_tokens=64)
        assert refused.value.meter == "tokens"
        assert run.cursor.kind.value == "refusal"
        assert not any(run.report()["total"].values())  # every meter listed, nothing charged
    assert openai_requests(emu) == []


async def test_max_tokens_is_required_to_bound_the_worst_case(emu: Emulator) -> None:
    async with AsyncRuntime() as rt:
        with pytest.raises(ConfigurationError, match="max_tokens"):
            await governed_defer(rt.run("x"), PROMPTS, config=config())
    assert openai_requests(emu) == []


async def test_submit_charges_the_worst_case_and_collect_settles_the_actual_once(
    emu: Emulator, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    async with runtime(db) as rt:
        run = rt.run("nightly", budget=Budget(usd=1, tokens=10_000))
        job = await governed_defer(run, PROMPTS, config=config(), max_tokens=64)
        reserved = run.report(exact=True)["total"]
        assert reserved["steps"] == "1"
        worst = run.store.get(job.node_id).meta["worst_case_usage"]
        assert int(reserved["tokens"]) == worst["input_tokens"] + 3 * 64
        assert Decimal(reserved["usd"]) == batch_price("openai", "gpt-5-nano", worst)
        with pytest.raises(DeferredNotReadyError):
            await governed_collect(run, job)
        assert run.report(exact=True)["total"] == reserved  # nothing recorded while running

        emu.advance(15)
        answers = await governed_collect(run, job)
        assert answers.status == "ok" and len(answers.outputs) == 3
        usage = [o.usage for o in answers.outputs]
        actual_tokens = sum(u.input_tokens + u.output_tokens for u in usage)
        actual_usd = sum(
            batch_price(
                "openai",
                "gpt-5-nano",
                {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens},
            )
            or Decimal(0)
            for u in usage
        )
        settled = run.report(exact=True)["total"]
        assert int(settled["tokens"]) == actual_tokens
        assert Decimal(settled["usd"]) == actual_usd
        assert settled["steps"] == "1"
        children = run.store.children(job.node_id)
        assert sum(1 for c in children if c.kind.value == "model_call") == 3

        calls = len(openai_requests(emu))
        again = await governed_collect(run, job)
        assert again.answers == answers.answers
        assert run.report(exact=True)["total"] == settled  # collecting twice charges once
        assert len(openai_requests(emu)) == calls  # and is served from the ledger


async def test_batch_price_is_the_discounted_standard_price() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 1000}
    import genai_prices

    standard = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=1000, output_tokens=1000), model_ref="gpt-5-nano"
    ).total_price
    assert batch_price("openai", "gpt-5-nano", usage) == Decimal(str(standard)) / 2
    assert batch_price("openai", "no-such-model-xyz", usage) is None


@pytest.mark.parametrize(
    ("provider", "price_id"),
    [
        ("openai", "openai"),
        ("anthropic", "anthropic"),
        ("gemini", "google"),
        ("vertex", "google"),
        ("azure_openai", "azure"),
    ],
)
def test_pollux_and_the_ledger_price_a_batch_answer_alike(provider: str, price_id: str) -> None:
    # pollux discounted a model without a batch price variant only on Azure, the ledger on every
    # batch API: a batch answer of claude-opus-4-1 or gemini-2.0-flash cost twice as much in
    # Output.metrics.cost_usd as in the ledger. Both now read one table (BATCH_DISCOUNT).
    from genai_prices.data_snapshot import get_snapshot

    from pollux._pricing import call_cost
    from pollux.interaction.output import Usage

    usage = Usage(
        input_tokens=300_000,
        output_tokens=50_000,
        total_tokens=350_000,
        cached_tokens=100_000,
        cache_write_tokens=20_000,
    )
    recorded = {
        "input_tokens": 300_000,
        "output_tokens": 50_000,
        "cache_read_tokens": 100_000,
        "cache_write_tokens": 20_000,
    }
    (table,) = [found for found in get_snapshot().providers if found.id == price_id]
    models = [model.id for model in table.models]
    assert len(models) > 10
    priced = 0
    for model in models:
        by_pollux, _ = call_cost(provider, model, usage, batch=True)
        assert by_pollux == batch_price(provider, model, recorded), model
        standard, _ = call_cost(provider, model, usage)
        if by_pollux is not None and standard:
            assert by_pollux <= standard, model  # never above the standard tier
            priced += by_pollux < standard
    assert priced > 10


@pytest.mark.parametrize(
    ("provider", "model", "reads_discounted"),
    [
        ("gemini", "gemini-2.0-flash", False),
        ("vertex", "gemini-2.0-flash", False),
        ("anthropic", "claude-opus-4-1", True),
    ],
)
def test_a_batch_discount_covers_cache_reads_only_where_the_provider_stacks_them(
    provider: str, model: str, reads_discounted: bool
) -> None:
    # Google's batch and cache discounts do not stack (a batch answer's cache hits cost the
    # cache-read rate); both bills halved them for a Gemini model without a batch price variant.
    from pollux._pricing import call_cost
    from pollux.interaction.output import Usage

    def bills(input_tokens: int, reads: int) -> tuple[Decimal, Decimal]:
        usage = Usage(
            input_tokens=input_tokens,
            output_tokens=1_000,
            total_tokens=input_tokens + 1_000,
            cached_tokens=reads,
        )
        batch, _ = call_cost(provider, model, usage, batch=True)
        standard, _ = call_cost(provider, model, usage)
        recorded = {
            "input_tokens": input_tokens,
            "output_tokens": 1_000,
            "cache_read_tokens": reads,
        }
        assert batch is not None and standard is not None
        assert batch == batch_price(provider, model, recorded)  # the two bills agree
        return batch, standard

    fresh_batch, fresh_standard = bills(10_000, 0)
    assert fresh_batch == fresh_standard / 2  # no batch variant: the table's half
    output_batch, output_standard = bills(0, 0)
    cached_batch, cached_standard = bills(10_000, 10_000)  # the whole prompt read from cache
    reads_standard = cached_standard - output_standard
    reads_batch = cached_batch - output_batch
    assert 0 < reads_standard < fresh_standard - output_standard
    assert reads_batch == (reads_standard / 2 if reads_discounted else reads_standard)


_COLLECT = """
import asyncio, json, sys
from pollard import AsyncRuntime
from pollard.adapters.pollux import governed_collect
from pollard.meters import CostMeter

async def main():
    job = json.loads(open(sys.argv[2]).read())
    async with AsyncRuntime(sys.argv[1], meters=[CostMeter.from_genai_prices()]) as rt:
        answers = await governed_collect(rt.run("nightly"), job)
        print(json.dumps(answers.answers))

asyncio.run(main())
"""


async def test_collect_from_another_process_through_the_stored_handle(
    emu: Emulator, tmp_path: Path
) -> None:
    db, stored = tmp_path / "runs.db", tmp_path / "job.json"
    async with runtime(db) as rt:
        job = await governed_defer(rt.run("nightly"), PROMPTS, config=config(), max_tokens=64)
    stored.write_text(json.dumps(job.to_dict()))
    assert GovernedJob.from_dict(json.loads(stored.read_text())) == job
    emu.advance(15)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _COLLECT, str(db), str(stored)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert len(answers) == 3 and all(answers)
    first = totals(db)
    assert int(first["tokens"]) > 0
    async with runtime(db) as rt:  # this process collects the same job: no second charge
        again = await governed_collect(rt.run("nightly"), job)
    assert again.answers == answers
    assert totals(db) == first


async def test_cancel_releases_what_was_not_spent(emu: Emulator, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with runtime(db) as rt:
        run = rt.run("nightly", budget=Budget(tokens=10_000))
        job = await governed_defer(run, PROMPTS, config=config(), max_tokens=64)
        assert int(run.report(exact=True)["total"]["tokens"]) > 0
        await governed_cancel(run, job)
        emu.advance(5)
        snapshot = await governed_inspect(run, job)
        assert snapshot.is_terminal
        answers = await governed_collect(run, job)
        assert answers.status != "ok"
        total = run.report(exact=True)["total"]
        spent = sum(
            o.usage.input_tokens + o.usage.output_tokens
            for o in answers.outputs
            if o.metrics.completion_status != "error"
        )
        assert int(total.get("tokens", "0")) == spent


async def test_replay_serves_collected_answers_offline(emu: Emulator, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with runtime(db) as rt:
        job = await governed_defer(rt.run("nightly"), PROMPTS, config=config(), max_tokens=64)
        emu.advance(15)
        answers = await governed_collect(rt.run("nightly"), job)
    calls = len(openai_requests(emu))
    async with runtime(db, mode="replay") as rt:
        run = rt.run("nightly")
        replayed_job = await governed_defer(run, PROMPTS, config=config(), max_tokens=64)
        assert replayed_job == job
        replayed = await governed_collect(run, replayed_job)
    assert replayed.answers == answers.answers
    assert len(openai_requests(emu)) == calls


async def test_replay_of_an_uncollected_job_raises_missing_recording(
    emu: Emulator, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    async with runtime(db) as rt:
        job = await governed_defer(rt.run("nightly"), PROMPTS, config=config(), max_tokens=64)
    async with runtime(db, mode="replay") as rt:
        with pytest.raises(MissingRecording):
            await governed_collect(rt.run("nightly"), job)


async def test_an_unpriced_model_is_marked_and_refused_under_a_usd_budget(
    emu: Emulator, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    async with runtime(db) as rt:
        with pytest.raises(PollardError, match="usd budget"):
            await governed_defer(
                rt.run("capped", budget=Budget(usd=1)),
                PROMPTS,
                config=config("house-model-7"),
                max_tokens=64,
            )
        assert openai_requests(emu) == []
        run = rt.run("nightly")
        job = await governed_defer(run, PROMPTS, config=config("house-model-7"), max_tokens=64)
        node = run.store.get(job.node_id)
        assert node.meta["unpriced"] is True and "usd" not in node.meta.get("charges", {})
        emu.advance(15)
        await governed_collect(run, job)
        answers = [c for c in run.store.children(job.node_id) if c.kind.value == "model_call"]
        assert answers and all(c.meta["unpriced"] is True for c in answers)
        assert run.report()["total"].get("usd", 0) == 0  # listed at zero: nothing was priced


async def test_a_job_is_collected_only_in_its_run_and_is_not_submitted_twice(
    emu: Emulator, tmp_path: Path
) -> None:
    async with runtime(tmp_path / "runs.db") as rt:
        run = rt.run("nightly")
        job = await governed_defer(run, PROMPTS, config=config(), max_tokens=64)
        calls = len(openai_requests(emu))
        run.checkout(run.root_id)
        same = await governed_defer(run, PROMPTS, config=config(), max_tokens=64)
        assert same == job and len(openai_requests(emu)) == calls  # recorded: not resubmitted
        emu.advance(15)
        with pytest.raises(PollardError, match="not in run 'other'") as wrong:
            await governed_collect(rt.run("other"), job)
        assert "nightly" in (wrong.value.hint or "")
        assert len(openai_requests(emu)) == calls


@pytest.mark.parametrize(
    ("provider", "model", "variables"),
    [
        ("anthropic", "claude-haiku-4-5", ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")),
        ("gemini", "gemini-2.5-flash", ("GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY")),
        # Azure's global batch; the deployment is named after its model, so it is priced.
        ("azure_openai", "gpt-5-nano", ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY")),
    ],
)
async def test_the_anthropic_and_gemini_batch_wires_settle_the_same_way(
    emu: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    model: str,
    variables: tuple[str, str],
) -> None:
    monkeypatch.setenv(variables[0], emu.base_url(provider))
    monkeypatch.setenv(variables[1], "test-key")
    cfg = Config(provider=provider, model=model, retry=FAST_RETRY, request_timeout_s=5.0)  # type: ignore[arg-type]
    async with runtime(tmp_path / "runs.db") as rt:
        run = rt.run("nightly", budget=Budget(usd=1))
        # room for Gemini 2.5's emulated thinking, which alone would use a small cap
        job = await governed_defer(run, PROMPTS, config=cfg, max_tokens=2048)
        worst = run.store.get(job.node_id).meta["worst_case_usage"]
        reserved = Decimal(run.report(exact=True)["total"]["usd"])
        assert reserved == batch_price(provider, model, worst) and reserved > 0
        emu.advance(60)
        answers = await governed_collect(run, job)
        assert answers.status == "ok", [o.diagnostics.error for o in answers.outputs]
        settled = run.report(exact=True)["total"]
        used = sum(o.usage.input_tokens + o.usage.output_tokens for o in answers.outputs)
        assert int(settled["tokens"]) == used
        assert Decimal(settled["usd"]) < reserved
        calls = len(emu.requests)
        again = await governed_collect(run, job)
        assert again.answers == answers.answers
        assert run.report(exact=True)["total"] == settled  # collecting twice charges once
        assert len(emu.requests) == calls  # and is served from the ledger


_WIRES = [
    ("openai", "gpt-5-nano", ("OPENAI_BASE_URL", "OPENAI_API_KEY")),
    ("anthropic", "claude-haiku-4-5", ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")),
    ("gemini", "gemini-2.5-flash", ("GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY")),
    ("azure_openai", "gpt-5-nano", ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY")),
]


@pytest.mark.parametrize(("provider", "model", "variables"), _WIRES)
async def test_cancel_releases_the_reservation_on_every_batch_wire(
    emu: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    model: str,
    variables: tuple[str, str],
) -> None:
    monkeypatch.setenv(variables[0], emu.base_url(provider))
    monkeypatch.setenv(variables[1], "test-key")
    cfg = Config(provider=provider, model=model, retry=FAST_RETRY, request_timeout_s=5.0)  # type: ignore[arg-type]
    async with runtime(tmp_path / "runs.db") as rt:
        run = rt.run("nightly", budget=Budget(usd=1, tokens=100_000))
        job = await governed_defer(run, PROMPTS, config=cfg, max_tokens=2048)
        reserved = run.report(exact=True)["total"]
        assert int(reserved["tokens"]) > 0 and Decimal(reserved["usd"]) > 0
        await governed_cancel(run, job)
        emu.advance(60)
        assert (await governed_inspect(run, job)).is_terminal
        answers = await governed_collect(run, job)
        assert [o.metrics.completion_status for o in answers.outputs] == ["error"] * 3
        released = run.report(exact=True)["total"]
        assert (int(released["tokens"]), Decimal(released["usd"])) == (0, 0)
        assert released["steps"] == "1"
        await governed_collect(run, job)
        assert run.report(exact=True)["total"] == released
