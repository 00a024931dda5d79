"""The bridge end to end: pollux calls recorded as pollard steps, replayed without a provider."""

from __future__ import annotations

import asyncio
import doctest
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import pollard.adapters.pollux as bridge
from pollard import AsyncRuntime, Budget, BudgetExceeded, MissingRecording, Runtime
from pollard._core._canon import node_id
from pollard.adapters.pollux import (
    PolluxTokenEstimator,
    governed_interact,
    governed_run,
    governed_run_many,
    governed_stream,
    output_from_node,
)
from pollard.meters import CostMeter, StepMeter, TokenMeter
from pollard.otel import node_attributes
from pollux import (
    APIError,
    Config,
    ConfigurationError,
    Environment,
    Input,
    OutputRequirements,
    RetryPolicy,
    Source,
    ToolDeclaration,
    ToolResult,
)
from pollux.providers.mock import MockProvider
from pollux.testing import Emulator, ErrorResponse, Reply
from pollux.testing import ToolCall as ScriptedToolCall
from tests.integration._answers import answer

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)
QUESTIONS = ["Who were the twins?", "Why a constellation?", "What did sailors believe?"]
DOC = Source.from_text("Castor and Pollux are the twins of Greek myth.", identifier="twins.txt")
NO_RETRY = RetryPolicy(max_attempts=1)
FORECAST = ToolDeclaration(
    name="get_forecast",
    description="Tomorrow's forecast for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


@pytest.fixture
def mock_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every request the pollux mock provider answers (execute or stream), in order."""
    calls: list[str] = []
    execute, stream = MockProvider.execute, MockProvider.stream

    async def counted_execute(self: MockProvider, compiled: Any) -> Any:
        calls.append("execute")
        return await execute(self, compiled)

    def counted_stream(self: MockProvider, compiled: Any) -> Any:
        calls.append("stream")
        return stream(self, compiled)

    monkeypatch.setattr(MockProvider, "execute", counted_execute)
    monkeypatch.setattr(MockProvider, "stream", counted_stream)
    return calls


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def local(emu: Emulator, **overrides: Any) -> Config:
    options: dict[str, Any] = {
        "provider": "local",
        "model": "emulator-model",
        "base_url": emu.base_url("local"),
        "retry": NO_RETRY,
        "request_timeout_s": 10.0,
    }
    options.update(overrides)
    return Config(**options)


def model_calls(store: Any, parent: str) -> list[Any]:
    return [n for n in store.children(parent) if n.kind.value == "model_call"]


# -- record and replay -----------------------------------------------------------------------------


async def test_fan_out_records_each_prompt_and_replays_without_a_provider(
    tmp_path: Path, mock_calls: list[str]
) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        run = rt.run("fan-out", budget=Budget(steps=10))
        recorded = await governed_run_many(
            run, QUESTIONS, sources=[DOC], config=MOCK, instructions="Be brief."
        )
        root = run.root_id
        nodes = model_calls(run.store, root)
        fan_in = run.cursor
        prompts = [run.store.get(c).payload["input"]["content"] for c in fan_in.payload["calls"]]
        report = run.report()
    assert recorded.status == "ok"
    assert len(mock_calls) == 3
    assert len(nodes) == 3  # one step per prompt, siblings under the cursor
    assert report["spent"]["steps"] == 3
    assert int(report["spent"]["tokens"]) == recorded.usage.total_tokens
    assert fan_in.payload["pollux"] == "run_many"
    calls = fan_in.payload["calls"]
    assert set(calls) == {n.id for n in nodes}
    assert prompts == QUESTIONS
    for node in nodes:
        payload = node.payload
        assert payload["provider"] == "openai" and payload["model"] == "gpt-5-nano"
        assert payload["mock"] is True
        assert payload["environment"]["instructions"] == "Be brief."
        assert payload["environment"]["sources"][0]["hash"] == DOC.cache_identity_hash(
            provider="openai"
        )
        assert node.result["usage"]["input_tokens"] > 0
        assert node.meta["charges"]["tokens"] == (
            node.result["usage"]["input_tokens"] + node.result["usage"]["output_tokens"]
        )

    mock_calls.clear()
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("fan-out", budget=Budget(steps=10))
        replayed = await governed_run_many(
            run, QUESTIONS, sources=[DOC], config=MOCK, instructions="Be brief."
        )
        report = run.report()
    assert mock_calls == []
    assert answer(replayed) == answer(recorded)
    assert report["spent"] and not any(report["spent"].values())  # every meter, at zero
    assert report["avoided"]["steps"] == 3


async def test_replay_of_an_unrecorded_request_raises_missing_recording(
    tmp_path: Path, mock_calls: list[str]
) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        await governed_run(rt.run("r"), "Hello", config=MOCK, temperature=0.2)
    mock_calls.clear()
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("r")
        with pytest.raises(MissingRecording, match=r"temperature"):
            await governed_run(run, "Hello", config=MOCK, temperature=0.3)
        with pytest.raises(MissingRecording):
            await governed_run_many(run, ["Hello", "Something new"], config=MOCK, temperature=0.2)
    assert mock_calls == []


async def test_hybrid_serves_recorded_prompts_and_runs_only_new_ones(
    tmp_path: Path, mock_calls: list[str]
) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        first = await governed_run_many(rt.run("h"), QUESTIONS[:2], sources=[DOC], config=MOCK)
    mock_calls.clear()
    async with AsyncRuntime(db, mode="hybrid") as rt:
        run = rt.run("h")
        both = await governed_run_many(run, QUESTIONS, sources=[DOC], config=MOCK)
        report = run.report()
    assert len(mock_calls) == 1  # only the new question reached the provider
    assert answer(both.outputs[:2]) == answer(first.outputs)
    assert both.status == "ok"
    assert report["spent"]["steps"] == 1
    assert report["avoided"]["steps"] == 2


# -- budgets ---------------------------------------------------------------------------------------


async def test_budget_refuses_prompts_before_any_request(emu: Emulator) -> None:
    config = local(emu, request_concurrency=2)
    async with AsyncRuntime() as rt:
        run = rt.run("budget", budget=Budget(steps=2))
        answers = await governed_run_many(run, [f"Question {i}?" for i in range(5)], config=config)
        refusals = [n for n in run.store.children(run.root_id) if n.kind.value == "refusal"]
        calls = run.cursor.payload["calls"]
        with pytest.raises(BudgetExceeded):
            await governed_run(run, "One more?", config=config)
    assert len(emu.requests_for("local.chat.completions")) == 2
    assert answers.status == "partial"
    refused = [o for o in answers.outputs if o.failed]
    assert [o.failed for o in answers.outputs] == [False, False, True, True, True]  # in order
    assert len(refused) == 3 and len(refusals) == 3
    for output in refused:
        error = output.diagnostics.error
        assert error is not None and error["type"] == "BudgetExceeded"
        assert error["refusal_id"] in {r.id for r in refusals}
        assert output.metrics.n_calls == 0
    assert sorted(c for c in calls if c in {r.id for r in refusals}) == sorted(
        r.id for r in refusals
    )


async def test_refusals_replay_as_the_same_outputs(tmp_path: Path, mock_calls: list[str]) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        recorded = await governed_run_many(
            rt.run("b", budget=Budget(steps=2)), QUESTIONS, config=MOCK
        )
    mock_calls.clear()
    async with AsyncRuntime(db, mode="replay") as rt:
        replayed = await governed_run_many(
            rt.run("b", budget=Budget(steps=2)), QUESTIONS, config=MOCK
        )
    assert mock_calls == []
    assert [o.failed for o in recorded.outputs] == [False, False, True]
    assert answer(replayed) == answer(recorded)
    assert replayed.outputs[2] == recorded.outputs[2]  # a refusal is no dispatch: all equal


async def test_token_estimate_refuses_a_large_request_before_it_is_sent(emu: Emulator) -> None:
    meters = [StepMeter(), TokenMeter(PolluxTokenEstimator(), reserved_output_tokens=100)]
    big = Source.from_text("word " * 2_000)
    async with AsyncRuntime(meters=meters) as rt:
        run = rt.run("tokens", budget=Budget(tokens=1_000))
        with pytest.raises(BudgetExceeded) as caught:
            await governed_run(run, "Summarize.", source=big, config=local(emu))
        refusal = run.store.get(caught.value.refusal_id)
        small = await governed_run(run, "Hi?", config=local(emu))
    assert refusal.payload["meter"] == "tokens"
    assert refusal.payload["estimated"] == "true"
    assert small.text  # a small request still fits the budget
    assert len(emu.requests_for("local.chat.completions")) == 1


def test_estimator_counts_the_request_text() -> None:
    payload = {
        "environment": {"instructions": "abcd", "sources": [{"bytes": 40}]},
        "input": {"content": "abcdefgh", "tool_results": [{"call_id": "c", "content": "x"}]},
    }
    tool_chars = len(json.dumps(payload["input"]["tool_results"]))
    assert PolluxTokenEstimator().estimate_input_tokens(payload) == -(-(52 + tool_chars) // 4)
    assert PolluxTokenEstimator(2).estimate_input_tokens({"input": {"content": "abc"}}) == 2
    assert PolluxTokenEstimator().estimate_input_tokens("not a payload") == 0
    with pytest.raises(ValueError):
        PolluxTokenEstimator(0)


async def test_fan_out_keeps_pollux_concurrency_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    in_flight: list[int] = [0]
    peak: list[int] = [0]
    execute = MockProvider.execute

    async def slow_execute(self: MockProvider, compiled: Any) -> Any:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        try:
            await asyncio.sleep(0.01)
            return await execute(self, compiled)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(MockProvider, "execute", slow_execute)
    config = Config(provider="openai", model="gpt-5-nano", use_mock=True, request_concurrency=2)
    async with AsyncRuntime() as rt:
        answers = await governed_run_many(
            rt.run("bound"), [f"Q{i}?" for i in range(6)], config=config
        )
    assert answers.status == "ok"
    assert peak[0] == 2


async def test_cost_meter_prices_the_normalized_usage() -> None:
    prices = {"gpt-5-nano": {"input_per_1m": "1", "output_per_1m": "4"}}
    async with AsyncRuntime(meters=[StepMeter(), TokenMeter(), CostMeter(prices)]) as rt:
        run = rt.run("usd", budget=Budget(usd="1"))
        answer = await governed_run(run, "Price me.", config=MOCK)
        node = run.cursor
    usage = answer.usage
    expected = Decimal(usage.input_tokens) * 1 + Decimal(usage.output_tokens) * 4
    assert node.meta["charges"]["usd"] == float(expected / 1_000_000)
    assert run.report(exact=True)["spent"]["usd"] == str(expected / 1_000_000)


def test_a_sync_runtime_records_and_replays_through_asyncio_run(
    tmp_path: Path, mock_calls: list[str]
) -> None:
    db = tmp_path / "runs.db"
    with Runtime(db) as rt:
        run = rt.run("sync", budget=Budget(steps=5))
        recorded = asyncio.run(governed_run_many(run, QUESTIONS, config=MOCK))
        single = asyncio.run(governed_run(run, "And one more?", config=MOCK))
        assert run.report()["spent"]["steps"] == 4
        assert run.cursor.payload["api"] == "run"
    mock_calls.clear()
    with Runtime(db, mode="replay") as rt:
        run = rt.run("sync", budget=Budget(steps=5))
        replayed = asyncio.run(governed_run_many(run, QUESTIONS, config=MOCK))
        again = asyncio.run(governed_run(run, "And one more?", config=MOCK))
    assert answer(replayed) == answer(recorded)
    assert answer(again) == answer(single)
    assert mock_calls == []


# -- failures --------------------------------------------------------------------------------------


async def test_failed_calls_are_recorded_charged_and_kept_out_of_results(emu: Emulator) -> None:
    emu.script("local.chat.completions", ErrorResponse(500, "boom"))
    config = local(emu)
    async with AsyncRuntime() as rt:
        run = rt.run("fail")
        answers = await governed_run_many(run, ["First?", "Second?"], config=config)
        failed = [o for o in answers.outputs if o.failed]
        notes = [n for n in run.store.children(run.root_id) if n.kind.value == "note"]
        calls = run.cursor.payload["calls"]
        with pytest.raises(APIError):
            emu.script("local.chat.completions", ErrorResponse(500, "boom again"))
            await governed_run(run, "Third?", config=config)
        report = run.report()
    assert answers.status == "partial" and len(failed) == 1
    assert failed[0].diagnostics.error is not None
    assert failed[0].diagnostics.error["type"] == "APIError"
    assert calls[[o.failed for o in answers.outputs].index(True)] is None
    assert sum(c is None for c in calls) == 1
    failures = [n for n in notes if n.payload.get("event") == "call_failed"]
    assert len(failures) == 1 and failures[0].meta["charges"]["steps"] == 1
    assert report["spent"]["steps"] == 3  # one answer and two failed dispatches


async def test_invalid_arguments_are_rejected_before_anything_is_recorded() -> None:
    async with AsyncRuntime() as rt:
        run = rt.run("bad")
        with pytest.raises(ConfigurationError):
            await governed_run(run, "", config=MOCK)
        with pytest.raises(ConfigurationError):
            await governed_run(run, "Hi", config=MOCK, temperature=-1)
        with pytest.raises(ConfigurationError):
            await governed_run_many(run, [], config=MOCK)
        with pytest.raises(ConfigurationError):
            await governed_run(run, "Hi", config=MOCK, environment=Environment(), instructions="x")
        with pytest.raises(TypeError, match="pollard run"):
            await governed_run(object(), "Hi", config=MOCK)  # type: ignore[arg-type]
        # The same front-door rules as pollux: no unordered prompts, no bare Source as sources.
        with pytest.raises(ConfigurationError, match="ordered sequence") as unordered:
            await governed_run_many(run, {"A?", "B?"}, config=MOCK)  # type: ignore[arg-type]
        assert unordered.value.hint
        with pytest.raises(ConfigurationError, match="got one Source") as single:
            await governed_run_many(run, ["A?"], sources=DOC, config=MOCK)  # type: ignore[arg-type]
        assert single.value.hint
        assert run.store.children(run.root_id) == []


# -- streaming -------------------------------------------------------------------------------------


async def test_stream_events_are_re_emitted_on_replay(
    tmp_path: Path, mock_calls: list[str]
) -> None:
    db = tmp_path / "runs.db"
    env = Environment(instructions="Be brief.")
    async with AsyncRuntime(db) as rt:
        live = [e async for e in governed_stream(rt.run("s"), env, Input("Tell me"), config=MOCK)]
    assert mock_calls == ["stream"]
    mock_calls.clear()
    async with AsyncRuntime(db, mode="replay") as rt:
        again = [e async for e in governed_stream(rt.run("s"), env, Input("Tell me"), config=MOCK)]
    assert mock_calls == []
    assert live[0].type == "start" and live[-1].type == "done"
    assert sum(e.type == "text_delta" for e in live) > 1
    assert answer(again) == answer(live)
    assert live[-1].output is not None
    assert "".join(e.text for e in live if e.type == "text_delta") == live[-1].output.text


async def test_closing_a_stream_early_records_the_cancelled_dispatch() -> None:
    async with AsyncRuntime() as rt:
        run = rt.run("early")
        events = governed_stream(run, Environment(), Input("Tell me a long story"), config=MOCK)
        first = await events.__anext__()
        await events.aclose()
        notes = [n for n in run.store.children(run.root_id) if n.kind.value == "note"]
    assert first.type == "start"
    assert [n.payload["event"] for n in notes] == ["call_cancelled"]
    assert notes[0].meta["charges"]["steps"] == 1  # the dispatch is charged at its estimate


# -- tool loop -------------------------------------------------------------------------------------


async def _tool_loop(run: Any, config: Config) -> list[Any]:
    env = Environment(instructions="Use the tool.", tools=[FORECAST])
    turn = await governed_interact(run, env, Input("Weather in Paris?"), config=config)
    outputs = [turn]
    while turn.tool_calls:
        results = [
            ToolResult(call_id=call.id, content=f"sunny in {call.arguments_dict().get('city')}")
            for call in turn.tool_calls
        ]
        turn = await governed_interact(
            run, env, Input(continuation=turn.continuation, tool_results=results), config=config
        )
        outputs.append(turn)
    return outputs


async def test_tool_loop_with_continuation_is_recorded_and_replayed(
    tmp_path: Path, mock_calls: list[str]
) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        run = rt.run("tools")
        recorded = await _tool_loop(run, MOCK)
        chain = [run.cursor.parent, run.cursor_id]
    assert len(recorded) == 2 and recorded[0].tool_calls and recorded[1].text
    assert len(mock_calls) == 2
    mock_calls.clear()
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("tools")
        replayed = await _tool_loop(run, MOCK)
        second = run.cursor
    assert mock_calls == []
    assert answer(replayed) == answer(recorded)
    assert replayed[0].continuation == recorded[0].continuation
    assert [second.parent, second.id] == chain
    assert "continuation" in second.payload["input"]  # a digest, not the transcript
    assert len(second.payload["input"]["continuation"]) == 64


async def test_wire_path_through_the_openai_emulator_is_recorded(
    tmp_path: Path, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
    config = Config(provider="openai", model="gpt-5-nano", api_key="offline", retry=NO_RETRY)
    emu.script(
        "openai.responses",
        Reply(tool_calls=[ScriptedToolCall("get_forecast", {"city": "Paris"})]),
        Reply("Paris: sunny."),
    )
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        recorded = await _tool_loop(rt.run("wire"), config)
    assert [o.text for o in recorded] == ["", "Paris: sunny."]
    assert len(emu.requests_for("openai.responses")) == 2
    assert recorded[1].usage.input_tokens > 0
    emu.clear_requests()
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("wire")
        replayed = await _tool_loop(run, config)
        node = run.cursor
    assert emu.requests == []
    assert answer(replayed) == answer(recorded)
    assert node.result["usage"]["input_tokens"] == recorded[1].usage.input_tokens
    assert answer(output_from_node(node)) == answer(recorded[1])
    assert output_from_node(node).metrics.duration_s == node.meta["duration_s"]
    attributes = node_attributes(node)
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "gpt-5-nano"
    assert attributes["gen_ai.usage.input_tokens"] == recorded[1].usage.input_tokens


async def test_fan_out_over_a_pdf_uploads_it_once_and_replay_uploads_nothing(
    tmp_path: Path, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
    config = Config(provider="openai", model="gpt-5-nano", api_key="offline", retry=NO_RETRY)
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4\n" + b"0" * 2048)
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        run = rt.run("pdf", budget=Budget(steps=10))
        recorded = await governed_run_many(
            run, QUESTIONS, sources=[Source.from_file(pdf)], config=config
        )
        steps = model_calls(rt.store, run.root_id)
    assert recorded.status == "ok"
    routes = [r.route for r in emu.requests]
    assert routes.count("openai.files.create") == 1
    assert routes.count("openai.responses.create") == len(QUESTIONS)
    assert routes[-1] == "openai.files.delete"
    assert len(steps) == len(QUESTIONS)
    emu.clear_requests()
    async with AsyncRuntime(db, mode="replay") as rt:
        replayed = await governed_run_many(
            rt.run("pdf"), QUESTIONS, sources=[Source.from_file(pdf)], config=config
        )
    assert emu.requests == []
    assert replayed.answers == recorded.answers


@pytest.mark.parametrize(
    ("provider", "model", "env_var", "upload_route"),
    [
        ("anthropic", "claude-haiku-4-5", "ANTHROPIC_BASE_URL", "anthropic.files.upload"),
        ("gemini", "gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL", "gemini.files.upload"),
    ],
)
async def test_fan_out_over_a_pdf_uploads_it_once_on_the_other_files_apis(
    tmp_path: Path,
    emu: Emulator,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    model: str,
    env_var: str,
    upload_route: str,
) -> None:
    monkeypatch.setenv(env_var, emu.base_url(provider))
    config = Config(provider=provider, model=model, api_key="offline", retry=NO_RETRY)  # type: ignore[arg-type]
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4\n" + b"0" * (600 * 1024))  # above the inline limits
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        run = rt.run("pdf", budget=Budget(steps=10))
        recorded = await governed_run_many(
            run, QUESTIONS, sources=[Source.from_file(pdf)], config=config
        )
        steps = model_calls(rt.store, run.root_id)
    assert recorded.status == "ok", recorded.errors
    # One upload (Gemini's resumable protocol: a start request, then the bytes under its id).
    starts = [r for r in emu.requests if r.route == upload_route and "upload_id" not in r.query]
    assert len(starts) == 1
    assert len(steps) == len(QUESTIONS)
    emu.clear_requests()
    async with AsyncRuntime(db, mode="replay") as rt:
        replayed = await governed_run_many(
            rt.run("pdf"), QUESTIONS, sources=[Source.from_file(pdf)], config=config
        )
    assert emu.requests == []
    assert replayed.answers == recorded.answers


async def test_recordings_do_not_depend_on_the_server_address(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with Emulator() as first:
        async with AsyncRuntime(db) as rt:
            recorded = await governed_run_many(rt.run("addr"), QUESTIONS, config=local(first))
        assert len(first.requests_for("local.chat.completions")) == 3
    with Emulator() as second:
        async with AsyncRuntime(db, mode="replay") as rt:
            replayed = await governed_run_many(rt.run("addr"), QUESTIONS, config=local(second))
        assert second.requests == []
    assert answer(replayed) == answer(recorded)


# -- structured output -----------------------------------------------------------------------------


class Answer(BaseModel):
    answer: str
    confidence: int


async def test_structured_output_is_rebuilt_into_the_model_on_replay(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        live = await governed_run(rt.run("schema"), "Rate it.", config=MOCK, output=Answer)
    async with AsyncRuntime(db, mode="replay") as rt:
        again = await governed_run(rt.run("schema"), "Rate it.", config=MOCK, output=Answer)
    assert isinstance(live.structured, Answer) and isinstance(again.structured, Answer)
    assert again.structured == live.structured
    assert answer(again) == answer(live)


async def test_structured_fan_out_replays_into_the_model(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        live = await governed_run_many(rt.run("many"), QUESTIONS, config=MOCK, output=Answer)
    async with AsyncRuntime(db, mode="replay") as rt:
        again = await governed_run_many(rt.run("many"), QUESTIONS, config=MOCK, output=Answer)
    assert all(isinstance(value, Answer) for value in again.structured)
    assert again.structured == live.structured
    assert answer(again) == answer(live)


async def test_streamed_tool_loop_continues_on_replay(
    tmp_path: Path, mock_calls: list[str]
) -> None:
    env = Environment(instructions="Use the tool.", tools=[FORECAST])

    async def loop(run: Any) -> list[str]:
        turn = Input("Weather in Paris?")
        types: list[str] = []
        while True:
            done = None
            async for event in governed_stream(run, env, turn, config=MOCK):
                types.append(event.type)
                done = event.output if event.type == "done" else done
            assert done is not None
            if not done.tool_calls:
                return [*types, done.text]
            results = [ToolResult(call_id=c.id, content="sunny") for c in done.tool_calls]
            turn = Input(continuation=done.continuation, tool_results=results)

    db = tmp_path / "runs.db"
    async with AsyncRuntime(db) as rt:
        recorded = await loop(rt.run("stream-tools"))
    assert mock_calls == ["stream", "stream"]
    assert "tool_call" in recorded and recorded[-1].startswith("Mock answer using the tool")
    mock_calls.clear()
    async with AsyncRuntime(db, mode="replay") as rt:
        assert await loop(rt.run("stream-tools")) == recorded
    assert mock_calls == []


@settings(max_examples=25, deadline=None)
@given(
    temperature=st.floats(min_value=0, max_value=2, allow_nan=False),
    max_tokens=st.integers(min_value=1, max_value=10_000),
    options=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(), max_size=3),
)
def test_identity_is_a_function_of_the_request(
    temperature: float, max_tokens: int, options: dict[str, int]
) -> None:
    env = Environment(instructions="Be brief.", sources=[DOC])

    def payload(**changes: Any) -> dict[str, Any]:
        requirements = OutputRequirements(
            temperature=changes.get("temperature", temperature),
            max_tokens=changes.get("max_tokens", max_tokens),
            provider_options={"openai": changes.get("options", options)},
        )
        return bridge._payload("run", MOCK, env, Input("Q?"), requirements)

    same = payload(options=dict(reversed(list(options.items()))))
    assert node_id("model_call", None, same) == node_id("model_call", None, payload())
    assert node_id("model_call", None, payload(max_tokens=max_tokens + 1)) != node_id(
        "model_call", None, payload()
    )
    assert node_id("model_call", None, payload(temperature=temperature + 0.5)) != node_id(
        "model_call", None, payload()
    )
    if temperature.is_integer():  # 1.0 and 1 are one identity in pollard's float form
        assert node_id("model_call", None, payload(temperature=int(temperature))) == node_id(
            "model_call", None, payload()
        )


def test_file_sources_are_identified_by_content_not_directory(tmp_path: Path) -> None:
    def payload(directory: str, text: str) -> dict[str, Any]:
        path = tmp_path / directory / "notes.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        env = Environment(sources=[Source.from_file(path)])
        return bridge._payload("run", MOCK, env, Input("Q?"), OutputRequirements())

    here, there = payload("a", "same notes"), payload("b", "same notes")
    assert node_id("model_call", None, here) == node_id("model_call", None, there)
    changed = payload("c", "other notes")
    assert node_id("model_call", None, changed) != node_id("model_call", None, here)


# -- identity --------------------------------------------------------------------------------------

_IDENTITY_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pollard import AsyncRuntime
    from pollard.adapters.pollux import governed_run
    from pollux import Config, Source

    async def main():
        config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
        async with AsyncRuntime() as rt:
            run = rt.run("identity")
            await governed_run(
                run, "Same question", source=Source.from_text("same context"), config=config,
                temperature=float(sys.argv[1]), max_tokens=64,
            )
            print(run.cursor_id)

    asyncio.run(main())
    """
)


def _node_id(temperature: str, seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run(
        [sys.executable, "-c", _IDENTITY_SCRIPT, temperature],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    return result.stdout.strip()


def test_same_request_same_node_id_across_processes() -> None:
    first = _node_id("0.2", "1")
    assert len(first) == 64
    assert _node_id("0.2", "2") == first
    assert _node_id("0.7", "1") != first


async def test_identity_payload_uses_the_canonical_float_form() -> None:
    async with AsyncRuntime() as rt:
        run = rt.run("floats")
        await governed_run(run, "Same", config=MOCK, temperature=1.0)
        one = run.cursor
        run.checkout(run.root_id)
        await governed_run(run, "Same", config=MOCK, temperature=1)
        other = run.cursor
        run.checkout(run.root_id)
        await governed_run(run, "Same", config=MOCK, temperature=0.1, top_p=0.9)
        floats = run.cursor
    assert one.payload["requirements"] == {"temperature": 1.0}
    assert other.id == one.id  # 1.0 and 1 are one identity, so the repeat is the same node
    assert floats.payload["requirements"] == {"temperature": 0.1, "top_p": 0.9}
    assert floats.id != one.id


def test_module_doctests_pass() -> None:
    failures, tried = doctest.testmod(bridge)
    assert tried > 0 and failures == 0
