"""pollux.run / run_many / interact / stream / Session with provider="gemini", through the
official google-genai SDK against the emulator's Gemini wire (asserting on its request log)."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from pollux import (
    APIError,
    Config,
    ConfigurationError,
    Continuation,
    Environment,
    Input,
    RateLimitError,
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
from pollux.testing import (
    CutStream,
    DropConnection,
    Emulator,
    ErrorResponse,
    GeminiReply,
    Reply,
    StreamError,
    ToolCall,
)

from .conftest import bodies, routes

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF-1.4\n" + b"0" * (2 << 20))  # 2 MiB: above the inline limit
    return path


async def test_run_text_usage_and_options_on_the_wire(emu: Emulator, config: Config) -> None:
    out = await run(
        "Name a colour", config=config, instructions="Be terse.", max_tokens=4096, seed=3
    )
    assert out.text
    assert out.usage.input_tokens > 0 and out.usage.output_tokens > 0
    assert out.metrics.finish_reason == "stop" and out.metrics.completion_status == "clean"
    (request,) = emu.requests_for("gemini.generate")
    assert request.route == "gemini.generate.content"
    assert request.headers.get("x-goog-api-key") == "test-key"
    body = request.json
    assert body["systemInstruction"]["parts"] == [{"text": "Be terse."}]
    assert body["generationConfig"]["maxOutputTokens"] == 4096
    assert body["generationConfig"]["seed"] == 3


async def test_same_pdf_over_five_run_many_calls_uploads_once(
    emu: Emulator, config: Config, pdf: Path
) -> None:
    async with Session(config) as session:
        for round_ in range(5):
            result = await session.run_many(
                [f"Q{round_}a?", f"Q{round_}b?"], sources=[Source.from_file(pdf)]
            )
            assert result.status == "ok"
    assert routes(emu).count("gemini.files.upload") >= 1
    uploads = [r for r in emu.requests_for("gemini.files.upload") if r.method == "POST"]
    starts = [r for r in uploads if "upload_id" not in r.query]
    assert len(starts) == 1  # one resumable upload for ten prompts over five calls
    file_uris = {
        part["fileData"]["fileUri"]
        for body in bodies(emu)
        for part in body["contents"][0]["parts"]
        if "fileData" in part
    }
    assert len(file_uris) == 1
    assert len(bodies(emu)) == 10
    # The Session deleted its upload when it closed.
    assert routes(emu)[-1] == "gemini.files.delete"


async def test_deleted_upload_is_detected_and_uploaded_again(
    emu: Emulator, config: Config, pdf: Path
) -> None:
    async with Session(config) as session:
        await session.run_many("Q1?", sources=[Source.from_file(pdf)])
        # Delete it behind pollux's back, as an expiry (48 h) would.
        emu.wire("gemini").files.clear()
        out = (await session.run_many("Q2?", sources=[Source.from_file(pdf)])).outputs[0]
        assert out.metrics.completion_status == "clean"
    starts = [r for r in emu.requests_for("gemini.files.upload") if "upload_id" not in r.query]
    assert len(starts) == 2
    first, second = (
        {p["fileData"]["fileUri"] for p in body["contents"][0]["parts"] if "fileData" in p}
        for body in bodies(emu)
    )
    assert first != second


async def test_structured_output_through_the_wire(emu: Emulator, config: Config) -> None:
    class Verdict(pydantic.BaseModel):
        label: str
        score: float | None = None

    out = await run("Classify: buy now!!!", config=config, output=Verdict)
    assert isinstance(out.structured, Verdict)
    (body,) = bodies(emu)
    generation = body["generationConfig"]
    assert generation["responseMimeType"] == "application/json"
    assert "title" not in generation["responseJsonSchema"]


async def test_tool_loop_with_thought_signatures_survives_json(
    emu: Emulator, config: Config
) -> None:
    gemini3 = Config(
        provider="gemini",
        model="gemini-3-flash-preview",
        api_key="test-key",
        retry=config.retry,
    )
    emu.script(
        "gemini.generate",
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})]),
        Reply(text="It is 20C in Paris."),
    )
    env = Environment(tools=[WEATHER])
    first = await interact(env, Input("Weather in Paris?"), config=gemini3)
    (call,) = first.tool_calls
    assert call.arguments == {"city": "Paris"}
    assert call.provider_state and call.provider_state.get("thought_signature")
    assert first.continuation is not None
    saved = json.dumps(first.continuation.to_jsonable())
    second = await interact(
        env,
        Input(
            continuation=Continuation.from_jsonable(json.loads(saved)),
            tool_results=[ToolResult(call_id=call.id, content='{"temp": 20}')],
        ),
        config=gemini3,
    )
    assert second.text == "It is 20C in Paris."
    replay = bodies(emu)[1]["contents"]
    assert [c["role"] for c in replay] == ["user", "model", "user"]
    assert replay[1]["parts"][0]["thoughtSignature"] == call.provider_state["thought_signature"]
    assert replay[2]["parts"][0]["functionResponse"]["response"] == {"temp": 20}


async def test_finish_reasons_and_blocked_prompts(emu: Emulator, config: Config) -> None:
    emu.script(
        "gemini.generate",
        GeminiReply(finish_reason="SAFETY"),
        GeminiReply(block_reason="PROHIBITED_CONTENT"),
        Reply(text="cut", truncated=True),
    )
    async with Session(config) as session:
        safety = (await session.run_many("a")).outputs[0]
        blocked = (await session.run_many("b")).outputs[0]
        truncated = (await session.run_many("c")).outputs[0]
    assert safety.metrics.completion_status == "cutoff" and safety.metrics.finish_reason == "safety"
    assert blocked.metrics.completion_status == "cutoff"
    assert blocked.metrics.finish_reason == "prohibited_content"
    assert truncated.metrics.completion_status == "truncated"


async def test_stream_matches_interact_and_emits_reasoning(emu: Emulator, config: Config) -> None:
    reply = Reply(text="Streaming works fine.", reasoning="Thinking it over.")
    emu.script("gemini.generate", reply, reply)
    env = Environment()
    events = [e async for e in stream(env, Input("Go"), config=config, reasoning_budget_tokens=128)]
    once = await interact(env, Input("Go"), config=config, reasoning_budget_tokens=128)
    kinds = [e.type for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert "reasoning_delta" in kinds and "text_delta" in kinds
    done = events[-1].output
    assert done is not None
    assert done.text == once.text == "Streaming works fine."
    assert done.reasoning == once.reasoning
    assert done.usage == once.usage
    assert emu.requests[0].route == "gemini.generate.stream"


async def test_rate_limit_retry_info_then_success(emu: Emulator, config: Config) -> None:
    emu.script("gemini.generate", ErrorResponse(429, retry_after=0.001), Reply(text="ok"))
    out = await run("Q", config=config)
    assert out.text == "ok"
    assert len(emu.requests_for("gemini.generate")) == 2
    assert out.diagnostics.raw["attempts"] == 2


async def test_exhausted_retries_surface_a_rate_limit_error(emu: Emulator, config: Config) -> None:
    emu.script("gemini.generate", *[ErrorResponse(429, retry_after=0.001)] * 3)
    with pytest.raises(RateLimitError) as info:
        await run("Q", config=config)
    assert info.value.provider == "gemini" and info.value.retry_after_s is not None
    assert len(emu.requests_for("gemini.generate")) == 3  # pollux's 3 attempts, no SDK retries


async def test_wrong_key_names_gemini_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with Emulator(api_key="right") as emulator:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emulator.base_url("gemini"))
        bad = Config(provider="gemini", model="gemini-2.5-flash", api_key="wrong")
        with pytest.raises(APIError) as info:
            await run("Q", config=bad)
        ready = await check_ready(bad)
    assert "GEMINI_API_KEY" in (info.value.hint or "")
    assert not info.value.retryable
    assert not ready.ready
    assert "wrong" not in str(info.value) and "wrong" not in (info.value.hint or "")


async def test_check_ready(emu: Emulator, config: Config) -> None:
    ready = await check_ready(config)
    assert ready.ready and ready.model_verified


async def test_youtube_video_settings_and_url_context(emu: Emulator, config: Config) -> None:
    video = Source.from_youtube("https://www.youtube.com/watch?v=abc").with_gemini_video_settings(
        start_offset="10s", fps=1.0
    )
    page = Source.from_uri(
        "https://example.com/post", mime_type="text/html"
    ).with_gemini_url_context()
    paper = Source.from_arxiv("2301.07041")
    await run("Summarize", sources=[video, page, paper], config=config)
    (body,) = bodies(emu)
    parts = body["contents"][0]["parts"]
    assert parts[0]["fileData"]["fileUri"] == "https://www.youtube.com/watch?v=abc"
    assert parts[0]["videoMetadata"] == {"startOffset": "10s", "fps": 1.0}
    assert parts[1] == {"text": "https://example.com/post"}
    assert parts[2]["fileData"] == {
        "fileUri": "https://arxiv.org/pdf/2301.07041.pdf",
        "mimeType": "application/pdf",
    }
    assert {"urlContext": {}} in body["tools"]


async def test_small_bytes_inline_and_text_files_read(
    emu: Emulator, config: Config, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nship friday")
    image = Source.from_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 64, mime_type="image/png")
    await run("Q", sources=[Source.from_file(notes), image], config=config)
    parts = bodies(emu)[0]["contents"][0]["parts"]
    assert parts[0] == {"text": "# Notes\nship friday"}
    assert parts[1]["inlineData"]["mimeType"] == "image/png"
    assert "gemini.files.upload" not in routes(emu)


async def test_config_base_url_stays_refused() -> None:
    with pytest.raises(ConfigurationError):
        Config(provider="gemini", model="gemini-2.5-flash", api_key="k", base_url="http://x")


async def test_processing_file_is_polled_until_active(
    emu: Emulator, config: Config, pdf: Path
) -> None:
    emu.wire("gemini").file_processing_polls = 2
    out = await run("Q", sources=[Source.from_file(pdf)], config=config)
    assert out.metrics.completion_status == "clean"
    assert len(emu.requests_for("gemini.files.get")) == 3  # PROCESSING, PROCESSING, ACTIVE


async def test_failed_file_processing_is_an_api_error_with_hint(
    emu: Emulator, config: Config, pdf: Path
) -> None:
    wire = emu.wire("gemini")
    wire.file_processing_polls = 1

    def fail(request: object) -> None:
        for name in list(wire.files):
            wire.fail_file(name, "not a real PDF")

    emu.on("gemini.files.get", fail)
    with pytest.raises(APIError) as info:
        await run("Q", sources=[Source.from_file(pdf)], config=config)
    assert info.value.phase == "upload" and not info.value.retryable
    assert "not a real PDF" in str(info.value) and "mime_type" in (info.value.hint or "")
    assert not emu.requests_for("gemini.generate")  # nothing generated over a failed file


async def test_run_many_keeps_prompt_order_and_partial_failures(
    emu: Emulator, config: Config
) -> None:
    emu.script(
        "gemini.generate", Reply(text="one"), ErrorResponse(400, message="bad"), Reply(text="three")
    )
    one_at_a_time = Config(
        provider="gemini",
        model=config.model,
        api_key="test-key",
        retry=config.retry,
        request_concurrency=1,
    )
    async with Session(one_at_a_time) as session:
        result = await session.run_many(["a", "b", "c"])
    assert result.answers[0] == "one" and result.answers[2] == "three"
    assert result.outputs[1].metrics.completion_status == "error"
    assert result.status == "partial"


async def test_stream_faults_before_the_first_chunk_are_retried(
    emu: Emulator, config: Config
) -> None:
    emu.script("gemini.generate.stream", ErrorResponse(503), Reply(text="recovered"))
    events = [e async for e in stream(Environment(), Input("Go"), config=config)]
    assert events[-1].output is not None and events[-1].output.text == "recovered"
    assert len(emu.requests_for("gemini.generate.stream")) == 2


@pytest.mark.parametrize("fault", [StreamError(after_events=1), CutStream(after_events=1)])
async def test_stream_faults_mid_stream_raise_api_error(
    emu: Emulator, config: Config, fault: StreamError | CutStream
) -> None:
    emu.script("gemini.generate.stream", fault)
    seen: list[str] = []
    with pytest.raises(APIError) as info:
        async for event in stream(Environment(), Input("Tell me a long story"), config=config):
            seen.append(event.type)
    assert info.value.provider == "gemini" and info.value.phase == "stream"
    assert "done" not in seen
    assert len(emu.requests_for("gemini.generate.stream")) == 1  # not retried once chunks flowed


async def test_dropped_connection_is_retried(emu: Emulator, config: Config) -> None:
    emu.script("gemini.generate.content", DropConnection(), Reply(text="second try"))
    out = await run("Q", config=config)
    assert out.text == "second try"
    assert len(emu.requests_for("gemini.generate")) == 2


async def test_concurrent_calls_share_one_upload(emu: Emulator, config: Config, pdf: Path) -> None:
    import asyncio

    async with Session(config) as session:
        results = await asyncio.gather(
            *(session.run_many(f"Q{i}?", sources=[Source.from_file(pdf)]) for i in range(4))
        )
    assert all(r.status == "ok" for r in results)
    starts = [r for r in emu.requests_for("gemini.files.upload") if "upload_id" not in r.query]
    assert len(starts) == 1
    stored = list(emu.wire("gemini").files.values())
    assert not stored  # deleted when the Session closed


async def test_portable_history_on_gemini_3_passes_signature_validation(emu: Emulator) -> None:
    from pollux import Message
    from pollux import ToolCall as PolluxToolCall

    gemini3 = Config(provider="gemini", model="gemini-3-flash-preview", api_key="test-key")
    call = PolluxToolCall.from_text(id="c1", name="get_weather", arguments_text='{"city": "Oslo"}')
    history = [
        Message(role="user", content="Weather in Oslo?"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content='{"temp": -3}', tool_call_id="c1"),
    ]
    emu.script("gemini.generate", Reply(text="It is -3C."))
    out = await interact(
        Environment(tools=[WEATHER]), Input("Summarize.", history=history), config=gemini3
    )
    assert out.text == "It is -3C."
    model_turn = bodies(emu)[0]["contents"][1]
    assert model_turn["parts"][0]["thoughtSignature"]  # Google's placeholder, base64


async def test_malformed_function_call_is_a_tool_call_parse_error(
    emu: Emulator, config: Config
) -> None:
    from pollux import ToolCallParseError

    emu.script("gemini.generate", Reply(tool_calls=[ToolCall("get_weather", '{"city": ')]))
    emu.script("gemini.generate", Reply(tool_calls=[ToolCall("get_weather", '{"city": ')]))
    env = Environment(tools=[WEATHER])
    with pytest.raises(ToolCallParseError) as info:
        await interact(env, Input("Weather?"), config=config)
    assert info.value.hint
    result = await run_many("Weather?", tools=[WEATHER], config=config)
    assert result.outputs[0].metrics.completion_status == "error"
