"""The Responses API through the official openai SDK: plain, streamed, tools, structured."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pydantic
import pytest

from pollux.testing import (
    CutStream,
    DropConnection,
    Emulator,
    ErrorResponse,
    Latency,
    MalformedBody,
    Reply,
    StreamError,
    ToolCall,
)

TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "strict": True,
}


def _client(emu: Emulator, **kwargs: Any) -> openai.OpenAI:
    # Strict validation makes the SDK check every field against its own types.
    return openai.OpenAI(
        base_url=emu.base_url("openai"),
        api_key="sk-test",
        max_retries=0,
        _strict_response_validation=True,
        **kwargs,
    )


def test_plain_response_text_usage_and_log(emulator: Emulator) -> None:
    with _client(emulator) as client:
        response = client.responses.create(
            model="gpt-5-nano", instructions="Be terse.", input="Name a colour"
        )
    assert response.status == "completed"
    assert response.output_text == "Emulated reply to: Name a colour"
    assert response.usage is not None
    assert response.usage.input_tokens == 3 + 3  # instructions + input
    assert response.usage.output_tokens == 7
    assert response.usage.total_tokens == 13
    assert response._request_id is not None and response._request_id.startswith("req_")
    assert emulator.last_request.route == "openai.responses.create"
    assert emulator.last_request.json["instructions"] == "Be terse."


def test_message_items_with_images_and_files(emulator: Emulator) -> None:
    with _client(emulator) as client:
        uploaded = client.files.create(file=("doc.pdf", b"%PDF-1.4"), purpose="user_data")
        response = client.responses.create(
            model="gpt-5",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Compare"},
                        {
                            "type": "input_image",
                            "image_url": "https://example.com/a.png",
                            "detail": "auto",
                        },
                        {"type": "input_file", "file_id": uploaded.id},
                    ],
                }
            ],
        )
        assert response.output_text == "Emulated reply to: Compare [1 image, 1 file]"
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(
                model="gpt-5",
                input=[
                    {"role": "user", "content": [{"type": "input_file", "file_id": "file-missing"}]}
                ],
            )
    assert info.value.param == "input[0].content[0].file_id"


def test_streaming_follows_the_real_event_sequence(emulator: Emulator) -> None:
    with _client(emulator) as client:
        stream = client.responses.create(
            model="gpt-5",
            input="Tell me a story about a fox",
            reasoning={"effort": "low", "summary": "auto"},
            stream=True,
        )
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for expected in (
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert expected in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    summary = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert text == final.output_text == "Emulated reply to: Tell me a story about a fox"
    assert summary == "Reasoning about: Tell me a story about a fox"
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens > 0


def test_stream_helper_accumulates_a_function_call(emulator: Emulator) -> None:
    with (
        _client(emulator) as client,
        client.responses.stream(
            model="gpt-5", input="What is the weather?", tools=[TOOL], tool_choice="required"
        ) as stream,
    ):
        arguments = "".join(
            e.delta for e in stream if e.type == "response.function_call_arguments.delta"
        )
        final = stream.get_final_response()
    (call,) = final.output
    assert call.type == "function_call"
    assert call.name == "get_weather"
    assert json.loads(arguments) == json.loads(call.arguments)
    jsonschema.validate(json.loads(call.arguments), TOOL["parameters"])


def test_function_call_round_trip_with_previous_response_id(emulator: Emulator) -> None:
    with _client(emulator) as client:
        first = client.responses.create(
            model="gpt-5", input="Please call get_weather for Oslo", tools=[TOOL]
        )
        (call,) = [item for item in first.output if item.type == "function_call"]
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(
                model="gpt-5", previous_response_id=first.id, input="forgot the output"
            )
        assert call.call_id in info.value.message
        second = client.responses.create(
            model="gpt-5",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "-3C"}],
            tools=[TOOL],
        )
        assert second.output_text == "Tool results: -3C"
        assert second.previous_response_id == first.id
        assert client.responses.retrieve(second.id).output_text == "Tool results: -3C"
        client.responses.delete(second.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(second.id)
        with pytest.raises(openai.BadRequestError) as missing:
            client.responses.create(model="gpt-5", previous_response_id="resp_nope", input="x")
        assert missing.value.code == "previous_response_not_found"


def test_scripted_parallel_tool_calls(emulator: Emulator) -> None:
    emulator.script(
        "openai.responses",
        Reply(tool_calls=[ToolCall("a", {"x": 1}), ToolCall("b", '{"y": 2}', call_id="call_b")]),
    )
    with _client(emulator) as client:
        response = client.responses.create(model="gpt-5", input="go")
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [("a", '{"x":1}'), ("b", '{"y": 2}')]
    assert calls[1].call_id == "call_b"


def test_structured_output_parses_into_a_pydantic_model(emulator: Emulator) -> None:
    class Address(pydantic.BaseModel):
        street: str
        zip_code: str = pydantic.Field(min_length=5, max_length=5)

    class Person(pydantic.BaseModel):
        name: str
        age: int = pydantic.Field(ge=18)
        emails: list[str]
        address: Address
        nickname: str | None

    with _client(emulator) as client:
        parsed = client.responses.parse(model="gpt-5", input="Extract", text_format=Person)
    assert isinstance(parsed.output_parsed, Person)
    assert parsed.output_parsed.age >= 18
    assert len(parsed.output_parsed.address.zip_code) == 5
    request = emulator.last_request.json
    assert request["text"]["format"]["type"] == "json_schema"


def test_non_strict_schema_under_strict_is_rejected(emulator: Emulator) -> None:
    with _client(emulator) as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="gpt-5",
            input="x",
            text={
                "format": {
                    "type": "json_schema",
                    "name": "s",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"a": {"type": "string"}},
                        "required": [],
                    },
                }
            },
        )
    assert "Missing 'a'" in info.value.message
    assert info.value.code == "invalid_json_schema"


def test_max_output_tokens_truncates_as_incomplete(emulator: Emulator) -> None:
    long_input = " ".join(["word"] * 40)
    with _client(emulator) as client:
        response = client.responses.create(model="gpt-5", input=long_input, max_output_tokens=16)
        stream = client.responses.create(
            model="gpt-5", input=long_input, max_output_tokens=16, stream=True
        )
        last = list(stream)[-1]
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 16
    assert response.output_text == "Emulated reply to: " + " ".join(["word"] * 12)
    assert last.type == "response.incomplete"


def test_prefix_cache_hits_are_reported_in_usage() -> None:
    with Emulator(cache_min_tokens=64, cache_block_tokens=32) as emu, _client(emu) as client:
        instructions = "Rules: " + " ".join(f"rule{i}" for i in range(100))
        first = client.responses.create(model="gpt-5", instructions=instructions, input="one")
        again = client.responses.create(model="gpt-5", instructions=instructions, input="two")
        other = client.responses.create(model="gpt-5-mini", instructions=instructions, input="3")
    assert first.usage is not None and first.usage.input_tokens_details.cached_tokens == 0
    assert again.usage is not None and again.usage.input_tokens_details.cached_tokens == 96
    assert other.usage is not None and other.usage.input_tokens_details.cached_tokens == 0


def test_reasoning_usage_and_encrypted_content(emulator: Emulator) -> None:
    with _client(emulator) as client:
        response = client.responses.create(
            model="gpt-5",
            input="think",
            reasoning={"effort": "high"},
            include=["reasoning.encrypted_content"],
            store=False,
        )
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response.id)  # store=False keeps nothing
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.summary == []  # no summary was asked for
    assert reasoning.encrypted_content
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens > 256


def test_validation_errors_match_the_api(emulator: Emulator) -> None:
    with _client(emulator) as client:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="gpt-5", input="x", max_output_tokens=3)
        assert info.value.param == "max_output_tokens"
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="gpt-5", input=[{"type": "bogus"}])  # type: ignore[list-item]
        assert info.value.code == "invalid_value"
    with Emulator(models=["gpt-5"]) as emu, _client(emu) as client:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="gpt-4", input="x")
        assert info.value.code == "model_not_found"


def test_stream_faults_on_the_responses_route(emulator: Emulator) -> None:
    emulator.script(
        "openai.responses",
        CutStream(after_events=3),
        StreamError("overloaded", after_events=2, code="server_error"),
        ErrorResponse(429, retry_after=3),
    )
    with _client(emulator) as client:
        seen = 0
        with pytest.raises(openai.APIConnectionError):
            for _ in client.responses.create(model="gpt-5", input="x", stream=True):
                seen += 1
        assert seen == 3
        kinds = [e.type for e in client.responses.create(model="gpt-5", input="x", stream=True)]
        assert kinds[-2:] == ["error", "response.failed"]
        with pytest.raises(openai.RateLimitError) as info:
            client.responses.create(model="gpt-5", input="x")
        assert info.value.response.headers["retry-after"] == "3"


async def test_async_responses_plain_and_streamed(emulator: Emulator) -> None:
    async with openai.AsyncOpenAI(
        base_url=emulator.base_url("openai"), api_key="k", _strict_response_validation=True
    ) as client:
        response = await client.responses.create(model="gpt-5", input="async hi")
        stream = await client.responses.create(model="gpt-5", input="async hi", stream=True)
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
    assert response.output_text == "".join(deltas) == "Emulated reply to: async hi"


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_status_faults_on_responses_files_and_batches(
    emulator: Emulator, status: int, exception: type[openai.APIStatusError]
) -> None:
    emulator.script("openai.responses", ErrorResponse(status))
    emulator.script("openai.files.create", ErrorResponse(status))
    emulator.script("openai.batches", ErrorResponse(status))
    with _client(emulator) as client:
        with pytest.raises(exception):
            client.responses.create(model="gpt-5", input="x", stream=True)
        with pytest.raises(exception):
            client.files.create(file=("a.jsonl", b"{}"), purpose="batch")
        with pytest.raises(exception):
            client.batches.retrieve("batch_any")
    emulator.assert_consumed()


def test_network_faults_on_responses(emulator: Emulator) -> None:
    emulator.script("openai.responses", DropConnection(), MalformedBody(), Latency(5))
    with _client(emulator, timeout=0.2) as client:
        with pytest.raises(openai.APIConnectionError):
            client.responses.create(model="gpt-5", input="x")
        with pytest.raises(json.JSONDecodeError):
            client.responses.create(model="gpt-5", input="x")
        with pytest.raises(openai.APITimeoutError):
            client.responses.create(model="gpt-5", input="x")


async def test_async_stream_cut_on_responses(emulator: Emulator) -> None:
    emulator.script("openai.responses", CutStream(after_events=4))
    async with openai.AsyncOpenAI(
        base_url=emulator.base_url("openai"), api_key="k", max_retries=0
    ) as client:
        stream = await client.responses.create(model="gpt-5", input="x", stream=True)
        seen = []
        with pytest.raises(openai.APIConnectionError):
            async for event in stream:
                seen.append(event.type)
    assert seen[:2] == ["response.created", "response.in_progress"]
    assert len(seen) == 4


def test_unknown_parameters_are_rejected_on_the_openai_wire(emulator: Emulator) -> None:
    with _client(emulator) as client:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="gpt-5", input="x", extra_body={"seed": 7})
        assert (info.value.param, info.value.code) == ("seed", "unknown_parameter")
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], extra_body={"bogus": 1}
            )
    with openai.OpenAI(base_url=emulator.base_url("local"), api_key="k") as local:
        answer = local.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], extra_body={"num_ctx": 8192}
        )
    assert answer.choices[0].message.content == "Emulated reply to: x"
