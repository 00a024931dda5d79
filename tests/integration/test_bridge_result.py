"""What a bridge node records as its result: the answer, not the facts of one dispatch.

pollard keeps the first result of a node and records a differing one as a result conflict, so a
result that holds a measured duration or a per-call response id makes every identical re-run a
conflict. The duration lives in the node's meta and replay restores it from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pollard.adapters.pollux as bridge
from pollard import AsyncRuntime, Node
from pollard.adapters.pollux import (
    governed_collect,
    governed_defer,
    governed_interact,
    governed_run,
    governed_run_many,
    governed_stream,
    output_from_node,
)
from pollux import Config, Environment, Input, Output, OutputRequirements, RetryPolicy
from pollux.testing import Emulator, Reply

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)
ENV = Environment(instructions="Be brief.")


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def local(emu: Emulator) -> Config:
    # The emulator names each response anew (chatcmpl-000...1, ...3): a per-call id.
    return Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        retry=RetryPolicy(max_attempts=1),
        request_timeout_s=10.0,
    )


async def call(api: str, run: Any, config: Config) -> Output:
    """One bridge call through ``api``; the Output it returns."""
    if api == "run":
        return await governed_run(run, "Who were the twins?", config=config)
    if api == "interact":
        return await governed_interact(run, ENV, Input("Who were the twins?"), config=config)
    if api == "stream":
        events = [e async for e in governed_stream(run, ENV, Input("Tell me"), config=config)]
        assert events[-1].output is not None
        return events[-1].output
    answers = await governed_run_many(run, ["Who were the twins?"], config=config)
    return answers.outputs[0]


def model_call(run: Any) -> Node:
    (node,) = [n for n in run.store.children(run.root_id) if n.kind.value == "model_call"]
    return node


APIS = ["run", "interact", "stream", "run_many"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("provider", ["mock", "emulator"])
async def test_an_identical_re_run_records_no_result_conflict(
    tmp_path: Path, emu: Emulator, api: str, provider: str
) -> None:
    config = MOCK if provider == "mock" else local(emu)
    db = tmp_path / "runs.db"
    for _ in range(3):
        async with AsyncRuntime(db) as rt:
            run = rt.run("again")
            await call(api, run, config)
            node = model_call(run)
    assert "result_conflicts" not in node.meta
    assert "result_conflict_count" not in node.meta
    assert "duration_s" not in node.result["output"]["metrics"]
    assert "response_id" not in node.result["output"].get("diagnostics", {}).get("response", {})
    assert node.meta["duration_s"] > 0  # the measured time is kept, in the meta


async def test_a_different_answer_still_records_a_result_conflict(
    tmp_path: Path, emu: Emulator
) -> None:
    emu.script("local.chat.completions", Reply("Castor and Pollux."), Reply("The Dioscuri."))
    db = tmp_path / "runs.db"
    for _ in range(2):
        async with AsyncRuntime(db) as rt:
            run = rt.run("differs")
            await governed_run(run, "Who were the twins?", config=local(emu))
            node = model_call(run)
    assert node.result["text"] == "Castor and Pollux."  # the first result stands
    assert node.meta["result_conflict_count"] == 1
    (conflict,) = node.meta["result_conflicts"]
    assert conflict["result"]["text"] == "The Dioscuri."


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["replay", "hybrid"])
async def test_a_served_output_has_the_recorded_duration(
    tmp_path: Path, api: str, mode: str
) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        live = await call(api, rt.run("timed"), MOCK)
    async with AsyncRuntime(db, mode=mode) as rt:
        run = rt.run("timed")
        served = await call(api, run, MOCK)
        node = model_call(run)
    assert served.metrics.duration_s == node.meta["duration_s"] > 0
    assert output_from_node(node).metrics.duration_s == node.meta["duration_s"]
    # Apart from the facts of the live dispatch, the served Output is the live one.
    assert served.text == live.text and served.usage == live.usage
    assert served.continuation == live.continuation
    assert served.metrics.finish_reason == live.metrics.finish_reason


async def test_a_node_recorded_with_the_duration_in_its_result_replays_as_before(
    tmp_path: Path,
) -> None:
    # Bridges before this change recorded Output.to_jsonable() whole: the duration (and the
    # response id) inside the result. Such a node replays with exactly that Output.
    recorded = Output(text="Castor and Pollux.")
    recorded = Output.from_jsonable(
        {
            **recorded.to_jsonable(),
            "metrics": {"duration_s": 1.25, "finish_reason": "stop"},
            "diagnostics": {"response": {"response_id": "resp_old"}},
        }
    )
    old_result = {
        "text": recorded.text,
        "output": recorded.to_jsonable(),
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    payload = bridge._payload(  # type: ignore[attr-defined]
        "run", MOCK, Environment(), Input("Who were the twins?"), OutputRequirements()
    )
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        await rt.run("old").model_call(payload, fn=lambda _payload: old_result)
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("old")
        replayed = await governed_run(run, "Who were the twins?", config=MOCK)
        node = model_call(run)
    assert node.meta["duration_s"] != 1.25
    assert replayed == recorded
    assert replayed.metrics.duration_s == 1.25


async def test_a_collected_batch_answer_keeps_its_response_id(
    tmp_path: Path, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch answer is collected exactly once: its response id names the batch item, not a
    # dispatch that a re-run repeats, and pollux reports no duration for it.
    monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = Config(provider="openai", model="gpt-5-nano")
    async with AsyncRuntime(tmp_path / "runs.db") as rt:
        run = rt.run("batch")
        job = await governed_defer(run, ["Q1?", "Q2?"], config=config, max_tokens=64)
        emu.advance(15)
        collected = await governed_collect(run, job)
        answers = [n for n in run.store.children(job.node_id) if n.kind.value == "model_call"]
    assert len(answers) == 2
    for node in answers:
        assert "duration_s" not in node.result["output"]["metrics"]
        assert node.result["output"]["diagnostics"]["response"]["response_id"]
    for output in collected.outputs:
        assert output.metrics.duration_s == 0.0
        assert output.diagnostics.raw["response"]["response_id"]
