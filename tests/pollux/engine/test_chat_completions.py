"""The local and OpenRouter providers end to end against the emulator: wire, faults, retries."""

from __future__ import annotations

import base64
import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import pollux
from pollux import (
    APIError,
    Config,
    ConfigurationError,
    ContextOverflowError,
    Environment,
    Input,
    Output,
    RateLimitError,
    RetryPolicy,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
)
from pollux.testing import (
    CutStream,
    DropConnection,
    Emulator,
    ErrorResponse,
    Latency,
    Reply,
    StreamError,
    ToolCall,
)

from .conftest import FAST_RETRY

WEATHER = ToolDeclaration(
    name="get_weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def _timeless(output: Output) -> Output:
    return dataclasses.replace(output, metrics=dataclasses.replace(output.metrics, duration_s=0.0))


def _chat_bodies(emu: Emulator) -> list[dict[str, object]]:
    return [r.json for r in emu.requests_for("local.chat") if isinstance(r.json, dict)]


# -- happy paths -------------------------------------------------------------------------------


async def test_run_many_sends_the_shared_source_once_per_prompt(
    emu: Emulator, local_config: Config
) -> None:
    source = Source.from_text("Shared context. " * 40)
    result = await pollux.run_many(
        ["First?", "Second?", "Third?"],
        sources=[source],
        config=local_config,
        instructions="Answer briefly.",
        temperature=0.2,
        top_p=0.9,
        max_tokens=4096,
        seed=7,
    )
    assert result.status == "ok"
    assert all(answer.endswith(("First?", "Second?", "Third?")) for answer in result.answers)
    bodies = _chat_bodies(emu)
    assert len(bodies) == 3
    for body in bodies:
        messages = body["messages"]
        assert isinstance(messages, list)
        assert messages[0] == {"role": "system", "content": "Answer briefly."}
        assert messages[1]["role"] == "user"
        assert messages[1]["content"].count("Shared context.") == 40
        # Nothing is silently dropped: every generation parameter reaches the wire.
        assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
            0.2,
            0.9,
            4096,
            7,
        )
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


async def test_media_sources_become_data_urls(
    emu: Emulator, local_config: Config, tmp_path: Path
) -> None:
    image = tmp_path / "dot.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\nfake")
    audio = tmp_path / "note.mp3"
    audio.write_bytes(b"ID3fake")
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nhello", encoding="utf-8")
    await pollux.run(
        "Describe",
        sources=[Source.from_file(image), Source.from_file(audio), Source.from_file(notes)],
        config=local_config,
    )
    content = _chat_bodies(emu)[-1]["messages"][0]["content"]  # type: ignore[index]
    kinds = [part["type"] for part in content]
    assert kinds == ["image_url", "input_audio", "text", "text"]
    url = content[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == image.read_bytes()
    assert content[1]["input_audio"]["format"] == "mp3"
    assert content[2]["text"].startswith("# Notes")


async def test_unsupported_source_is_rejected_before_any_request(
    emu: Emulator, local_config: Config, tmp_path: Path
) -> None:
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    with pytest.raises(ConfigurationError, match="cannot send") as info:
        await pollux.run("Summarize", source=Source.from_file(pdf), config=local_config)
    assert info.value.hint
    with pytest.raises(ConfigurationError, match="reasoning_effort"):
        await pollux.run("Think", config=local_config, reasoning_effort="high")
    assert emu.requests_for("local.chat") == []


async def test_structured_output_uses_strict_json_schema(
    emu: Emulator, local_config: Config
) -> None:
    class City(BaseModel):
        name: str
        population: int

    emu.script("local", Reply(structured={"name": "Paris", "population": 2100000}))
    out = await pollux.run("Largest French city?", config=local_config, output=City)
    assert out.structured == City(name="Paris", population=2100000)
    fmt = _chat_bodies(emu)[-1]["response_format"]
    assert fmt["type"] == "json_schema"  # type: ignore[index]
    schema = fmt["json_schema"]["schema"]  # type: ignore[index]
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["name", "population"]


async def test_invalid_structured_output_is_reported_not_hidden(
    emu: Emulator, local_config: Config
) -> None:
    class City(BaseModel):
        name: str

    emu.script("local", Reply(structured={"wrong": 1}))
    out = await pollux.run("City?", config=local_config, output=City)
    assert out.structured is None
    assert "does not validate" in out.diagnostics.raw["structured_error"]


async def test_reasoning_content_and_usage_are_surfaced(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", Reply(text="42", reasoning="Because.", reasoning_tokens=5))
    out = await pollux.run("Why?", config=local_config)
    assert (out.text, out.reasoning) == ("42", "Because.")
    assert out.usage.reasoning_tokens == 5
    assert out.diagnostics.raw["response"]["text"] == "42"


async def test_truncation_by_max_tokens(emu: Emulator, local_config: Config) -> None:
    emu.script("local", Reply(text="partial", truncated=True))
    out = await pollux.run("Long?", config=local_config, max_tokens=3)
    assert out.metrics.finish_reason == "length"
    assert out.metrics.completion_status == "truncated"


# -- tool loops and streaming ------------------------------------------------------------------


async def test_tool_loop_continuation_does_not_repeat_sources(
    emu: Emulator, local_config: Config
) -> None:
    env = Environment(
        instructions="Use tools.", sources=[Source.from_text("SOURCE-TEXT")], tools=[WEATHER]
    )
    emu.script(
        "local",
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})]),
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Rome"})]),
        Reply(text="Paris is sunny, Rome is rainy."),
    )
    out = await pollux.interact(env, Input("Weather in Paris and Rome?"), config=local_config)
    turns = 0
    while out.tool_calls:
        turns += 1
        results = [
            ToolResult(call_id=c.id, content=f"{c.arguments_dict()['city']}: ok", is_error=False)
            for c in out.tool_calls
        ]
        out = await pollux.interact(
            env, Input(continuation=out.continuation, tool_results=results), config=local_config
        )
    assert turns == 2
    assert out.text == "Paris is sunny, Rome is rainy."
    last = _chat_bodies(emu)[-1]
    messages = last["messages"]
    assert isinstance(messages, list)
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    # The source rides on the first user message only, however long the loop gets.
    assert str(last).count("SOURCE-TEXT") == 1
    assert last["tools"][0]["function"]["name"] == "get_weather"  # type: ignore[index]


async def test_tool_error_results_are_forwarded(emu: Emulator, local_config: Config) -> None:
    env = Environment(tools=[WEATHER])
    emu.script("local", Reply(tool_calls=[ToolCall("get_weather", {"city": "X"})]), Reply("ok"))
    out = await pollux.interact(env, Input("Weather?"), config=local_config)
    failed = [ToolResult(call_id=out.tool_calls[0].id, content="no such city", is_error=True)]
    await pollux.interact(
        env, Input(continuation=out.continuation, tool_results=failed), config=local_config
    )
    tool_message = _chat_bodies(emu)[-1]["messages"][-1]  # type: ignore[index]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == "ERROR: no such city"


async def test_stream_timeline_and_done_equals_interact(
    emu: Emulator, local_config: Config
) -> None:
    env = Environment(tools=[WEATHER])
    reply = Reply(
        text="Checking the weather.",
        reasoning="Need the tool.",
        tool_calls=[ToolCall("get_weather", {"city": "Oslo"}, call_id="call_oslo")],
    )
    emu.script("local", reply, reply)
    expected = await pollux.interact(env, Input("Weather in Oslo?"), config=local_config)
    events = [e async for e in pollux.stream(env, Input("Weather in Oslo?"), config=local_config)]
    types = [e.type for e in events]
    assert types[0] == "start" and types[-2:] == ["finish", "done"]
    for kind in ("text_delta", "reasoning_delta", "tool_call_delta", "tool_call", "usage"):
        assert kind in types
    assert types.index("tool_call") > max(i for i, t in enumerate(types) if t == "usage")
    assert "".join(e.text for e in events if e.type == "text_delta") == expected.text
    done = events[-1].output
    assert done is not None
    # Same exchange, same Output; only the emulator's per-request response id differs.
    assert done.diagnostics.raw["response"].pop("response_id")
    assert expected.diagnostics.raw["response"].pop("response_id")
    assert _timeless(done) == _timeless(expected)
    body = _chat_bodies(emu)[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("fault", [CutStream(after_events=2), StreamError(after_events=1)])
async def test_mid_stream_failure_raises_without_done(
    emu: Emulator, local_config: Config, fault: object
) -> None:
    emu.script("local", fault)  # type: ignore[arg-type]
    seen: list[str] = []
    with pytest.raises(APIError) as info:
        async for event in pollux.stream(Environment(), Input("Hello there"), config=local_config):
            seen.append(event.type)
    assert "done" not in seen and seen[0] == "start"
    assert info.value.phase == "stream" and info.value.provider == "local"
    assert info.value.hint


async def test_stream_is_retried_before_the_first_chunk(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", ErrorResponse(503), Reply("recovered"))
    events = [e async for e in pollux.stream(Environment(), Input("Hi"), config=local_config)]
    assert events[-1].output is not None and events[-1].output.text == "recovered"


async def test_breaking_out_of_a_stream_closes_it(emu: Emulator, local_config: Config) -> None:
    async with Session(local_config) as session:
        events = session.stream(Environment(), Input("A fairly long answer please " * 3))
        async for event in events:
            if event.type == "text_delta":
                break
        await events.aclose()
        # The broken-off connection is not reused; the next call works on a fresh one.
        out = await session.interact(Environment(), Input("Next"))
        assert out.text


# -- failures, retries, partial results --------------------------------------------------------


async def test_429_then_success_is_retried(emu: Emulator, local_config: Config) -> None:
    emu.script("local", ErrorResponse(429, retry_after=0.01), Reply("fine"))
    out = await pollux.run("Hi", config=local_config)
    assert out.text == "fine"
    assert out.diagnostics.raw["attempts"] == 2
    assert len(emu.requests_for("local.chat")) == 2


async def test_503_exhausting_retries_raises_attributed_error(
    emu: Emulator, local_config: Config
) -> None:
    emu.script("local", *[ErrorResponse(503)] * 3)
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=local_config)
    error = info.value
    assert (error.status_code, error.provider, error.phase) == (503, "local", "generate")
    assert error.retryable is True and error.error_category == "capacity"
    assert error.call_idx == 0
    assert "logs" in (error.hint or "")
    assert len(emu.requests_for("local.chat")) == FAST_RETRY.max_attempts


async def test_400_is_not_retried_and_has_a_hint(emu: Emulator, local_config: Config) -> None:
    emu.script("local", ErrorResponse(400, message="Unknown parameter: foo"))
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=local_config)
    assert info.value.status_code == 400 and info.value.retryable is False
    assert "Unknown parameter: foo" in str(info.value)
    assert info.value.hint
    assert len(emu.requests_for("local.chat")) == 1


async def test_429_exhausted_is_a_rate_limit_error(emu: Emulator, local_config: Config) -> None:
    emu.script("local", *[ErrorResponse(429)] * 3)
    with pytest.raises(RateLimitError) as info:
        await pollux.run("Hi", config=local_config)
    assert "request_concurrency" in (info.value.hint or "")


async def test_context_overflow_carries_token_counts(emu: Emulator, local_config: Config) -> None:
    message = "request (5000 tokens) exceeds the available context size (4096 tokens)"
    emu.script("local", ErrorResponse(400, message=message))
    with pytest.raises(ContextOverflowError) as info:
        await pollux.run("Hi", config=local_config)
    assert (info.value.n_tokens, info.value.n_ctx) == (5000, 4096)
    assert info.value.retryable is False
    assert len(emu.requests_for("local.chat")) == 1


async def test_timeout_is_reported_with_the_setting(emu: Emulator) -> None:
    config = Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        request_timeout_s=0.2,
        retry=RetryPolicy(max_attempts=1),
    )
    emu.script("local", Latency(2.0))
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert info.value.error_category == "timeout"
    assert "request_timeout_s" in (info.value.hint or "")


async def test_dropped_connection_is_retried(emu: Emulator, local_config: Config) -> None:
    emu.script("local", DropConnection(), Reply("after the drop"))
    out = await pollux.run("Hi", config=local_config)
    assert out.text == "after the drop"


async def test_partial_results_keep_the_other_answers(emu: Emulator) -> None:
    config = Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        request_concurrency=1,
        retry=RetryPolicy(max_attempts=1),
    )
    emu.script("local", Reply("one"), ErrorResponse(500, message="boom"), Reply("three"))
    result = await pollux.run_many(["1?", "2?", "3?"], config=config)
    assert result.status == "partial"
    assert result.answers == ["one", "", "three"]
    failed = result.outputs[1]
    assert failed.metrics.completion_status == "error"
    assert failed.metrics.duration_s > 0
    error = failed.diagnostics.error
    assert error is not None
    assert (error["status_code"], error["call_idx"], error["type"]) == (500, 1, "APIError")
    assert "boom" in error["message"] and error["hint"]
    assert result.errors[0] is None and result.errors[2] is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_server_down_names_the_env_var() -> None:
    config = Config(
        provider="local",
        base_url=f"http://127.0.0.1:{_free_port()}/v1",
        retry=RetryPolicy(max_attempts=1),
    )
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert "POLLUX_LOCAL_BASE_URL" in (info.value.hint or "")
    status = await pollux.check_ready(config)
    assert status.ready is False and "POLLUX_LOCAL_BASE_URL" in status.message


async def test_check_ready_lists_the_model(emu: Emulator, local_config: Config) -> None:
    status = await pollux.check_ready(local_config)
    assert status.ready and status.model_verified and status.status_code == 200
    missing = dataclasses.replace(local_config, model="not-loaded")
    status = await pollux.check_ready(missing)
    assert not status.ready and "not-loaded" in status.message


async def test_unknown_model_error_has_a_hint() -> None:
    with Emulator(models=["served-model"]) as emu:
        config = Config(
            provider="local",
            model="other",
            base_url=emu.base_url("local"),
            retry=RetryPolicy(max_attempts=1),
        )
        with pytest.raises(APIError) as info:
            await pollux.run("Hi", config=config)
    assert "other" in (info.value.hint or "")


async def test_session_reuses_connections(emu: Emulator, local_config: Config) -> None:
    async with Session(local_config) as session:
        for _ in range(3):
            await session.interact(Environment(), Input("Hi"))
        provider = session._provider
        assert provider is not None
        pool = provider.pool  # type: ignore[attr-defined]
        assert len(pool._idle) == 1


# -- OpenRouter --------------------------------------------------------------------------------


@pytest.fixture
def openrouter(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, Config]]:
    with Emulator(models=["openai/gpt-4o-mini"]) as emu:
        monkeypatch.setenv("OPENROUTER_BASE_URL", emu.base_url("openrouter"))
        config = Config(
            provider="openrouter",
            model="openai/gpt-4o-mini",
            api_key="sk-or-test",
            retry=FAST_RETRY,
        )
        yield emu, config


async def test_openrouter_catalog_is_fetched_once_per_session(
    openrouter: tuple[Emulator, Config],
) -> None:
    emu, config = openrouter
    async with Session(config) as session:
        await session.run_many(["a", "b"])
        await session.interact(Environment(), Input("c"), reasoning_effort="low")
        provider = session._provider
        assert provider is not None and provider.catalog_fetches == 1  # type: ignore[attr-defined]
    chats = emu.requests_for("openrouter.chat")
    assert chats[-1].json["reasoning"] == {"effort": "low"}
    assert chats[-1].headers["authorization"] == "Bearer sk-or-test"
    catalogs = [r for r in emu.requests if r.path.endswith("/models")]
    assert len(catalogs) == 1


async def test_openrouter_rejects_unknown_model_and_unsupported_parameter(
    openrouter: tuple[Emulator, Config],
) -> None:
    emu, config = openrouter
    with pytest.raises(ConfigurationError, match="does not list"):
        await pollux.run("Hi", config=dataclasses.replace(config, model="nope/unknown"))
    with pytest.raises(ConfigurationError, match="seed"):
        await pollux.run("Hi", config=config, seed=1)
    assert emu.requests_for("openrouter.chat") == []


async def test_openrouter_unknown_model_hint_suggests_listed_ids(
    openrouter: tuple[Emulator, Config],
) -> None:
    _, config = openrouter
    with pytest.raises(ConfigurationError) as typo:
        await pollux.run("Hi", config=dataclasses.replace(config, model="openai/gpt-4o-mni"))
    assert "Did you mean 'openai/gpt-4o-mini'" in (typo.value.hint or "")


async def test_openrouter_unknown_model_hint_never_suggests_the_refused_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The emulator's default catalog lists 'emulator-model' only; the hint used to suggest
    # 'openai/gpt-4o-mini', the very model it had just refused.
    with Emulator() as emu:
        monkeypatch.setenv("OPENROUTER_BASE_URL", emu.base_url("openrouter"))
        config = Config(provider="openrouter", model="openai/gpt-4o-mini", api_key="sk-or-test")
        with pytest.raises(ConfigurationError, match="does not list") as info:
            await pollux.run("Hi", config=config)
    hint = info.value.hint or ""
    assert "'emulator-model'" in hint and "gpt-4o-mini" not in hint


async def test_openrouter_auth_error_names_the_env_var(
    openrouter: tuple[Emulator, Config],
) -> None:
    emu, config = openrouter
    emu.script("openrouter.chat", ErrorResponse(401))
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert info.value.error_category == "auth_refreshable" and info.value.retryable is False
    assert "OPENROUTER_API_KEY" in (info.value.hint or "")


async def test_shared_text_is_spliced_exactly(emu: Emulator, local_config: Config) -> None:
    tricky = 'Quotes " and \\ backslashes, tabs\t, newlines\n, unicode é 漢字 🚀, nul-ish \\u0000'
    second = "Second source."
    await pollux.run_many(
        ["Q1?", 'Q2 "quoted"?'],
        sources=[Source.from_text(tricky), Source.from_text(second)],
        config=local_config,
    )
    contents = sorted(body["messages"][0]["content"] for body in _chat_bodies(emu))  # type: ignore[index]
    assert contents == sorted(
        [f"{tricky}\n\n{second}\n\nQ1?", f'{tricky}\n\n{second}\n\nQ2 "quoted"?']
    )


async def test_server_tool_json_failure_is_a_tool_call_parse_error(
    emu: Emulator, local_config: Config
) -> None:
    from pollux import ToolCallParseError

    message = "Failed to parse tool call arguments as JSON"
    emu.script("local", ErrorResponse(500, message=message))
    with pytest.raises(ToolCallParseError):
        await pollux.run("Hi", config=dataclasses.replace(local_config, retry=RetryPolicy(1)))
    emu.script("local", Reply("fine"), ErrorResponse(400, message=message))
    one_at_a_time = dataclasses.replace(local_config, request_concurrency=1)
    result = await pollux.run_many(["a", "b"], config=one_at_a_time)
    assert result.status == "partial"
    assert result.errors[1] is not None and result.errors[1]["type"] == "ToolCallParseError"


async def test_malformed_tool_arguments_are_kept_raw(emu: Emulator, local_config: Config) -> None:
    from pollux import ToolCallParseError

    emu.script("local", Reply(tool_calls=[ToolCall("get_weather", '{"city": "Par')]))
    out = await pollux.interact(Environment(tools=[WEATHER]), Input("Hi"), config=local_config)
    call = out.tool_calls[0]
    assert call.arguments_text == '{"city": "Par' and call.arguments is None
    assert call.arguments_error
    with pytest.raises(ToolCallParseError):
        call.arguments_dict()


async def test_declared_capabilities_override_the_table(
    emu: Emulator, local_config: Config
) -> None:
    limited = dataclasses.replace(local_config, capabilities={"structured_outputs": False})
    with pytest.raises(ConfigurationError, match="structured output"):
        await pollux.run("Hi", config=limited, output={"type": "object", "properties": {}})
    assert emu.requests_for("local.chat") == []


async def test_provider_options_pass_through_but_never_overwrite(
    emu: Emulator, local_config: Config
) -> None:
    options = {"local": {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}}
    await pollux.run("Hi", config=local_config, provider_options=options)
    body = _chat_bodies(emu)[-1]
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["top_k"] == 20
    emu.clear_requests()
    with pytest.raises(ConfigurationError, match="max_tokens"):
        await pollux.run(
            "Hi", config=local_config, max_tokens=5, provider_options={"local": {"max_tokens": 9}}
        )
    assert emu.requests_for("local.chat") == []


async def test_a_rate_limit_pauses_the_whole_session(emu: Emulator, local_config: Config) -> None:
    emu.script("local", ErrorResponse(429, retry_after=0.05))
    async with Session(local_config) as session:
        result = await session.run_many([f"q{i}?" for i in range(6)])
        assert result.status == "ok"
        assert session._pacer.pause_s() == 0.0
        # The 429 was seen and recorded for everyone, then the pause expired.
        assert session._pacer._until > 0


async def test_plain_chat_continues_without_tools(emu: Emulator, local_config: Config) -> None:
    env = Environment(instructions="Be brief.", sources=[Source.from_text("DOC")])
    emu.script("local", Reply("Paris."), Reply("About 2 million."))
    first = await pollux.interact(env, Input("Capital of France?"), config=local_config)
    assert first.continuation is not None
    second = await pollux.interact(
        env, Input("Population?", continuation=first.continuation), config=local_config
    )
    assert second.text == "About 2 million."
    messages = _chat_bodies(emu)[-1]["messages"]
    assert isinstance(messages, list)
    assert [(m["role"], m["content"]) for m in messages] == [
        ("system", "Be brief."),
        ("user", "DOC\n\nCapital of France?"),
        ("assistant", "Paris."),
        ("user", "Population?"),
    ]
    fan_out = await pollux.run_many(["a", "b"], config=local_config)
    assert len(fan_out.outputs) == 2
    assert all(output.continuation is None for output in fan_out.outputs)


async def test_portable_history_is_replayed(emu: Emulator, local_config: Config) -> None:
    from pollux import Message
    from pollux import ToolCall as PolluxToolCall

    call = PolluxToolCall.from_text(
        id="call_1", name="get_weather", arguments_text='{"city":"Rome"}'
    )
    history = [
        Message(role="user", content="Weather in Rome?"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="rainy", tool_call_id="call_1"),
        Message(role="assistant", content="It is rainy."),
    ]
    env = Environment(sources=[Source.from_text("DOC")], tools=[WEATHER])
    out = await pollux.interact(env, Input("And tomorrow?", history=history), config=local_config)
    assert out.continuation is not None
    messages = _chat_bodies(emu)[-1]["messages"]
    assert isinstance(messages, list)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[0]["content"] == "DOC\n\nWeather in Rome?"
    assert messages[1]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Rome"}',
    }
    assert messages[2] == {"role": "tool", "content": "rainy", "tool_call_id": "call_1"}


def test_errors_embedded_in_a_200_body_use_their_code() -> None:
    from pollux.providers.local import LocalProvider
    from pollux.providers.openai_compat.provider import _embedded_status

    provider = LocalProvider(Config(provider="local", base_url="http://127.0.0.1:9/v1"))
    body = {"error": {"code": 429, "message": "Rate limit exceeded upstream"}}
    error = provider._status_error(_embedded_status(body, 200), body, None, "generate")
    assert isinstance(error, RateLimitError) and error.retryable is True
    assert _embedded_status({"error": {"code": "server_error"}}, None) is None


async def test_openrouter_catalog_read_is_retried(openrouter: tuple[Emulator, Config]) -> None:
    emu, config = openrouter
    emu.script("openrouter.models", ErrorResponse(503))
    out = await pollux.run("Hi", config=config)
    assert out.text
    catalogs = [r for r in emu.requests if r.path.endswith("/models")]
    assert len(catalogs) == 2


async def test_encoded_sources_are_reused_within_a_session(
    emu: Emulator, local_config: Config, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("version one", encoding="utf-8")
    env = Environment(sources=[Source.from_file(notes)])
    async with Session(local_config) as session:
        await session.interact(env, Input("First?"))
        await session.interact(env, Input("Second?"))
        provider = session._provider
        assert provider is not None and provider.prepared_hits == 1  # type: ignore[attr-defined]
        notes.write_text("version two, longer", encoding="utf-8")
        await session.interact(Environment(sources=[Source.from_file(notes)]), Input("Third?"))
        assert provider.prepared_hits == 1  # type: ignore[attr-defined]
    contents = [body["messages"][0]["content"] for body in _chat_bodies(emu)]  # type: ignore[index]
    assert contents == [
        "version one\n\nFirst?",
        "version one\n\nSecond?",
        "version two, longer\n\nThird?",
    ]
