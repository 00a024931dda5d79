"""Request compilation for the Responses API: exact ``responses.create`` kwargs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pollux.errors import ConfigurationError
from pollux.interaction.messages import Message
from pollux.interaction.tools import ToolCall, ToolDeclaration, ToolResult
from pollux.providers.openai.compile import (
    SCHEMA_NAME,
    compile_request,
    compile_tool,
    compile_tool_choice,
    compile_tool_result,
    strict_schema,
    validate_options,
)

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)


def test_minimal_request_is_one_user_message() -> None:
    assert compile_request(
        model="gpt-5-nano", instructions=None, source_parts=(), content="Hi"
    ) == {
        "model": "gpt-5-nano",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
    }


def test_full_first_turn_snapshot() -> None:
    sources = ({"type": "input_file", "file_id": "file-1"}, {"type": "input_text", "text": "ctx"})
    kwargs = compile_request(
        model="gpt-5",
        instructions="Be brief.",
        source_parts=sources,
        content="Summarize.",
        tools=(WEATHER,),
        output_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
        temperature=0.2,
        top_p=0.9,
        max_tokens=512,
        reasoning_effort="low",
        tool_choice={"name": "get_weather"},
        provider_options={"service_tier": "flex"},
        stream=True,
    )
    assert kwargs == {
        "model": "gpt-5",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_file", "file_id": "file-1"},
                    {"type": "input_text", "text": "ctx"},
                    {"type": "input_text", "text": "Summarize."},
                ],
            }
        ],
        "instructions": "Be brief.",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {
                    "type": "object",
                    # The optional "unit" stays optional: required, but nullable.
                    "properties": {
                        "city": {"type": "string"},
                        "unit": {"type": ["string", "null"]},
                    },
                    "required": ["city", "unit"],
                    "additionalProperties": False,
                },
                "strict": True,
            }
        ],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {
            "format": {
                "type": "json_schema",
                "name": SCHEMA_NAME,
                "schema": {
                    "type": "object",
                    "properties": {"a": {"type": ["integer", "null"]}},
                    "required": ["a"],
                    "additionalProperties": False,
                },
                "strict": True,
            }
        },
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 512,
        "reasoning": {"effort": "low", "summary": "auto"},
        "service_tier": "flex",
        "stream": True,
    }


def test_continuation_sends_only_tool_outputs_and_new_text() -> None:
    kwargs = compile_request(
        model="gpt-5",
        instructions="Be brief.",
        source_parts=({"type": "input_text", "text": "a very long source"},),
        content="And now?",
        tools=(WEATHER,),
        previous_response_id="resp_1",
        tool_results=(
            ToolResult(call_id="call_1", content='{"temp": 21}'),
            ToolResult(call_id="call_2", content="city unknown", is_error=True),
        ),
    )
    # Sources live server-side with resp_1: they are not sent again. Instructions and tools
    # are not carried over by previous_response_id, so they are.
    assert kwargs["previous_response_id"] == "resp_1"
    assert kwargs["instructions"] == "Be brief."
    assert [t["name"] for t in kwargs["tools"]] == ["get_weather"]
    assert kwargs["input"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21}'},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": '{"is_error": true, "content": "city unknown"}',
        },
        {"role": "user", "content": [{"type": "input_text", "text": "And now?"}]},
    ]
    assert "a very long source" not in json.dumps(kwargs)


def test_tool_result_only_continuation_has_no_user_message() -> None:
    kwargs = compile_request(
        model="m",
        instructions=None,
        source_parts=(),
        content=None,
        previous_response_id="resp_9",
        tool_results=(ToolResult(call_id="c", content="ok"),),
    )
    assert kwargs["input"] == [{"type": "function_call_output", "call_id": "c", "output": "ok"}]


def test_history_replays_after_the_sources() -> None:
    call = ToolCall.from_text(id="call_1", name="get_weather", arguments_text='{"city":"Oslo"}')
    history = [
        Message(role="user", content="Weather in Oslo?"),
        Message(role="assistant", content="", tool_calls=[call]),
        Message(role="tool", content="21C", tool_call_id="call_1"),
        Message(role="assistant", content="It is 21C."),
    ]
    kwargs = compile_request(
        model="m",
        instructions=None,
        source_parts=({"type": "input_text", "text": "SRC"},),
        content="Thanks!",
        history=history,
    )
    assert kwargs["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "SRC"}]},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "21C"},
        {"role": "assistant", "content": "It is 21C."},
        {"role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]},
    ]


def test_tool_results_without_prior_turn_are_rejected() -> None:
    with pytest.raises(ConfigurationError) as info:
        compile_request(
            model="m",
            instructions=None,
            source_parts=(),
            content=None,
            tool_results=(ToolResult(call_id="c", content="x"),),
        )
    assert "continuation" in (info.value.hint or "")


def test_is_error_is_forwarded_never_dropped() -> None:
    ok = compile_tool_result(ToolResult(call_id="c1", content="fine"))
    failed = compile_tool_result(ToolResult(call_id="c1", content="boom", is_error=True))
    assert ok["output"] == "fine"
    assert json.loads(failed["output"]) == {"is_error": True, "content": "boom"}


def test_strict_schema_replaces_partial_required_and_recurses() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "owner": {"$ref": "#/$defs/Item", "description": "who"},
        },
        "required": ["items"],
        "$defs": {
            "Item": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
    }
    original = json.dumps(schema, sort_keys=True)
    strict = strict_schema(schema)
    assert strict is not None
    assert json.dumps(schema, sort_keys=True) == original  # input untouched
    assert strict["required"] == ["items", "note", "owner"]
    assert strict["additionalProperties"] is False
    assert strict["$defs"]["Item"] == {
        "type": "object",
        "properties": {"x": {"type": ["number", "null"]}},
        "required": ["x"],
        "additionalProperties": False,
    }
    assert "default" not in strict["properties"]["note"]
    # Already nullable: kept as declared.
    assert strict["properties"]["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    # $ref with a sibling keyword is inlined (strict mode forbids siblings of $ref); the
    # optional property becomes nullable.
    assert strict["properties"]["owner"] == {
        "type": ["object", "null"],
        "properties": {"x": {"type": ["number", "null"]}},
        "required": ["x"],
        "additionalProperties": False,
        "description": "who",
    }
    assert strict["properties"]["items"]["items"] == {"$ref": "#/$defs/Item"}


def test_strict_schema_rejects_remote_refs() -> None:
    with pytest.raises(ConfigurationError):
        strict_schema({"properties": {"a": {"$ref": "http://x/s.json", "title": "A"}}})


def test_non_strict_tool_keeps_its_schema_and_empty_tool_gets_an_object() -> None:
    loose = ToolDeclaration(name="f", parameters={"type": "object"}, strict=False)
    assert compile_tool(loose) == {
        "type": "function",
        "name": "f",
        "parameters": {"type": "object"},
        "strict": False,
    }
    bare = compile_tool(ToolDeclaration(name="ping"))
    assert bare["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_tool_choice_mapping() -> None:
    assert compile_tool_choice("auto", ()) == "auto"
    assert compile_tool_choice("required", (WEATHER,)) == "required"
    assert compile_tool_choice({"name": "get_weather"}, (WEATHER,)) == {
        "type": "function",
        "name": "get_weather",
    }
    with pytest.raises(ConfigurationError):
        compile_tool_choice({"name": "nope"}, (WEATHER,))
    with pytest.raises(ConfigurationError):
        compile_tool_choice("sometimes", (WEATHER,))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"seed": 7}, "seed"),
        ({"reasoning_budget_tokens": 1024}, "reasoning_budget_tokens"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"provider_options": {"input": []}}, "'input'"),
    ],
)
def test_unsupported_options_are_rejected_with_a_hint(kwargs: dict[str, Any], needle: str) -> None:
    args: dict[str, Any] = {
        "seed": None,
        "reasoning_effort": None,
        "reasoning_budget_tokens": None,
        "provider_options": None,
    }
    args.update(kwargs)
    with pytest.raises(ConfigurationError) as info:
        validate_options(**args)
    assert needle in str(info.value)
    assert info.value.hint


def test_provider_options_may_not_overwrite_generated_keys() -> None:
    with pytest.raises(ConfigurationError) as info:
        compile_request(
            model="m",
            instructions=None,
            source_parts=(),
            content="x",
            max_tokens=5,
            provider_options={"max_output_tokens": 9},
        )
    assert "max_output_tokens" in str(info.value)


def test_provider_options_extend_the_objects_pollux_builds() -> None:
    kwargs = compile_request(
        model="m",
        instructions=None,
        source_parts=(),
        content="x",
        output_schema={"type": "object", "properties": {}},
        reasoning_effort="high",
        provider_options={
            "text": {"verbosity": "low"},
            "reasoning": {"summary": "detailed"},
            "include": ["reasoning.encrypted_content"],
        },
    )
    assert kwargs["text"]["verbosity"] == "low"
    assert kwargs["text"]["format"]["name"] == SCHEMA_NAME
    assert kwargs["reasoning"] == {"effort": "high", "summary": "detailed"}
    assert kwargs["include"] == ["reasoning.encrypted_content"]
    with pytest.raises(ConfigurationError, match=r"text\.format"):
        compile_request(
            model="m",
            instructions=None,
            source_parts=(),
            content="x",
            output_schema={"type": "object", "properties": {}},
            provider_options={"text": {"format": {"type": "text"}}},
        )


def test_hosted_tools_join_the_function_tools() -> None:
    kwargs = compile_request(
        model="m",
        instructions=None,
        source_parts=(),
        content="x",
        tools=(WEATHER,),
        provider_options={"tools": [{"type": "web_search"}]},
    )
    assert [t.get("name", t["type"]) for t in kwargs["tools"]] == ["get_weather", "web_search"]
    alone = compile_request(
        model="m",
        instructions=None,
        source_parts=(),
        content="x",
        provider_options={"tools": [{"type": "web_search"}]},
    )
    assert alone["tools"] == [{"type": "web_search"}]
    with pytest.raises(ConfigurationError, match="tools"):
        compile_request(
            model="m",
            instructions=None,
            source_parts=(),
            content="x",
            tools=(WEATHER,),
            provider_options={"tools": {"type": "web_search"}},
        )


def test_structured_output_root_must_be_an_object() -> None:
    with pytest.raises(ConfigurationError) as info:
        compile_request(
            model="m",
            instructions=None,
            source_parts=(),
            content="x",
            output_schema={"type": "array", "items": {"type": "string"}},
        )
    assert "object" in str(info.value)
    assert info.value.hint
