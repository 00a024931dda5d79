"""pollux.run / run_many / interact / stream with provider="openai", through the official SDK,
against the emulator's Responses, Files and error paths.

The SDK reads ``OPENAI_BASE_URL``; that is how the provider is pointed at the emulator
(``Config`` keeps ``base_url`` for local servers only).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from pollux import (
    APIError,
    Config,
    ConfigurationError,
    Continuation,
    Environment,
    Input,
    Message,
    RateLimitError,
    RetryPolicy,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
    check_ready,
    interact,
    run,
    run_many,
    stream,
)
from pollux import ToolCall as PolluxToolCall
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

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_delay_s=0.005)

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


@pytest.fixture
def config(emu: Emulator) -> Config:
    return Config(
        provider="openai",
        model="gpt-5-nano",
        api_key="sk-test",
        retry=FAST_RETRY,
        request_timeout_s=5.0,
    )


def routes(emu: Emulator) -> list[str]:
    return [r.route for r in emu.requests]


def bodies(emu: Emulator, route: str = "openai.responses.create") -> list[dict[str, Any]]:
    return [r.json for r in emu.requests if r.route == route]


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF-1.4\n" + b"0" * 2048)
    return path


async def test_run_plain_text(emu: Emulator, config: Config) -> None:
    out = await run("Name a colour", config=config, instructions="Be terse.", max_tokens=64)
    assert out.text == "Emulated reply to: Name a colour"
    assert out.usage.input_tokens > 0 and out.usage.total_tokens > out.usage.input_tokens
    assert out.metrics.completion_status == "clean"
    assert out.metrics.finish_reason == "stop"
    assert out.diagnostics.raw["response"]["response_id"].startswith("resp")
    (body,) = bodies(emu)
    assert body["instructions"] == "Be terse."
    assert body["max_output_tokens"] == 64
    assert emu.requests[0].headers.get("authorization") == "Bearer sk-test"


async def test_run_many_shares_one_upload_and_deletes_it(
    emu: Emulator, config: Config, pdf: Path
) -> None:
    notes = Source.from_text("Team notes: ship on Friday.")
    results = await run_many(
        ["Q1?", "Q2?", "Q3?"], sources=[Source.from_file(pdf), notes], config=config
    )
    assert results.status == "ok"
    assert results.answers == [
        f"Emulated reply to: Team notes: ship on Friday.\nQ{i}? [1 file]" for i in (1, 2, 3)
    ]
    assert routes(emu).count("openai.files.create") == 1
    assert routes(emu).count("openai.files.delete") == 1
    assert routes(emu)[-1] == "openai.files.delete"  # deleted after every call finished
    (upload,) = [r for r in emu.requests if r.route == "openai.files.create"]
    (delete,) = [r for r in emu.requests if r.route == "openai.files.delete"]
    file_id = delete.path.rsplit("/", 1)[-1]
    for body in bodies(emu):
        parts = body["input"][0]["content"]
        assert parts[0] == {"type": "input_file", "file_id": file_id}
        assert parts[1] == {"type": "input_text", "text": "Team notes: ship on Friday."}
    assert b"user_data" in upload.body


async def test_failed_generation_still_deletes_uploads(
    emu: Emulator, config: Config, pdf: Path
) -> None:
    emu.script("openai.responses", ErrorResponse(400, message="bad input", param="input"))
    with pytest.raises(APIError) as info:
        await run("Q?", source=Source.from_file(pdf), config=config)
    assert info.value.status_code == 400
    assert info.value.retryable is False
    assert "'input'" in (info.value.hint or "")
    assert routes(emu) == ["openai.files.create", "openai.responses.create", "openai.files.delete"]


class Weather(pydantic.BaseModel):
    city: str
    temperature_c: float


async def test_structured_output_with_a_pydantic_model(emu: Emulator, config: Config) -> None:
    out = await run("Weather in Oslo as JSON", config=config, output=Weather)
    assert isinstance(out.structured, Weather)
    (body,) = bodies(emu)
    fmt = body["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["strict"] is True
    assert fmt["schema"]["additionalProperties"] is False
    assert sorted(fmt["schema"]["required"]) == ["city", "temperature_c"]


async def test_reasoning_summary_and_tokens(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", Reply("42", reasoning="Think, then answer.", reasoning_tokens=9))
    out = await run("Meaning?", config=config, reasoning_effort="low")
    assert out.text == "42"
    assert out.reasoning == "Think, then answer."
    assert out.usage.reasoning_tokens == 9
    assert bodies(emu)[0]["reasoning"] == {"effort": "low", "summary": "auto"}


async def test_truncation_by_max_output_tokens(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", Reply("cut sh", truncated=True))
    out = await run("Long story", config=config, max_tokens=16)
    assert out.metrics.finish_reason == "max_tokens"
    assert out.metrics.completion_status == "truncated"


async def test_cached_tokens_are_reported(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", Reply("ok", input_tokens=2000, cached_tokens=1536))
    out = await run("Again", config=config)
    assert out.usage.input_tokens == 2000
    assert out.usage.cached_tokens == 1536


async def test_unsupported_options_fail_before_any_request(emu: Emulator, config: Config) -> None:
    with pytest.raises(ConfigurationError, match="seed"):
        await run("x", config=config, seed=3)
    with pytest.raises(ConfigurationError, match="reasoning_budget_tokens"):
        await run("x", config=config, reasoning_budget_tokens=100)
    with pytest.raises(ConfigurationError, match="YouTube"):
        await run("x", source=Source.from_youtube("https://youtu.be/abc"), config=config)
    assert emu.requests == []


async def test_tool_loop_with_continuation(emu: Emulator, config: Config, pdf: Path) -> None:
    emu.script(
        "openai.responses",
        Reply(
            tool_calls=[
                ToolCall("get_weather", {"city": "Paris"}, call_id="call_p"),
                ToolCall("get_weather", {"city": "Atlantis"}, call_id="call_a"),
            ]
        ),
        Reply("Paris is sunny; Atlantis is unknown."),
    )
    env = Environment(instructions="Use tools.", sources=[Source.from_file(pdf)], tools=[WEATHER])
    async with Session(config) as session:
        first = await session.interact(env, Input("Weather in Paris and Atlantis?"))
        assert [c.name for c in first.tool_calls] == ["get_weather", "get_weather"]
        assert first.tool_calls[0].arguments == {"city": "Paris"}
        assert first.metrics.finish_reason == "tool_calls"
        assert first.continuation is not None
        results = [
            ToolResult(call_id="call_p", content='{"sky": "sunny"}'),
            ToolResult(call_id="call_a", content="no such city", is_error=True),
        ]
        second = await session.interact(
            env, Input(continuation=first.continuation, tool_results=results)
        )
    assert second.text == "Paris is sunny; Atlantis is unknown."
    # The PDF was uploaded for the first turn only (and deleted after it); the continuation turn
    # neither uploads nor sends it.
    assert routes(emu) == [
        "openai.files.create",
        "openai.responses.create",
        "openai.files.delete",
        "openai.responses.create",
    ]
    one, two = bodies(emu)
    assert one["tools"][0]["name"] == "get_weather" and one["tools"][0]["strict"] is True
    assert two["previous_response_id"] == first.diagnostics.raw["response"]["response_id"]
    assert two["instructions"] == "Use tools."
    # Only the tool outputs travel; the PDF lives server-side with the previous response.
    assert two["input"] == [
        {"type": "function_call_output", "call_id": "call_p", "output": '{"sky": "sunny"}'},
        {
            "type": "function_call_output",
            "call_id": "call_a",
            "output": json.dumps({"is_error": True, "content": "no such city"}),
        },
    ]
    # The continuation survives a JSON round trip.
    restored = Continuation.from_jsonable(json.loads(json.dumps(first.continuation.to_jsonable())))
    assert restored == first.continuation


async def test_foreign_continuation_is_rejected(emu: Emulator, config: Config) -> None:
    foreign = Continuation._create(provider="local", model=None, state={"messages": []})
    with pytest.raises(ConfigurationError):
        await interact(
            Environment(),
            Input(continuation=foreign, tool_results=[ToolResult(call_id="c", content="x")]),
            config=config,
        )
    assert emu.requests == []


def _comparable(output: Any) -> dict[str, Any]:
    # Everything but the measured duration and the server-assigned ids (two separate calls).
    data: dict[str, Any] = output.to_jsonable()
    data["metrics"].pop("duration_s", None)
    data["diagnostics"]["response"].pop("response_id")
    data.pop("continuation")
    return data


async def test_stream_timeline_and_done_equals_interact(emu: Emulator, config: Config) -> None:
    reply = Reply(
        "Checking the weather.",
        reasoning="Need a tool.",
        tool_calls=[ToolCall("get_weather", {"city": "Rome"}, call_id="call_r")],
    )
    emu.script("openai.responses", reply, reply)
    env = Environment(tools=[WEATHER])
    async with Session(config) as session:
        plain = await session.interact(env, Input("Rome?"), reasoning_effort="low")
        events = [e async for e in session.stream(env, Input("Rome?"), reasoning_effort="low")]
    kinds = [e.type for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert kinds[-3:] == ["tool_call", "finish", "done"]
    assert {"text_delta", "reasoning_delta", "tool_call_delta", "usage"} <= set(kinds)
    assert kinds.index("reasoning_delta") < kinds.index("text_delta")
    text = "".join(e.text for e in events if e.type == "text_delta")
    assert text == "Checking the weather."
    done = events[-1].output
    assert done is not None
    assert done.tool_calls[0].arguments == {"city": "Rome"}
    assert _comparable(done) == _comparable(plain)
    assert bodies(emu)[1]["stream"] is True


async def test_retry_429_then_success(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", ErrorResponse(429, retry_after=0), Reply("finally"))
    out = await run("x", config=config)
    assert out.text == "finally"
    assert out.diagnostics.raw.get("attempts") == 2
    assert routes(emu) == ["openai.responses.create"] * 2  # SDK retries are off: ours only


async def test_503_exhausts_retries(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", *[ErrorResponse(503)] * 3)
    with pytest.raises(APIError) as info:
        await run("x", config=config)
    assert info.value.status_code == 503
    assert info.value.retryable is True
    assert info.value.provider == "openai"
    assert len(emu.requests) == 3


async def test_auth_error_names_the_env_var(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", ErrorResponse(401))
    with pytest.raises(APIError) as info:
        await run("x", config=config)
    assert "OPENAI_API_KEY" in (info.value.hint or "")
    assert len(emu.requests) == 1


async def test_run_many_partial_results(emu: Emulator, config: Config) -> None:
    def handler(request: Any) -> Any:
        text = json.dumps(request.json)
        return ErrorResponse(429, retry_after=0) if "boom" in text else None

    emu.on("openai.responses", handler)
    results = await run_many(["fine", "boom", "also fine"], config=config)
    assert results.status == "partial"
    assert results.answers[0] == "Emulated reply to: fine"
    assert results.answers[2] == "Emulated reply to: also fine"
    failed = results.outputs[1]
    assert failed.metrics.completion_status == "error"
    assert isinstance(failed.diagnostics.raw.get("error"), dict)


async def test_mid_stream_cut_raises_without_done(emu: Emulator, config: Config) -> None:
    # created, in_progress, output_item.added, content_part.added, then the first text delta.
    emu.script("openai.responses", CutStream(after_events=5))
    seen: list[str] = []
    with pytest.raises(APIError) as caught:
        async for event in stream(Environment(), Input("tell me"), config=config):
            seen.append(event.type)
    assert "done" not in seen
    assert "text_delta" in seen
    # A cut after the connection was made is a broken connection, not a failure to connect
    # (it was "connect: Connection error." with a hint to check the network).
    assert caught.value.error_category == "network"
    assert "closed mid-stream" in str(caught.value)


async def test_stream_error_event_raises(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", StreamError("overloaded", after_events=3, code="server_error"))
    with pytest.raises(APIError, match="overloaded"):
        async for _event in stream(Environment(), Input("tell me"), config=config):
            pass


async def test_rate_limited_stream_open_is_retried(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", ErrorResponse(429, retry_after=0))
    events = [e async for e in stream(Environment(), Input("hi"), config=config)]
    assert events[-1].type == "done"
    assert len(bodies(emu)) == 2


async def test_context_overflow(emu: Emulator, config: Config) -> None:
    emu.script(
        "openai.responses",
        ErrorResponse(
            400,
            message="This model's maximum context length is 1000 tokens. However, your "
            "messages resulted in 1500 tokens.",
            code="context_length_exceeded",
        ),
    )
    from pollux import ContextOverflowError

    with pytest.raises(ContextOverflowError) as info:
        await run("x", config=config)
    assert (info.value.n_tokens, info.value.n_ctx) == (1500, 1000)
    assert len(emu.requests) == 1


async def test_rate_limit_error_type(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", *[ErrorResponse(429, retry_after=0)] * 3)
    with pytest.raises(RateLimitError):
        await run("x", config=config)


async def test_timeout_is_wrapped_and_retried(emu: Emulator) -> None:
    config = Config(
        provider="openai",
        model="gpt-5-nano",
        api_key="sk-test",
        retry=RetryPolicy(max_attempts=2, initial_delay_s=0.001, jitter=False),
        request_timeout_s=0.2,
    )
    emu.script("openai.responses", Latency(1.0))
    out = await run("slow", config=config)
    assert out.text == "Emulated reply to: slow"
    assert out.diagnostics.raw.get("attempts") == 2


async def test_dropped_connection_exhausts_into_a_network_error(emu: Emulator) -> None:
    config = Config(
        provider="openai",
        model="gpt-5-nano",
        api_key="sk-test",
        retry=RetryPolicy(max_attempts=1),
    )
    emu.script("openai.responses", DropConnection())
    with pytest.raises(APIError) as info:
        await run("x", config=config)
    assert info.value.retryable is True
    assert info.value.hint


async def test_history_is_replayed_as_input_items(emu: Emulator, config: Config) -> None:
    call = PolluxToolCall.from_text(
        id="call_1", name="get_weather", arguments_text='{"city":"Oslo"}'
    )
    history = [
        Message(role="user", content="Weather in Oslo?"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="21C", tool_call_id="call_1"),
        Message(role="assistant", content="It is 21C in Oslo."),
    ]
    out = await interact(
        Environment(tools=[WEATHER]), Input("And tomorrow?", history=history), config=config
    )
    assert out.text.endswith("And tomorrow?")
    assert out.continuation is not None  # a conversation can go on from here
    (body,) = bodies(emu)
    assert "previous_response_id" not in body
    assert [item.get("type", item.get("role")) for item in body["input"]] == [
        "user",
        "function_call",
        "function_call_output",
        "assistant",
        "user",
    ]


async def test_check_ready_reads_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with Emulator(models=["gpt-5-nano"]) as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        known = Config(provider="openai", model="gpt-5-nano", api_key="sk-test")
        readiness = await check_ready(known)
        assert (readiness.ready, readiness.model_verified, readiness.provider) == (
            True,
            True,
            "openai",
        )
        unknown = await check_ready(Config(provider="openai", model="gpt-9", api_key="sk-test"))
        assert unknown.ready is False
        assert "gpt-9" in unknown.message


async def test_malformed_body_is_retried(emu: Emulator, config: Config) -> None:
    emu.script("openai.responses", MalformedBody(), Reply("intact"))
    out = await run("x", config=config)
    assert out.text == "intact"
    assert out.diagnostics.raw.get("attempts") == 2
