"""The mock provider through the public entry points: offline, deterministic, schema-valid."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

import pollux
from pollux import (
    Config,
    ConfigurationError,
    Environment,
    Input,
    Output,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
)
from pollux.providers.mock import fake_from_schema

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


class Verdict(BaseModel):
    label: str
    score: int
    tags: list[str]


def _timeless(output: Output) -> Output:
    return dataclasses.replace(output, metrics=dataclasses.replace(output.metrics, duration_s=0.0))


async def test_run_many_keeps_order_and_reports_usage(mock_config: Config) -> None:
    source = Source.from_text("The sky is blue. " * 50)
    prompts = [f"Question {i}?" for i in range(5)]
    result = await pollux.run_many(prompts, sources=[source], config=mock_config)
    assert result.status == "ok"
    assert len(result.outputs) == 5
    for prompt, answer in zip(prompts, result.answers, strict=True):
        assert answer.endswith(prompt)
        assert "1 source" in answer
    assert result.prompt_indexes == (0, 1, 2, 3, 4)
    assert result.usage.input_tokens > 5 * len("The sky is blue. " * 50) // 4 - 5
    assert all(o.usage.output_tokens > 0 for o in result.outputs)


async def test_mock_is_deterministic(mock_config: Config) -> None:
    first = await pollux.run("Same question", config=mock_config)
    second = await pollux.run("Same question", config=mock_config)
    assert first.text == second.text
    other = await pollux.run("Other question", config=mock_config)
    assert other.text != first.text


async def test_structured_output_validates_against_the_model(mock_config: Config) -> None:
    out = await pollux.run("Classify", config=mock_config, output=Verdict)
    assert isinstance(out.structured, Verdict)
    assert out.structured.tags and isinstance(out.structured.score, int)
    assert "structured_error" not in out.diagnostics.raw
    assert out.diagnostics.raw["response"]["artifacts"] == {"mock": True}


def test_fake_from_schema_follows_refs_enums_and_bounds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {"enum": ["a", "b"]},
            "n": {"type": "integer", "minimum": 3},
            "child": {"$ref": "#/$defs/Child"},
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "$defs": {"Child": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
    }
    value = fake_from_schema(schema)
    assert value == {"kind": "a", "n": 3, "child": {"ok": False}, "maybe": "mock"}


async def test_tool_loop_with_continuation(mock_config: Config) -> None:
    env = Environment(instructions="Be brief.", tools=[WEATHER])
    first = await pollux.interact(env, Input("Weather in Paris?"), config=mock_config)
    assert [c.name for c in first.tool_calls] == ["get_weather"]
    assert first.tool_calls[0].arguments_dict() == {"city": "mock"}
    assert first.continuation is not None
    results = [ToolResult(call_id=c.id, content="sunny, 21C") for c in first.tool_calls]
    second = await pollux.interact(
        env, Input(continuation=first.continuation, tool_results=results), config=mock_config
    )
    assert "sunny, 21C" in second.text
    assert not second.tool_calls
    # The continuation carries the transcript once; it is bound to the provider.
    other = Config(provider="anthropic", model="claude-haiku-4-5", use_mock=True)
    with pytest.raises(ConfigurationError, match="does not match"):
        await pollux.interact(
            env, Input(continuation=second.continuation, content="More?"), config=other
        )


async def test_stream_done_output_equals_interact(mock_config: Config) -> None:
    env = Environment(sources=[Source.from_text("context")])
    item = Input("Tell me a story about streams")
    expected = await pollux.interact(env, item, config=mock_config, reasoning_effort="low")
    events = [e async for e in pollux.stream(env, item, config=mock_config, reasoning_effort="low")]
    types = [e.type for e in events]
    assert types[0] == "start" and types[-1] == "done"
    assert types.index("reasoning_delta") < types.index("text_delta") < types.index("finish")
    assert "".join(e.text for e in events if e.type == "text_delta") == expected.text
    done = events[-1].output
    assert done is not None
    assert _timeless(done) == _timeless(expected)


async def test_stream_tool_calls_match_interact(mock_config: Config) -> None:
    env = Environment(tools=[WEATHER])
    expected = await pollux.interact(env, Input("Weather?"), config=mock_config)
    events = [e async for e in pollux.stream(env, Input("Weather?"), config=mock_config)]
    calls = [e.tool_call for e in events if e.type == "tool_call"]
    assert tuple(calls) == expected.tool_calls
    assert [e.type for e in events].count("tool_call_delta") == 2
    done = events[-1].output
    assert done is not None and _timeless(done) == _timeless(expected)


async def test_max_tokens_truncation_is_reported(mock_config: Config) -> None:
    out = await pollux.run("A long question " * 10, config=mock_config, max_tokens=2)
    assert out.metrics.finish_reason == "length"
    assert out.metrics.completion_status == "truncated"


async def test_session_closes_and_rejects_use_after_close(mock_config: Config) -> None:
    async with Session(mock_config) as session:
        out = await session.interact(Environment(), Input("hi"))
        assert out.text
    assert session.closed
    with pytest.raises(ConfigurationError, match="closed"):
        await session.interact(Environment(), Input("hi"))
    with pytest.raises(ConfigurationError, match="closed"):
        await session.run_many(["a"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tool_choice": "auto"}, "tool_choice was given without tools"),
        ({"provider_options": {"nope": {"x": 1}}}, "unknown provider key"),
        ({"instructions": "x", "environment": Environment()}, "cannot be combined"),
    ],
)
async def test_bad_combinations_raise_before_any_call(
    mock_config: Config, kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        await pollux.run("hi", config=mock_config, **kwargs)  # type: ignore[arg-type]
    assert info.value.hint


async def test_prompts_are_validated(mock_config: Config) -> None:
    with pytest.raises(ConfigurationError, match="empty"):
        await pollux.run_many(["ok", "  "], config=mock_config)
    with pytest.raises(ConfigurationError, match="at least one prompt"):
        await pollux.run_many([], config=mock_config)
    with pytest.raises(ConfigurationError, match="source= or sources="):
        await pollux.run(
            "x",
            source=Source.from_text("a"),
            sources=[Source.from_text("b")],
            config=mock_config,
        )


async def test_module_level_calls_reuse_one_session(mock_config: Config) -> None:
    from pollux._api import _shared_session

    first = _shared_session(mock_config)
    await pollux.run("hi", config=mock_config)
    assert _shared_session(mock_config) is first
    assert first._provider is not None
    provider = first._provider
    await pollux.run_many(["a", "b"], config=mock_config)
    assert first._provider is provider


async def test_mock_check_ready_is_honest(mock_config: Config) -> None:
    status = await pollux.check_ready(mock_config)
    assert status.ready and not status.model_verified
    assert "mock" in status.message
