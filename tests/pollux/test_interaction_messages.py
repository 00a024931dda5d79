from __future__ import annotations

import copy
import json
import pickle

import pytest

from pollux import (
    ConfigurationError,
    Continuation,
    Input,
    InternalError,
    Message,
    ToolCall,
    ToolResult,
)


def _call(**kw: object) -> ToolCall:
    return ToolCall.from_text(id="c1", name="f", arguments_text='{"a": 1}', **kw)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- Message


def test_valid_messages() -> None:
    assert Message("user", "hi").content == "hi"
    assistant = Message("assistant", tool_calls=[_call()])
    assert isinstance(assistant.tool_calls, tuple)
    assert Message("assistant", "text only").tool_calls == ()
    assert Message("tool", "42", tool_call_id="c1").tool_call_id == "c1"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "hi", "tool_call_id": "c"},
        {"role": "user", "content": "hi", "tool_calls": [_call()]},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "x", "tool_call_id": "c"},
        {"role": "tool", "content": "x"},
        {"role": "tool", "content": "x", "tool_call_id": " "},
        {"role": "tool", "content": "x", "tool_call_id": "c", "tool_calls": [_call()]},
        {"role": "user", "content": 5},
        {"role": "assistant", "tool_calls": ["not a call"]},
        {"role": "assistant", "tool_calls": "abc"},
        {"role": "assistant", "tool_calls": [_call(provider_state={"x": 1})]},
        {"role": "tool", "content": "x", "tool_call_id": 7},
    ],
)
def test_invalid_messages(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as info:
        Message(**kwargs)  # type: ignore[arg-type]
    assert info.value.hint


def test_system_role_hint_points_to_instructions() -> None:
    with pytest.raises(ConfigurationError) as info:
        Message("system", "x")  # type: ignore[arg-type]
    assert "Environment.instructions" in (info.value.hint or "")


def test_message_jsonable_round_trip() -> None:
    messages = [
        Message("user", "hi"),
        Message("assistant", "calling", tool_calls=(_call(index=0),)),
        Message("tool", '{"r": 1}', tool_call_id="c1"),
    ]
    for message in messages:
        data = json.loads(json.dumps(message.to_jsonable()))
        assert Message.from_jsonable(data) == message
    assert messages[0].to_jsonable() == {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"role": "bot"},
        {"role": "user", "content": 1},
        {"role": "assistant", "tool_calls": "x"},
        [],
        None,
    ],
)
def test_message_from_jsonable_errors(data: object) -> None:
    with pytest.raises(ConfigurationError):
        Message.from_jsonable(data)  # type: ignore[arg-type]


def test_openai_interop() -> None:
    openai_messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    parsed = [Message.from_openai(m) for m in openai_messages]
    assert parsed[0].content == "ab"
    assert parsed[1].tool_calls[0].name == "f"
    assert parsed[1].tool_calls[0].provider_state is None  # portable
    assert parsed[1].to_openai() == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    assert parsed[2].to_openai() == {"role": "tool", "content": "done", "tool_call_id": "c1"}
    assert [Message.from_openai(m.to_openai()) for m in parsed] == parsed


@pytest.mark.parametrize(
    "data",
    [
        {"role": "system", "content": "x"},
        {"role": "developer", "content": "x"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "user", "content": 5},
    ],
)
def test_openai_rejections(data: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as info:
        Message.from_openai(data)
    assert info.value.hint


# ------------------------------------------------------------------------ Continuation


def _continuation() -> Continuation:
    return Continuation._create(
        provider="anthropic",
        model="claude",
        state={"messages": [{"role": "user", "content": "hi"}], "n": 1},
    )


def test_continuation_cannot_be_constructed_directly() -> None:
    with pytest.raises(TypeError):
        Continuation()


def test_continuation_internals_and_repr() -> None:
    cont = _continuation()
    assert (cont._provider, cont._model) == ("anthropic", "claude")
    assert cont._state["n"] == 1
    with pytest.raises(TypeError):
        cont._state["n"] = 2  # type: ignore[index]
    with pytest.raises(AttributeError):
        cont._c_state = {}  # type: ignore[misc]
    assert "hi" not in repr(cont) and "messages" not in repr(cont)
    assert repr(cont) == "Continuation(provider='anthropic', version=2)"


def test_continuation_state_is_copied() -> None:
    state = {"items": [1, 2]}
    cont = Continuation._create(provider="openai", model=None, state=state)
    state["items"].append(3)
    assert cont._state["items"] == [1, 2]
    dumped = cont.to_jsonable()
    dumped["state"]["items"].append(4)
    assert cont._state["items"] == [1, 2]


def test_continuation_rejects_non_json_state() -> None:
    for state in ({"b": b"bytes"}, {"f": float("inf")}, {1: "x"}):
        with pytest.raises(InternalError):
            Continuation._create(provider="openai", model=None, state=state)  # type: ignore[dict-item]


def test_continuation_round_trip_and_provider_check() -> None:
    cont = _continuation()
    data = json.loads(json.dumps(cont.to_jsonable()))
    assert data["version"] == Continuation.SCHEMA_VERSION == 2
    restored = Continuation.from_jsonable(data)
    assert restored == cont and hash(restored) == hash(cont)
    assert Continuation.from_jsonable(data, expected_provider="anthropic") == cont
    with pytest.raises(ConfigurationError, match="does not match") as info:
        Continuation.from_jsonable(data, expected_provider="openai")
    assert info.value.hint
    cont._require_provider("anthropic")
    with pytest.raises(ConfigurationError):
        cont._require_provider("gemini")


def test_continuation_pickle_and_copy() -> None:
    cont = _continuation()
    for clone in (pickle.loads(pickle.dumps(cont)), copy.copy(cont), copy.deepcopy(cont)):
        assert clone == cont


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"version": 1, "provider": "openai", "state": {}},
        {"version": True, "provider": "openai", "state": {}},
        {"version": 2, "provider": "", "state": {}},
        {"version": 2, "provider": "openai", "state": []},
        {"version": 2, "provider": "openai", "model": 3, "state": {}},
        {"version": 2, "provider": "openai", "state": {"x": {1, 2}}},
        "not a mapping",
    ],
)
def test_continuation_from_jsonable_errors(data: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        Continuation.from_jsonable(data)  # type: ignore[arg-type]
    assert info.value.hint


# ------------------------------------------------------------------------------- Input


def test_input_basics() -> None:
    inp = Input("Summarize.")
    assert (inp.content, inp.history, inp.continuation, inp.tool_results) == (
        "Summarize.",
        None,
        None,
        (),
    )
    with_history = Input("next", history=[Message("user", "hi"), Message("assistant", "hello")])
    assert isinstance(with_history.history, tuple)
    results = Input(continuation=_continuation(), tool_results=[ToolResult("c1", "42")])
    assert isinstance(results.tool_results, tuple) and results.content is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"content": "   "},
        {"content": "x", "history": [Message("user", "a")], "continuation": _continuation()},
        {"content": 5},
        {"content": "x", "history": ["not a message"]},
        {"content": "x", "history": "abc"},
        {"content": "x", "continuation": {"version": 2}},
        {"content": "x", "tool_results": [{"call_id": "c"}]},
    ],
)
def test_input_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as info:
        Input(**kwargs)  # type: ignore[arg-type]
    assert info.value.hint


def test_deeply_nested_state_is_a_configuration_error() -> None:
    deep: object = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ConfigurationError, match="nested too deeply"):
        Continuation.from_jsonable({"version": 2, "provider": "openai", "state": {"x": deep}})
