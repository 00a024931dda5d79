"""The Anthropic wire's Messages API through the official anthropic SDK (sync and async).

Streams are read through the SDK's own helpers (``messages.stream`` and ``get_final_message``),
so its strict event accumulation checks the event sequence.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from typing import Any

import anthropic
import jsonschema
import pytest
from pydantic import BaseModel

from pollux.testing import AnthropicReply, Emulator, Reply, ToolCall

MODEL = "claude-sonnet-4-6"
HI = [{"role": "user", "content": "hello there"}]
LOOKUP = {
    "name": "lookup",
    "description": "Look an invoice up.",
    "input_schema": {
        "type": "object",
        "properties": {"number": {"type": "string"}},
        "required": ["number"],
    },
}
THINK = {"type": "enabled", "budget_tokens": 1024}


def _client(emu: Emulator, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=emu.base_url("anthropic"), api_key="sk-ant-test", max_retries=0, **kwargs
    )


def _async_client(emu: Emulator) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=emu.base_url("anthropic"), api_key="sk-ant-test", max_retries=0
    )


def _error(exc: pytest.ExceptionInfo[anthropic.APIStatusError]) -> dict[str, Any]:
    body = exc.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    error: dict[str, Any] = body["error"]
    return error


# --- plain messages, streaming, counting ---------------------------------------------------------


def test_plain_message(emulator: Emulator) -> None:
    with _client(emulator) as client:
        message = client.messages.create(model=MODEL, max_tokens=64, messages=HI)
    assert message.id.startswith("msg_") and message.model == MODEL
    assert message.content[0].type == "text"
    assert message.content[0].text == "Emulated reply to: hello there"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 2
    assert message.usage.output_tokens == 6
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0
    request = emulator.last_request
    assert request.route == "anthropic.messages.create"
    assert request.json["max_tokens"] == 64


async def test_async_stream_final_message_matches_plain(emulator: Emulator) -> None:
    async with _async_client(emulator) as client:
        plain = await client.messages.create(model=MODEL, max_tokens=64, messages=HI)
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_message()
    assert final.content[0].text == plain.content[0].text  # type: ignore[union-attr]
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.usage.input_tokens == plain.usage.input_tokens
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


def test_raw_stream_has_the_real_event_sequence(emulator: Emulator) -> None:
    emulator.script(
        "anthropic.messages.create",
        Reply("Let me look.", tool_calls=[ToolCall("lookup", {"number": "INV-7"})]),
    )
    with _client(emulator) as client:
        events = list(
            client.messages.create(
                model=MODEL,
                max_tokens=4096,
                thinking=THINK,
                tools=[LOOKUP],
                messages=[{"role": "user", "content": "Is INV-7 paid?"}],
                stream=True,
            )
        )
    kinds = [
        (e.type, getattr(getattr(e, "delta", None), "type", None)) for e in events
    ]  # ping events are skipped by the SDK
    assert kinds[0] == ("message_start", None)
    assert kinds[1] == ("content_block_start", None)
    thinking = [k for k in kinds if k[1] in ("thinking_delta", "signature_delta")]
    assert thinking[-1] == ("content_block_delta", "signature_delta")
    assert ("content_block_delta", "text_delta") in kinds
    assert ("content_block_delta", "input_json_delta") in kinds
    assert [kind for kind, _ in kinds[-3:]] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]
    assert start.type == "message_start"
    assert start.message.usage.input_tokens > 0 and start.message.stop_reason is None
    blocks = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert blocks == ["thinking", "text", "tool_use"]
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.delta.stop_reason == "tool_use" and delta.usage.output_tokens > 1


def test_stream_sends_ping_and_named_events(emulator: Emulator) -> None:
    with (
        _client(emulator) as client,
        client.messages.with_streaming_response.create(
            model=MODEL, max_tokens=64, messages=HI, stream=True
        ) as response,
    ):
        lines = [line for line in response.iter_lines() if line.startswith("event: ")]
    assert lines == [
        "event: message_start",
        "event: content_block_start",
        "event: ping",
        *["event: content_block_delta"] * (len(lines) - 6),
        "event: content_block_stop",
        "event: message_delta",
        "event: message_stop",
    ]
    assert len(lines) > 6


def test_stream_helpers_accumulate_thinking_and_tool_input(emulator: Emulator) -> None:
    emulator.script(
        "anthropic.messages.create", Reply(tool_calls=[ToolCall("lookup", {"number": "INV-7"})])
    )
    with (
        _client(emulator) as client,
        client.messages.stream(
            model=MODEL,
            max_tokens=4096,
            thinking=THINK,
            tools=[LOOKUP],
            messages=[{"role": "user", "content": "Is INV-7 paid?"}],
        ) as stream,
    ):
        final = stream.get_final_message()
    thinking, tool = final.content
    assert thinking.type == "thinking" and thinking.thinking == "Reasoning about: Is INV-7 paid?"
    assert thinking.signature
    assert tool.type == "tool_use" and tool.input == {"number": "INV-7"}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens_details is not None
    assert final.usage.output_tokens_details.thinking_tokens > 0


def test_count_tokens_counts_system_tools_and_messages(emulator: Emulator) -> None:
    with _client(emulator) as client:
        bare = client.messages.count_tokens(model=MODEL, messages=HI)
        counted = client.messages.count_tokens(
            model=MODEL, system="Be brief.", tools=[LOOKUP], messages=HI
        )
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.count_tokens(model=MODEL, messages=HI, extra_body={"max_tokens": 5})
    assert bare.input_tokens == 2
    assert counted.input_tokens > bare.input_tokens + 3  # system (3) and the tool definition
    assert _error(info)["message"] == "max_tokens: Extra inputs are not permitted"
    assert emulator.requests_for("anthropic.messages.count_tokens")[0].json["messages"] == HI


# --- authentication and validation ---------------------------------------------------------------


def test_missing_key_is_an_authentication_error(emulator: Emulator) -> None:
    with _client(emulator) as client, pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(
            model=MODEL, max_tokens=8, messages=HI, extra_headers={"Authorization": anthropic.omit}
        )
    assert _error(info)["type"] == "authentication_error"


def _raw_post(emu: Emulator, headers: dict[str, str]) -> tuple[int, Any]:
    body = json.dumps({"model": MODEL, "max_tokens": 8, "messages": HI}).encode()
    request = urllib.request.Request(
        emu.base_url("anthropic") + "/v1/messages",
        data=body,
        headers={"content-type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_key_arrives_as_x_api_key_or_bearer() -> None:
    with Emulator(api_key="sk-right") as emu:
        version = {"anthropic-version": "2023-06-01"}
        assert _raw_post(emu, {"x-api-key": "sk-right", **version})[0] == 200
        assert _raw_post(emu, {"authorization": "Bearer sk-right", **version})[0] == 200
        status, body = _raw_post(emu, {"x-api-key": "sk-wrong", **version})
        assert status == 401 and body["error"]["type"] == "authentication_error"
        status, body = _raw_post(emu, {"x-api-key": "sk-right"})
        assert status == 400 and "anthropic-version" in body["error"]["message"]
        with _client(emu) as client, pytest.raises(anthropic.AuthenticationError):
            client.messages.create(model=MODEL, max_tokens=8, messages=HI)
        client = anthropic.Anthropic(base_url=emu.base_url("anthropic"), api_key="sk-right")
        with client:
            assert client.messages.create(model=MODEL, max_tokens=8, messages=HI).content


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"seed": 1}, "seed: Extra inputs are not permitted"),
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"messages": []}, "messages: at least one message is required"),
        (
            {"messages": [{"role": "assistant", "content": "hi"}]},
            'messages: first message must use the "user" role',
        ),
        (
            {"messages": [*HI, {"role": "user", "content": "again"}]},
            'roles must alternate between "user" and "assistant", but found multiple "user"',
        ),
        (
            {"messages": [{"role": "system", "content": "x"}]},
            'messages.0.role: Unexpected role "system"',
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]},
            "messages.0.content.0.type: Input tag 'video'",
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "greater than or equal to 1024"),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
            "`max_tokens` must be greater than `thinking.budget_tokens`",
        ),
        (
            {"tools": [LOOKUP], "tool_choice": {"type": "any"}, "thinking": THINK},
            "Thinking may not be enabled when tool_choice forces tool use.",
        ),
        ({"tool_choice": {"type": "tool", "name": "x"}}, "tool_choice may only be specified"),
        ({"tools": [LOOKUP, LOOKUP]}, "tools: Tool names must be unique."),
        ({"temperature": 1.5}, "temperature: Input should be between 0 and 1"),
        (
            {"thinking": THINK, "max_tokens": 4096, "temperature": 0.2},
            "`temperature` may only be set to 1 when thinking is enabled.",
        ),
        ({"thinking": THINK, "max_tokens": 4096, "top_k": 5}, "`top_k` may not be set"),
        (
            {"messages": [{"role": "user", "content": ""}]},
            "messages.0: all messages must have non-empty content",
        ),
    ],
)
def test_invalid_requests_get_the_api_400(
    emulator: Emulator, change: dict[str, Any], message: str
) -> None:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 2048, "messages": HI, **change}
    body = {k: v for k, v in body.items() if v is not None}
    with _client(emulator) as client, pytest.raises(anthropic.BadRequestError) as info:
        client.post("/v1/messages", body=body, cast_to=anthropic.types.Message)
    error = _error(info)
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]


def test_an_unknown_model_is_not_found_when_the_catalog_is_set() -> None:
    with Emulator(models=[MODEL]) as emu, _client(emu) as client:
        assert client.messages.create(model=MODEL, max_tokens=8, messages=HI).content
        with pytest.raises(anthropic.NotFoundError) as info:
            client.messages.create(model="claude-nope", max_tokens=8, messages=HI)
    assert _error(info) == {"type": "not_found_error", "message": "model: claude-nope"}


# --- tools ---------------------------------------------------------------------------------------


def test_tool_loop_with_results_and_is_error(emulator: Emulator) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Please lookup INV-7."}]
    with _client(emulator) as client:
        first = client.messages.create(
            model=MODEL, max_tokens=256, tools=[LOOKUP], messages=messages
        )
        assert first.stop_reason == "tool_use"
        (call,) = [b for b in first.content if b.type == "tool_use"]
        jsonschema.validate(call.input, LOOKUP["input_schema"])
        messages += [
            {"role": "assistant", "content": [b.to_dict() for b in first.content]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": "no such invoice",
                        "is_error": True,
                    }
                ],
            },
        ]
        second = client.messages.create(
            model=MODEL, max_tokens=256, tools=[LOOKUP], messages=messages
        )
        missing = copy.deepcopy(messages)
        missing[-1]["content"] = "forgot the result"
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(model=MODEL, max_tokens=256, tools=[LOOKUP], messages=missing)
        stray = copy.deepcopy(messages)
        stray[-1]["content"][0]["tool_use_id"] = "toolu_other"
        with pytest.raises(anthropic.BadRequestError) as stray_info:
            client.messages.create(model=MODEL, max_tokens=256, tools=[LOOKUP], messages=stray)
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "Tool results: [error] no such invoice"  # type: ignore[union-attr]
    assert "`tool_use` ids were found without `tool_result` blocks" in _error(info)["message"]
    assert "unexpected `tool_use_id`" in _error(stray_info)["message"]
    assert emulator.last_request.json["messages"][2]["content"][0]["is_error"] is True


@pytest.mark.parametrize(
    ("choice", "called"),
    [
        ({"type": "auto"}, False),
        ({"type": "any"}, True),
        ({"type": "tool", "name": "lookup"}, True),
        ({"type": "none"}, False),
    ],
)
def test_tool_choice(emulator: Emulator, choice: dict[str, Any], called: bool) -> None:
    with _client(emulator) as client:
        message = client.messages.create(
            model=MODEL,
            max_tokens=256,
            tools=[LOOKUP],
            tool_choice=choice,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "What is up?"}],
        )
    assert any(b.type == "tool_use" for b in message.content) is called
    assert (message.stop_reason == "tool_use") is called


def test_a_forced_tool_choice_calls_even_after_tool_results(emulator: Emulator) -> None:
    with _client(emulator) as client:
        first = client.messages.create(
            model=MODEL,
            max_tokens=256,
            tools=[LOOKUP],
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "Check it."}],
        )
        call = first.content[0]
        assert call.type == "tool_use"
        messages = [
            {"role": "user", "content": "Check it."},
            {"role": "assistant", "content": [call.to_dict()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "ok"}],
            },
        ]
        forced = client.messages.create(
            model=MODEL,
            max_tokens=256,
            tools=[LOOKUP],
            tool_choice={"type": "any"},
            messages=messages,
        )
        free = client.messages.create(
            model=MODEL, max_tokens=256, tools=[LOOKUP], messages=messages
        )
    assert forced.stop_reason == "tool_use" and forced.content[0].type == "tool_use"
    assert forced.content[0].id != call.id
    assert free.stop_reason == "end_turn"


# --- extended thinking ---------------------------------------------------------------------------


def _thinking_turn(client: anthropic.Anthropic, thinking: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Please lookup INV-7."}]
    with client.messages.stream(
        model=MODEL, max_tokens=4096, thinking=thinking, tools=[LOOKUP], messages=messages
    ) as stream:
        first = stream.get_final_message()
    (call,) = [b for b in first.content if b.type == "tool_use"]
    # A JSON round trip, as a saved conversation would take.
    replay = json.loads(json.dumps([b.to_dict() for b in first.content]))
    return [
        *messages,
        {"role": "assistant", "content": replay},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "paid"}],
        },
    ]


@pytest.mark.parametrize("thinking", [THINK, {"type": "adaptive"}])
def test_signed_thinking_survives_a_tool_loop(emulator: Emulator, thinking: Any) -> None:
    with _client(emulator) as client:
        messages = _thinking_turn(client, thinking)
        assert messages[1]["content"][0]["type"] == "thinking"
        answer = client.messages.create(
            model=MODEL, max_tokens=4096, thinking=thinking, tools=[LOOKUP], messages=messages
        )
    assert answer.content[0].type == "thinking"
    assert answer.content[-1].text == "Tool results: paid"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda b: b[0].update(thinking="edited"), "Invalid `signature` in `thinking` block"),
        (lambda b: b[0].update(signature="EmuSigforged"), "Invalid `signature`"),
        (
            lambda b: b[0].pop("signature"),
            "messages.1.content.0.thinking.signature: Field required",
        ),
        (lambda b: b.pop(0), "must start with a thinking block"),
    ],
)
def test_tampered_or_missing_thinking_is_refused(
    emulator: Emulator, tamper: Any, message: str
) -> None:
    with _client(emulator) as client:
        messages = _thinking_turn(client, THINK)
        tamper(messages[1]["content"])
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(
                model=MODEL, max_tokens=4096, thinking=THINK, tools=[LOOKUP], messages=messages
            )
    assert message in _error(info)["message"]


def test_redacted_thinking_round_trips_and_is_checked(emulator: Emulator) -> None:
    emulator.script(
        "anthropic.messages.create",
        AnthropicReply("First.", reasoning="visible", redacted_thinking=["hidden"]),
    )
    with _client(emulator) as client:
        with client.messages.stream(model=MODEL, max_tokens=4096, thinking=THINK, messages=HI) as s:
            first = s.get_final_message()
        kinds = [b.type for b in first.content]
        assert kinds == ["thinking", "redacted_thinking", "text"]
        assert "hidden" not in json.dumps(first.content[1].to_dict())  # opaque
        history = [
            *HI,
            {"role": "assistant", "content": [b.to_dict() for b in first.content]},
            {"role": "user", "content": "and then?"},
        ]
        ok = client.messages.create(model=MODEL, max_tokens=4096, thinking=THINK, messages=history)
        history[1]["content"][1]["data"] = history[1]["content"][1]["data"][:-4] + "AAAA"
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(model=MODEL, max_tokens=4096, thinking=THINK, messages=history)
    assert ok.content[-1].text == "Emulated reply to: and then?"  # type: ignore[union-attr]
    assert "Invalid `data` in `redacted_thinking` block" in _error(info)["message"]


def test_interleaved_thinking_lets_the_budget_exceed_max_tokens(emulator: Emulator) -> None:
    big = {"type": "enabled", "budget_tokens": 8192}
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 4096,
        "thinking": big,
        "tools": [LOOKUP],
        "messages": HI,
    }
    with _client(emulator) as client:
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(**request)
        beta = client.beta.messages.create(**request, betas=["interleaved-thinking-2025-05-14"])
    assert beta.content[0].type == "thinking"
    assert "interleaved-thinking" in emulator.last_request.headers["anthropic-beta"]


def test_omitted_thinking_display_is_signed_but_empty(emulator: Emulator) -> None:
    with _client(emulator) as client:
        message = client.messages.create(
            model=MODEL,
            max_tokens=4096,
            thinking={"type": "adaptive", "display": "omitted"},
            messages=HI,
        )
    block = message.content[0]
    assert block.type == "thinking" and block.thinking == "" and block.signature


# --- structured output ---------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "temperature": {"type": "number", "minimum": -90, "maximum": 60},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
    },
    "required": ["city", "temperature", "tags"],
    "additionalProperties": False,
}


def test_output_config_json_schema_gives_valid_json(emulator: Emulator) -> None:
    with _client(emulator) as client:
        message = client.messages.create(
            model=MODEL,
            max_tokens=256,
            messages=HI,
            output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
        )
        open_schema = {**SCHEMA, "additionalProperties": True}
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(
                model=MODEL,
                max_tokens=256,
                messages=HI,
                output_config={"format": {"type": "json_schema", "schema": open_schema}},
            )
    jsonschema.validate(json.loads(message.content[0].text), SCHEMA)  # type: ignore[union-attr]
    assert "'additionalProperties' must be explicitly set to false" in _error(info)["message"]


class Weather(BaseModel):
    city: str
    temperature: float


async def test_sdk_parse_with_a_pydantic_model(emulator: Emulator) -> None:
    async with _async_client(emulator) as client:
        parsed = await client.messages.parse(
            model=MODEL, max_tokens=256, messages=HI, output_format=Weather
        )
    assert isinstance(parsed.parsed_output, Weather)
    sent = emulator.last_request.json["output_config"]["format"]
    assert sent["type"] == "json_schema" and sent["schema"]["additionalProperties"] is False


# --- stop reasons --------------------------------------------------------------------------------


def test_stop_reasons(emulator: Emulator) -> None:
    emulator.script(
        "anthropic.messages.create",
        AnthropicReply("I can't help with that.", stop_reason="refusal"),
        AnthropicReply("Working on it", stop_reason="pause_turn"),
    )
    with _client(emulator) as client:
        refusal = client.messages.create(model=MODEL, max_tokens=64, messages=HI)
        with client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream:
            paused = stream.get_final_message()
        cut = client.messages.create(model=MODEL, max_tokens=3, messages=HI)
        stopped = client.messages.create(
            model=MODEL, max_tokens=64, messages=HI, stop_sequences=["there", "reply"]
        )
    assert refusal.stop_reason == "refusal"
    assert refusal.stop_details is not None and refusal.stop_details.type == "refusal"
    assert paused.stop_reason == "pause_turn" and paused.content[0].text == "Working on it"  # type: ignore[union-attr]
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    assert cut.content[0].text == "Emulated reply to"  # type: ignore[union-attr]
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "reply"
    assert stopped.content[0].text == "Emulated "  # type: ignore[union-attr]


def test_an_unknown_scripted_stop_reason_is_refused_early() -> None:
    with pytest.raises(ValueError, match="unknown stop_reason"):
        AnthropicReply(stop_reason="done")


# --- models --------------------------------------------------------------------------------------


def test_models_list_and_retrieve_follow_the_catalog() -> None:
    with Emulator(models=[MODEL, "claude-haiku-4-5"]) as emu, _client(emu) as client:
        listed = [m.id for m in client.models.list()]
        assert client.models.retrieve(MODEL).id == MODEL
        with pytest.raises(anthropic.NotFoundError) as info:
            client.models.retrieve("claude-nope")
    assert listed == [MODEL, "claude-haiku-4-5"]
    assert _error(info)["message"] == "model: claude-nope"
    assert emu.requests_for("anthropic.models")[0].route == "anthropic.models.list"
