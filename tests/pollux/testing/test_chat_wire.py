"""Chat Completions ("local" and "openrouter") through the official openai SDK."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import jsonschema
import openai
import pytest

from pollux.testing import Emulator, Reply, ToolCall

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 2}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


def _client(emu: Emulator, wire: str = "local") -> openai.OpenAI:
    return openai.OpenAI(base_url=emu.base_url(wire), api_key="sk-test", max_retries=0)


def test_plain_completion_echoes_the_prompt_and_counts_tokens(emulator: Emulator) -> None:
    with _client(emulator) as client:
        answer = client.chat.completions.create(
            model="llama3", messages=[{"role": "user", "content": "What is two plus two?"}]
        )
    assert answer.choices[0].message.content == "Emulated reply to: What is two plus two?"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 6  # What is two plus two ?
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    request = emulator.last_request
    assert request.route == "local.chat.completions"
    assert request.json["messages"][0]["content"] == "What is two plus two?"
    assert request.headers["authorization"] == "Bearer sk-test"


def test_image_and_audio_parts_reach_the_model(emulator: Emulator) -> None:
    with _client(emulator) as client:
        answer = client.chat.completions.create(
            model="llava",
            messages=[
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Describe these"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                        {
                            "type": "input_audio",
                            "input_audio": {"data": "UklGRg==", "format": "wav"},
                        },
                    ],
                },
            ],
        )
    assert (
        answer.choices[0].message.content == "Emulated reply to: Describe these [1 image, 1 audio]"
    )
    assert answer.usage is not None and answer.usage.prompt_tokens == 3 + 2 + 85 + 50


def test_unknown_part_type_is_a_bad_request(emulator: Emulator) -> None:
    with _client(emulator) as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": [{"type": "video", "video": {}}]}],
        )
    assert info.value.param == "messages[0].content[0].type"


def test_tool_call_round_trip(emulator: Emulator) -> None:
    with _client(emulator) as client:
        first = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Use get_weather for Paris"}],
            tools=[WEATHER_TOOL],
        )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls is not None
        call = choice.message.tool_calls[0]
        assert call.type == "function"
        assert call.function.name == "get_weather"
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])
        second = client.chat.completions.create(
            model="m",
            messages=[
                {"role": "user", "content": "Use get_weather for Paris"},
                choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"},
            ],
            tools=[WEATHER_TOOL],
        )
    assert second.choices[0].message.content == "Tool results: sunny, 21C"
    assert second.choices[0].finish_reason == "stop"


def test_missing_tool_message_is_rejected_like_the_api(emulator: Emulator) -> None:
    with _client(emulator) as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="m",
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "and?"},
            ],
        )
    assert "call_1" in info.value.message


def test_scripted_tool_calls_and_text(emulator: Emulator) -> None:
    emulator.script(
        "local.chat",
        Reply(tool_calls=[ToolCall("lookup", {"q": "x"}, call_id="call_fixed")]),
        Reply("final answer"),
    )
    with _client(emulator) as client:
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}]
        )
        second = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "b"}]
        )
    calls = first.choices[0].message.tool_calls
    assert calls is not None and calls[0].id == "call_fixed"
    assert calls[0].function.arguments == '{"q":"x"}'
    assert second.choices[0].message.content == "final answer"
    emulator.assert_consumed()


def test_json_schema_response_format_yields_valid_json(emulator: Emulator) -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 10},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 2},
            "score": {"type": "number", "minimum": 3.5, "maximum": 4},
            "kind": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/kind"}]},
        },
        "required": ["title", "tags", "score", "kind"],
        "additionalProperties": False,
        "$defs": {"kind": {"type": "string", "enum": ["x", "y"]}},
    }
    with _client(emulator) as client:
        answer = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "extract"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "thing", "schema": schema, "strict": True},
            },
        )
    content = answer.choices[0].message.content
    assert content is not None
    jsonschema.validate(json.loads(content), schema)


def test_strict_schema_that_is_not_strict_is_rejected(emulator: Emulator) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    with _client(emulator) as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": schema, "strict": True},
            },
        )
    assert "additionalProperties" in info.value.message


def test_streaming_with_usage_and_reasoning_content(emulator: Emulator) -> None:
    emulator.script("local", Reply("streamed words arrive in pieces", reasoning="thinking hard"))
    with _client(emulator) as client:
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, reasoning, finish, usage = "", "", None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
                finish = choice.finish_reason or finish
    assert text == "streamed words arrive in pieces"
    assert reasoning == "thinking hard"
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens > 0


def test_streamed_tool_call_fragments_reassemble(emulator: Emulator) -> None:
    emulator.script("local", Reply(tool_calls=[ToolCall("search", {"query": "a long query text"})]))
    with _client(emulator) as client:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], stream=True
        )
        names, args, ids = [], "", []
        for chunk in stream:
            for delta in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
                if delta.id:
                    ids.append(delta.id)
                if delta.function and delta.function.name:
                    names.append(delta.function.name)
                if delta.function and delta.function.arguments:
                    args += delta.function.arguments
    assert names == ["search"] and len(ids) == 1
    assert json.loads(args) == {"query": "a long query text"}


async def test_async_client_streams_and_completes(emulator: Emulator) -> None:
    async with openai.AsyncOpenAI(base_url=emulator.base_url("local"), api_key="k") as client:
        answer = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "async hello"}]
        )
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "async stream"}], stream=True
        )
        pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert answer.choices[0].message.content == "Emulated reply to: async hello"
    assert "".join(pieces) == "Emulated reply to: async stream"


def test_max_tokens_truncates_with_finish_reason_length(emulator: Emulator) -> None:
    with _client(emulator) as client:
        answer = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "one two three four five"}],
            max_tokens=3,
        )
    assert answer.choices[0].finish_reason == "length"
    assert answer.choices[0].message.content == "Emulated reply to"
    assert answer.usage is not None and answer.usage.completion_tokens == 3


def test_prefix_cache_reports_cached_tokens_on_repeat() -> None:
    with Emulator(cache_min_tokens=32, cache_block_tokens=16) as emu:
        long_prefix = " ".join(f"word{i}" for i in range(60))
        with _client(emu) as client:

            def ask(question: str) -> int:
                answer = client.chat.completions.create(
                    model="m",
                    messages=[
                        {"role": "system", "content": long_prefix},
                        {"role": "user", "content": question},
                    ],
                )
                assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
                return answer.usage.prompt_tokens_details.cached_tokens or 0

            assert ask("first question") == 0
            assert ask("second question") == 48  # 60 shared tokens, blocks of 32 + 16
            emu.advance(301)  # past the cache TTL
            assert ask("third question") == 0


def test_models_and_health(emulator: Emulator) -> None:
    with _client(emulator) as client:
        models = client.models.list()
        assert [m.id for m in models.data] == ["emulator-model"]
        assert client.models.retrieve("emulator-model").id == "emulator-model"
    health_url = emulator.base_url("local").rsplit("/", 1)[0] + "/health"
    with urllib.request.urlopen(health_url) as response:
        assert json.load(response) == {"status": "ok"}


def test_openrouter_wire_catalog_and_reasoning_field() -> None:
    with Emulator(models=["vendor/model-a"]) as emu:
        assert emu.base_url("openrouter").endswith("/openrouter/api/v1")
        with _client(emu, "openrouter") as client:
            models = client.models.list()
            entry = models.data[0].model_dump()
            assert entry["id"] == "vendor/model-a"
            assert "tools" in entry["supported_parameters"]
            answer = client.chat.completions.create(
                model="vendor/model-a",
                messages=[{"role": "user", "content": "hi"}],
                extra_body={"reasoning": {"effort": "low"}},
            )
            assert (answer.choices[0].message.model_extra or {}).get("reasoning")
            with pytest.raises(openai.NotFoundError):
                client.chat.completions.create(
                    model="other", messages=[{"role": "user", "content": "hi"}]
                )


def test_reply_structured_truncated_and_usage_overrides(emulator: Emulator) -> None:
    emulator.script(
        "local.chat.completions",
        Reply(structured={"answer": 42}),
        Reply("cut", truncated=True, input_tokens=1000, output_tokens=7, cached_tokens=512),
    )
    assert len(emulator.pending("local")) == 2
    assert emulator.pending("openai") == []
    with _client(emulator) as client:
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}]
        )
        second = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}]
        )
    assert json.loads(first.choices[0].message.content or "") == {"answer": 42}
    assert second.choices[0].finish_reason == "length"
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (1000, 7)
    assert second.usage.prompt_tokens_details.cached_tokens == 512
    emulator.on("local", lambda request: Reply("handled"))
    emulator.script("local", Reply("queued"))
    emulator.reset()
    assert emulator.pending() == [] and emulator.requests == []
    with _client(emulator) as client:
        third = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}]
        )
    assert third.choices[0].message.content == "Emulated reply to: q"


def test_json_object_mode_and_named_tool_choice(emulator: Emulator) -> None:
    with _client(emulator) as client:
        as_json = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "json please"}],
            response_format={"type": "json_object"},
        )
        forced = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "no tool named here"}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
        declined = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "get_weather is mentioned"}],
            tools=[WEATHER_TOOL],
            tool_choice="none",
        )
    assert json.loads(as_json.choices[0].message.content or "") == {
        "answer": "Emulated reply to: json please"
    }
    assert forced.choices[0].message.tool_calls is not None
    assert declined.choices[0].message.tool_calls is None
    assert len(emulator.requests_for("local.chat.completions")) == 3
