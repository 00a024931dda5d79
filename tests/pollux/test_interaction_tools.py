from __future__ import annotations

import pytest

from pollux import (
    ConfigurationError,
    ToolCall,
    ToolCallDelta,
    ToolCallParseError,
    ToolDeclaration,
    ToolResult,
)


def test_tool_declaration_defaults_and_validation() -> None:
    decl = ToolDeclaration(name="now")
    assert (decl.description, decl.parameters, decl.strict) == ("", {}, True)
    for kwargs in (
        {"name": ""},
        {"name": 3},
        {"name": "t", "description": 5},
        {"name": "t", "parameters": []},
        {"name": "t", "strict": "yes"},
        {"name": "t", "parameters": {"x": float("nan")}},
    ):
        with pytest.raises(ConfigurationError):
            ToolDeclaration(**kwargs)  # type: ignore[arg-type]


def test_tool_declaration_copies_parameters() -> None:
    params = {"type": "object", "properties": {"a": {"type": "string"}}}
    decl = ToolDeclaration(name="t", parameters=params)
    params["properties"]["a"]["type"] = "number"
    assert decl.parameters["properties"]["a"]["type"] == "string"


def test_tool_declaration_from_dict_flat_and_openai() -> None:
    flat = ToolDeclaration.from_dict(
        {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {"type": "object"},
            "strict": False,
        }
    )
    assert flat == ToolDeclaration("get_weather", "Weather", {"type": "object"}, False)
    nested = ToolDeclaration.from_dict(
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": {"type": "object"},
            },
        }
    )
    assert nested == ToolDeclaration("get_weather", "Weather", {"type": "object"}, True)
    loose = ToolDeclaration.from_dict(
        {"name": "x", "description": None, "parameters": "bad", "strict": 1}
    )
    assert loose == ToolDeclaration("x")


@pytest.mark.parametrize("data", [{}, {"name": ""}, {"function": {"description": "x"}}, [], "name"])
def test_tool_declaration_from_dict_errors(data: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        ToolDeclaration.from_dict(data)  # type: ignore[arg-type]
    assert info.value.hint


def test_tool_call_from_text_parses_once() -> None:
    call = ToolCall.from_text(id="c1", name="add", arguments_text='{"a": 1, "b": [2]}', index=0)
    assert call.arguments == {"a": 1, "b": [2]}
    assert call.arguments_error is None
    assert call.arguments_dict() == {"a": 1, "b": [2]}
    empty = ToolCall.from_text(id="c2", name="now")
    assert (empty.arguments, empty.arguments_error, empty.arguments_dict()) == (None, None, {})


def test_tool_call_malformed_arguments() -> None:
    call = ToolCall.from_text(id="c1", name="add", arguments_text='{"a": 1')
    assert call.arguments is None
    assert call.arguments_error and "not valid JSON" in call.arguments_error
    with pytest.raises(ToolCallParseError) as info:
        call.arguments_dict()
    err = info.value
    assert (err.tool_name, err.tool_call_id, err.arguments_text) == ("add", "c1", '{"a": 1')
    assert err.hint == call.arguments_error


def test_tool_call_non_object_arguments() -> None:
    call = ToolCall.from_text(id="c1", name="add", arguments_text="[1, 2]")
    assert call.arguments == [1, 2]
    with pytest.raises(ToolCallParseError, match="JSON object"):
        call.arguments_dict()


def test_tool_call_from_text_rejects_non_string_arguments() -> None:
    with pytest.raises(ConfigurationError):
        ToolCall.from_text(id="c", name="n", arguments_text={"a": 1})  # type: ignore[arg-type]


def test_tool_call_openai_round_trip() -> None:
    item = {
        "id": "call_1",
        "type": "function",
        "index": 2,
        "function": {"name": "f", "arguments": '{"x": 1}'},
    }
    call = ToolCall.from_openai(item)
    assert (call.id, call.name, call.index, call.arguments) == ("call_1", "f", 2, {"x": 1})
    assert call.provider_state == {"openai": item}
    assert call.to_openai() == item
    odd = ToolCall.from_openai({"function": "nope", "index": True})
    assert (odd.id, odd.name, odd.arguments_text, odd.index) == ("", "", "", None)
    dict_args = ToolCall.from_openai({"id": "c", "function": {"name": "f", "arguments": {"k": 1}}})
    assert dict_args.arguments == {"k": 1}


def test_tool_call_jsonable_round_trip() -> None:
    call = ToolCall.from_text(
        id="c",
        name="f",
        arguments_text='{"a":1}',
        index=1,
        provider_state={"gemini": {"sig": "abc"}},
    )
    data = call.to_jsonable()
    assert data == {
        "id": "c",
        "name": "f",
        "arguments_text": '{"a":1}',
        "index": 1,
        "provider_state": {"gemini": {"sig": "abc"}},
    }
    assert ToolCall.from_jsonable(data) == call
    bad = ToolCall.from_text(id="c", name="f", arguments_text="{")
    assert ToolCall.from_jsonable(bad.to_jsonable()) == bad


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"id": 1, "name": "f"},
        {"id": "c", "name": "f", "index": -1},
        {"id": "c", "name": "f", "provider_state": []},
        None,
    ],
)
def test_tool_call_from_jsonable_errors(data: object) -> None:
    with pytest.raises(ConfigurationError):
        ToolCall.from_jsonable(data)  # type: ignore[arg-type]


def test_tool_call_delta_defaults() -> None:
    delta = ToolCallDelta(index=0)
    assert (delta.id, delta.name, delta.arguments) == (None, None, "")


def test_tool_result_from_value() -> None:
    assert ToolResult.from_value(call_id="c", value="plain").content == "plain"
    assert (
        ToolResult.from_value(call_id="c", value={"b": "é", "a": 1}).content == '{"a": 1, "b": "é"}'
    )
    assert ToolResult.from_value(call_id="c", value=None).content == "null"
    with pytest.raises(ConfigurationError, match="JSON-serializable") as info:
        ToolResult.from_value(call_id="c", value={1, 2})  # type: ignore[arg-type]
    assert info.value.hint


def test_tool_result_to_jsonable_and_validation() -> None:
    assert ToolResult("c", "ok").to_jsonable() == {"call_id": "c", "content": "ok"}
    assert ToolResult("c", "bad", is_error=True).to_jsonable() == {
        "call_id": "c",
        "content": "bad",
        "is_error": True,
    }
    for args in (("", "x"), ("c", 5), ("c", "x", "yes")):
        with pytest.raises(ConfigurationError):
            ToolResult(*args)  # type: ignore[arg-type]
