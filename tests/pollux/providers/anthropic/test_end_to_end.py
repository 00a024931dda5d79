"""pollux.run / run_many / interact / stream / Session with provider="anthropic", through the
official ``anthropic`` SDK against the emulator's Anthropic wire, asserting on the emulator's
request log as well as on the Outputs.

The SDK reads ``ANTHROPIC_BASE_URL``; that is how the provider is pointed at the emulator
(``Config`` keeps ``base_url`` for local servers only).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from pollux import (
    APIError,
    CachePolicy,
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
    prepare_environment,
    run,
    run_many,
    stream,
)
from pollux.testing import AnthropicReply, CutStream, Emulator, ErrorResponse, StreamError

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_delay_s=0.005)
MODEL = "claude-haiku-4-5"

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)

LONG = "The quick brown fox jumps over the lazy dog. " * 500  # over Haiku 4.5's 4096 minimum


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url("anthropic"))
        yield emulator


@pytest.fixture
def config(emu: Emulator) -> Config:
    return Config(
        provider="anthropic",
        model=MODEL,
        api_key="sk-ant-test",
        retry=FAST_RETRY,
        request_timeout_s=5.0,
    )


def bodies(emu: Emulator) -> list[dict[str, Any]]:
    return [r.json for r in emu.requests_for("anthropic.messages.create")]


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where the request carries cache_control, in prefix order."""
    marks = [f"tool:{t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    marks += ["system" for b in body.get("system", []) if "cache_control" in b]
    for index, message in enumerate(body["messages"]):
        for block in message["content"]:
            if isinstance(block, dict) and "cache_control" in block:
                marks.append(f"message{index}:{block['type']}")
    return marks


# ------------------------------------------------------------------ text, usage, options


async def test_run_sends_system_and_default_max_tokens(emu: Emulator, config: Config) -> None:
    out = await run("Hello there", config=config, instructions="Be brief.")
    assert out.text == "Emulated reply to: Hello there"
    assert out.metrics.finish_reason == "stop"
    assert out.metrics.completion_status == "clean"
    (body,) = bodies(emu)
    assert body["model"] == MODEL
    assert body["max_tokens"] == 16384
    assert body["system"][0]["text"] == "Be brief."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hello there"}]}
    ]
    assert "seed" not in body
    assert out.usage.input_tokens > 0
    assert out.usage.total_tokens == out.usage.input_tokens + out.usage.output_tokens
    # The SDK's own retries are off: one request per attempt (see the 429 test).
    (recorded,) = emu.requests_for("anthropic.messages.create")
    assert recorded.headers.get("x-stainless-retry-count") in (None, "0")


async def test_seed_is_refused_before_any_request(emu: Emulator, config: Config) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await run("hi", config=config, seed=7)
    assert "seed" in str(caught.value)
    assert caught.value.hint
    assert emu.requests == []


async def test_max_tokens_stop_is_truncated(emu: Emulator, config: Config) -> None:
    out = await run("Tell me a long story about the sea", config=config, max_tokens=3)
    assert bodies(emu)[0]["max_tokens"] == 3
    assert out.metrics.finish_reason == "max_tokens"
    assert out.metrics.completion_status == "truncated"


@pytest.mark.parametrize(
    ("stop", "finish", "status"),
    [("refusal", "refusal", "cutoff"), ("pause_turn", "pause_turn", "truncated")],
)
async def test_stop_reasons_map_to_completion_status(
    emu: Emulator, config: Config, stop: str, finish: str, status: str
) -> None:
    emu.script("anthropic.messages.create", AnthropicReply("Partial.", stop_reason=stop))
    out = await run("hi", config=config)
    assert out.metrics.finish_reason == finish
    assert out.metrics.completion_status == status
    assert out.diagnostics.raw["response"]["artifacts"]["stop_reason"] == stop


async def test_usage_adds_cache_reads_and_writes(emu: Emulator, config: Config) -> None:
    emu.script(
        "anthropic.messages.create",
        AnthropicReply("ok", input_tokens=10, cached_tokens=200, cache_write_tokens=50),
    )
    out = await run("hi", config=config)
    assert out.usage.input_tokens == 260
    assert out.usage.cached_tokens == 200
    assert out.usage.cache_write_tokens == 50
    assert out.metrics.cache_hit is True
    assert out.metrics.cache_mode == "implicit"


async def test_run_many_keeps_prompt_order(emu: Emulator, config: Config) -> None:
    prompts = [f"question {i}" for i in range(6)]
    results = await run_many(prompts, config=config, sources=[Source.from_text("ctx")])
    assert [a.rsplit("\n", 1)[-1] for a in results.answers] == prompts
    for body in bodies(emu):
        # The source leads the user message; a tiny fan-out prefix gets no breakpoints.
        assert body["messages"][0]["content"][0] == {"type": "text", "text": "ctx"}
        assert breakpoints(body) == []


# ------------------------------------------------------------------ structured output


class Verdict(pydantic.BaseModel):
    label: str
    score: int
    note: str | None = None


async def test_structured_output_closes_objects_and_keeps_required(
    emu: Emulator, config: Config
) -> None:
    out = await run("Classify this.", config=config, output=Verdict)
    assert isinstance(out.structured, Verdict)
    (body,) = bodies(emu)
    schema = body["output_config"]["format"]["schema"]
    assert body["output_config"]["format"]["type"] == "json_schema"
    assert schema["additionalProperties"] is False
    # Optional stays optional: the declared required list is unchanged.
    assert schema["required"] == Verdict.model_json_schema()["required"]


async def test_open_objects_are_refused(emu: Emulator, config: Config) -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": True}
    with pytest.raises(ConfigurationError, match="additional properties"):
        await run("x", config=config, output=schema)
    assert emu.requests == []


async def test_claude_3_5_refuses_schema_and_thinking(emu: Emulator) -> None:
    old = Config(provider="anthropic", model="claude-3-5-haiku-20241022", api_key="k")
    with pytest.raises(ConfigurationError, match="structured"):
        await run("x", config=old, output=Verdict)
    with pytest.raises(ConfigurationError, match="thinking"):
        await run("x", config=old, reasoning_effort="low")
    assert emu.requests == []


# ------------------------------------------------------------------ tools and thinking


async def test_thinking_tool_loop_survives_json_round_trip(emu: Emulator, config: Config) -> None:
    env = Environment(instructions="Use tools.", tools=[WEATHER])
    first = await interact(
        env, Input("call get_weather for Paris"), config=config, reasoning_budget_tokens=2048
    )
    assert first.tool_calls and first.tool_calls[0].name == "get_weather"
    assert first.reasoning
    assert first.continuation is not None
    body = bodies(emu)[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    recorded = emu.requests_for("anthropic.messages.create")[0]
    assert "interleaved-thinking-2025-05-14" in recorded.headers.get("anthropic-beta", "")

    restored = Continuation.from_jsonable(json.loads(json.dumps(first.continuation.to_jsonable())))
    call = first.tool_calls[0]
    second = await interact(
        env,
        Input(
            continuation=restored,
            tool_results=[ToolResult(call_id=call.id, content="boom", is_error=True)],
        ),
        config=config,
        reasoning_budget_tokens=2048,
    )
    assert second.text == "Tool results: [error] boom"
    replay = bodies(emu)[1]["messages"]
    assistant = replay[1]
    assert assistant["role"] == "assistant"
    # The signed thinking block comes back byte for byte, before the tool_use block.
    assert assistant["content"][0]["type"] == "thinking"
    assert assistant["content"][0]["signature"]
    assert [b["type"] for b in assistant["content"]][-1] == "tool_use"
    tool_turn = replay[2]
    assert tool_turn["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": "boom",
        "is_error": True,
    }


async def test_redacted_thinking_is_replayed(emu: Emulator, config: Config) -> None:
    emu.script(
        "anthropic.messages.create",
        AnthropicReply(redacted_thinking=["opaque-1"], tool_calls=[_weather_call()]),
    )
    env = Environment(tools=[WEATHER])
    first = await interact(env, Input("weather?"), config=config, reasoning_effort="low")
    call = first.tool_calls[0]
    await interact(
        env,
        Input(continuation=first.continuation, tool_results=[ToolResult(call.id, "sunny")]),
        config=config,
        reasoning_effort="low",
    )
    assistant = bodies(emu)[1]["messages"][1]["content"]
    redacted = [b for b in assistant if b["type"] == "redacted_thinking"]
    first_redacted = next(
        b
        for b in first.continuation._state["messages"][1]["content"]
        if b["type"] == "redacted_thinking"
    )
    assert redacted == [dict(first_redacted)]


def _weather_call() -> Any:
    from pollux.testing import ToolCall

    return ToolCall(name="get_weather", arguments={"city": "Paris"})


async def test_adaptive_thinking_and_effort_on_new_models(emu: Emulator) -> None:
    cfg = Config(provider="anthropic", model="claude-opus-4-7", api_key="k", retry=FAST_RETRY)
    out = await run("think", config=cfg, reasoning_effort="max")
    body = bodies(emu)[0]
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"]["effort"] == "max"
    assert out.reasoning


async def test_max_effort_refused_where_missing(emu: Emulator, config: Config) -> None:
    with pytest.raises(ConfigurationError, match="max"):
        await run("x", config=config, reasoning_effort="max")


async def test_tool_choice_mapping_and_history(emu: Emulator, config: Config) -> None:
    env = Environment(tools=[WEATHER])
    history = [
        Message(role="user", content="hi"),
        Message(role="assistant", content="hello"),
        Message(role="user", content="and again"),
    ]
    await interact(env, Input("weather", history=history), config=config, tool_choice="required")
    body = bodies(emu)[0]
    assert body["tool_choice"] == {"type": "any"}
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]  # the last two user turns are merged
    assert body["tools"][0]["input_schema"]["additionalProperties"] is False
    assert body["tools"][0]["strict"] is True


# ------------------------------------------------------------------ streaming


async def test_stream_done_equals_interact(emu: Emulator, config: Config) -> None:
    env = Environment(tools=[WEATHER])
    item = Input("call get_weather for Paris")
    one_shot = await interact(env, item, config=config, reasoning_budget_tokens=1024)
    events = [e async for e in stream(env, item, config=config, reasoning_budget_tokens=1024)]
    types = [e.type for e in events]
    assert types[0] == "start" and types[-1] == "done"
    assert "reasoning_delta" in types and "tool_call_delta" in types and "usage" in types
    assert types.index("tool_call") < types.index("finish") < types.index("done")
    done = events[-1].output
    assert done is not None
    assert done.text == one_shot.text
    assert done.reasoning == one_shot.reasoning
    assert [(c.name, c.arguments_text) for c in done.tool_calls] == [
        (c.name, c.arguments_text) for c in one_shot.tool_calls
    ]
    assert done.usage == one_shot.usage
    assert done.metrics.finish_reason == one_shot.metrics.finish_reason
    reasoning = "".join(e.text or "" for e in events if e.type == "reasoning_delta")
    assert reasoning == done.reasoning
    # The streamed continuation replays the same way (signed thinking included).
    state = done.continuation._state["messages"]
    assert state[-1]["content"][0]["type"] == "thinking"
    assert state[-1]["content"][0]["signature"]


async def test_overloaded_mid_stream_raises_without_done(emu: Emulator, config: Config) -> None:
    emu.script("anthropic.messages.create", StreamError(after_events=3))
    seen: list[str] = []
    with pytest.raises(APIError) as caught:
        async for event in stream(Environment(), Input("hello there friend"), config=config):
            seen.append(event.type)
    assert "done" not in seen
    assert "start" in seen
    assert caught.value.phase == "stream"
    assert caught.value.error_category == "capacity"
    assert caught.value.retryable is True  # calling again helps; the engine never resumes a stream
    assert "mid-stream" in (caught.value.hint or "")


# ------------------------------------------------------------------ errors


async def test_429_is_retried_with_retry_after(emu: Emulator, config: Config) -> None:
    emu.script("anthropic.messages.create", ErrorResponse(429, retry_after=0))
    out = await run("hi", config=config)
    assert out.text.startswith("Emulated reply")
    assert len(emu.requests_for("anthropic.messages.create")) == 2


async def test_529_overloaded_is_retried(emu: Emulator, config: Config) -> None:
    emu.script("anthropic.messages.create", ErrorResponse(529), ErrorResponse(529))
    out = await run("hi", config=config)
    assert out.text.startswith("Emulated reply")
    assert len(emu.requests_for("anthropic.messages.create")) == 3


async def test_rate_limit_after_retries_raises_with_retry_after(emu: Emulator) -> None:
    cfg = Config(provider="anthropic", model=MODEL, api_key="k", retry=RetryPolicy(max_attempts=1))
    emu.script("anthropic.messages.create", ErrorResponse(429, retry_after=2))
    with pytest.raises(RateLimitError) as caught:
        await run("hi", config=cfg)
    assert caught.value.status_code == 429
    assert caught.value.retry_after_s == 2.0
    assert caught.value.provider == "anthropic"
    emu.script("anthropic.messages.create", ErrorResponse(529))
    results = await run_many(["a"], config=cfg)
    error = results.outputs[0].diagnostics.error
    assert error is not None and error["status_code"] == 529
    assert results.outputs[0].metrics.completion_status == "error"


async def test_auth_error_names_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    with Emulator(api_key="the-right-key") as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
        cfg = Config(provider="anthropic", model=MODEL, api_key="wrong", retry=FAST_RETRY)
        with pytest.raises(APIError) as caught:
            await run("hi", config=cfg)
        assert caught.value.status_code == 401
        assert "ANTHROPIC_API_KEY" in (caught.value.hint or "")
        assert "wrong" not in str(caught.value) + (caught.value.hint or "")
        assert len(emu.requests) == 1  # auth errors are not retried


async def test_check_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    with Emulator(models=[MODEL]) as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
        ready = await check_ready(Config(provider="anthropic", model=MODEL, api_key="k"))
        assert ready.ready is True
        assert ready.model_verified is True
        missing = await check_ready(
            Config(provider="anthropic", model="claude-nope-9", api_key="k")
        )
        assert missing.ready is False
        assert missing.status_code == 404


# ------------------------------------------------------------------ sources


async def test_pdf_uploaded_once_per_session_and_deleted_on_close(
    emu: Emulator, config: Config, tmp_path: Path
) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4 fake pdf body")
    source = Source.from_file(pdf)
    async with Session(config) as session:
        await session.run_many(["a?"], sources=[source])
        await session.run_many(["b?"], sources=[Source.from_file(pdf)])
        assert len(emu.requests_for("anthropic.files.upload")) == 1
        assert emu.requests_for("anthropic.files.delete") == []
    (upload,) = emu.requests_for("anthropic.files.upload")
    deletes = emu.requests_for("anthropic.files.delete")
    assert len(deletes) == 1
    first = bodies(emu)[0]["messages"][0]["content"][0]
    assert first["type"] == "document"
    assert first["source"]["type"] == "file"
    assert deletes[0].path.endswith(first["source"]["file_id"])
    recorded = emu.requests_for("anthropic.messages.create")[0]
    assert "files-api-2025-04-14" in recorded.headers.get("anthropic-beta", "")
    assert upload.method == "POST"


async def test_urls_go_natively_and_unsupported_kinds_are_refused(
    emu: Emulator, config: Config, tmp_path: Path
) -> None:
    image = Source.from_uri("https://example.com/cat.png", mime_type="image/png")
    await run("describe", config=config, sources=[image])
    block = dict(bodies(emu)[0]["messages"][0]["content"][0])
    block.pop("cache_control")  # a single call marks its sources as the cached prefix
    assert block == {"type": "image", "source": {"type": "url", "url": image.identifier}}
    pdf = tmp_path / "ok.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\x00\x00")
    for bad in (
        Source.from_youtube("https://www.youtube.com/watch?v=dQw4w9WgXcQ"),
        Source.from_file(video),
    ):
        with pytest.raises(ConfigurationError) as caught:
            await run("x", config=config, sources=[Source.from_file(pdf), bad])
        assert caught.value.hint
    assert emu.requests_for("anthropic.files") == []


# ------------------------------------------------------------------ prompt caching


async def test_single_call_marks_prefix_then_reads_cache(emu: Emulator, config: Config) -> None:
    env = Environment(instructions=LONG, tools=[WEATHER], sources=[Source.from_text(LONG)])
    async with Session(config) as session:
        first = await session.interact(env, Input("summarize"))
        second = await session.interact(env, Input("summarize again"))
    body = bodies(emu)[0]
    assert breakpoints(body) == ["tool:get_weather", "system", "message0:text"]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first.usage.cache_write_tokens and first.usage.cache_write_tokens > 0
    assert first.metrics.cache_hit is False
    assert second.usage.cached_tokens and second.usage.cached_tokens > 0
    assert second.metrics.cache_hit is True
    assert second.usage.input_tokens > second.usage.cached_tokens


async def test_cache_none_sends_no_breakpoints(emu: Emulator, config: Config) -> None:
    env = Environment(instructions=LONG, cache="none")
    await interact(env, Input("x"), config=config)
    assert breakpoints(bodies(emu)[0]) == []


async def test_cache_policy_selects_the_ttl(emu: Emulator, config: Config) -> None:
    env = Environment(instructions=LONG, cache=CachePolicy(ttl_seconds=3600))
    await interact(env, Input("x"), config=config)
    assert bodies(emu)[0]["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    with pytest.raises(ConfigurationError, match="5 minutes or 1 hour"):
        Environment(cache=CachePolicy(ttl_seconds=600))
        await interact(
            Environment(instructions="x", cache=CachePolicy(ttl_seconds=600)),
            Input("x"),
            config=config,
        )


async def test_cache_policy_with_sources_picks_the_ttl_not_a_persistent_cache(
    emu: Emulator, config: Config
) -> None:
    # Regression: with sources, a CachePolicy once went to the persistent-cache hook (Gemini's),
    # which Anthropic does not have, and the call was refused.
    sources = [Source.from_text(LONG)]
    policy = CachePolicy(ttl_seconds=3600)
    env = await prepare_environment(sources=sources, cache=policy, config=config)
    out = await interact(env, Input("x"), config=config)
    assert out.metrics.completion_status == "clean"
    body = bodies(emu)[-1]
    marks = (
        [b["cache_control"] for b in body["system"] if "cache_control" in b]
        if "system" in body
        else []
    )
    marks += [
        block["cache_control"]
        for message in body["messages"]
        for block in message["content"]
        if isinstance(block, dict) and "cache_control" in block
    ]
    assert marks and all(mark == {"type": "ephemeral", "ttl": "1h"} for mark in marks)
    results = await run_many(["a", "b"], environment=env, config=config)
    assert results.status == "ok"


async def test_fanout_warms_the_cache_then_reads_it(emu: Emulator, config: Config) -> None:
    prompts = [f"question {i}" for i in range(5)]
    results = await run_many(prompts, config=config, sources=[Source.from_text(LONG)])
    assert [a.rsplit("\n", 1)[-1] for a in results.answers] == prompts
    outs = results.outputs
    writes = [o.usage.cache_write_tokens or 0 for o in outs]
    reads = [o.usage.cached_tokens or 0 for o in outs]
    # One call writes the prefix; every other call reads it instead of writing it again.
    assert sum(1 for w in writes if w > 0) == 1
    assert sum(1 for r in reads if r > 0) == len(prompts) - 1
    assert results.usage.cache_write_tokens == max(writes)


async def test_conversation_breakpoint_on_the_replayed_turn(emu: Emulator, config: Config) -> None:
    env = Environment(tools=[WEATHER])
    first = await interact(env, Input("call get_weather for Paris"), config=config)
    call = first.tool_calls[0]
    await interact(
        env,
        Input(continuation=first.continuation, tool_results=[ToolResult(call.id, "sunny")]),
        config=config,
    )
    assert breakpoints(bodies(emu)[1]) == ["tool:get_weather", "message1:tool_use"]


async def test_implicit_caching_off_sends_no_automatic_breakpoints(
    emu: Emulator, config: Config
) -> None:
    off = dataclasses.replace(config, capabilities={"implicit_caching": False})
    env = Environment(instructions=LONG, tools=[WEATHER], sources=[Source.from_text(LONG)])
    await interact(env, Input("x"), config=off)
    prompts = [f"question {i}" for i in range(3)]
    results = await run_many(prompts, config=off, sources=[Source.from_text(LONG)])
    assert results.status == "ok"
    assert [breakpoints(body) for body in bodies(emu)] == [[]] * 4
    assert all(not o.usage.cache_write_tokens for o in results.outputs)
    # An explicit CachePolicy is the user's own choice, so it still marks the prefix.
    explicit = Environment(instructions=LONG, cache=CachePolicy(ttl_seconds=300))
    await interact(explicit, Input("x"), config=off)
    assert breakpoints(bodies(emu)[-1]) == ["system"]


async def test_capability_overrides_apply(emu: Emulator) -> None:
    cfg = Config(
        provider="anthropic", model=MODEL, api_key="k", capabilities={"deferred_delivery": False}
    )
    from pollux import defer

    with pytest.raises(ConfigurationError):
        await defer(["x"], config=cfg)
    assert emu.requests == []


async def test_stream_structured_equals_interact(emu: Emulator, config: Config) -> None:
    item = Input("Classify this.")
    one_shot = await interact(Environment(), item, config=config, output=Verdict)
    events = [e async for e in stream(Environment(), item, config=config, output=Verdict)]
    done = events[-1].output
    assert done is not None
    assert isinstance(done.structured, Verdict)
    assert done.structured == one_shot.structured
    assert done.text == one_shot.text


async def test_failed_upload_is_retried_and_leaves_one_file(
    emu: Emulator, config: Config, tmp_path: Path
) -> None:
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n fake")
    emu.script("anthropic.files.upload", ErrorResponse(500))
    async with Session(config) as session:
        out = await session.run_many(
            ["a?"], sources=[Source.from_file(image), Source.from_file(image)]
        )
        assert out.status == "ok"
        blocks = bodies(emu)[0]["messages"][0]["content"]
        assert blocks[0]["type"] == "image" and blocks[1]["type"] == "image"
        assert blocks[0]["source"]["file_id"] == blocks[1]["source"]["file_id"]
    assert len(emu.requests_for("anthropic.files.upload")) == 2  # the 500, then the retry
    assert len(emu.requests_for("anthropic.files.delete")) == 1


async def test_interleaved_thinking_budget_may_exceed_max_tokens(
    emu: Emulator, config: Config
) -> None:
    env = Environment(tools=[WEATHER])
    out = await interact(
        env,
        Input("call get_weather for Paris"),
        config=config,
        reasoning_budget_tokens=4096,
        max_tokens=2048,
    )
    assert out.tool_calls
    body = bodies(emu)[0]
    assert (body["thinking"]["budget_tokens"], body["max_tokens"]) == (4096, 2048)
    with pytest.raises(ConfigurationError, match="larger than"):
        await run("no tools here", config=config, reasoning_budget_tokens=4096, max_tokens=2048)


def test_module_level_calls_share_uploads_until_the_loop_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import asyncio

    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(b"%PDF-1.4 shared")
    with Emulator() as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
        cfg = Config(provider="anthropic", model=MODEL, api_key="k", retry=FAST_RETRY)

        async def main() -> None:
            await run("a", config=cfg, source=Source.from_file(pdf))
            await run("b", config=cfg, source=Source.from_file(pdf))
            assert emu.requests_for("anthropic.files.delete") == []

        asyncio.run(main())
        assert [r.route for r in emu.requests if r.route.startswith("anthropic.files")] == [
            "anthropic.files.upload",
            "anthropic.files.delete",
        ]


class Labelled(pydantic.BaseModel):
    label: str


class Tree(pydantic.BaseModel):
    label: str
    kids: list[Tree] = []


class Forest(pydantic.BaseModel):
    trees: list[Tree]


async def test_a_schema_whose_root_is_a_ref_is_served(emu: Emulator, config: Config) -> None:
    # A JSON Schema may name its root object in $defs; the root is that object.
    declared = {
        "$defs": {"Labelled": Labelled.model_json_schema()},
        "$ref": "#/$defs/Labelled",
    }
    out = await run("Label it.", config=config, output=declared)
    assert out.structured == {"label": "label"}
    schema = emu.last_request.json["output_config"]["format"]["schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert "$ref" not in schema and declared["$ref"] == "#/$defs/Labelled"  # input untouched


@pytest.mark.parametrize("model", [Tree, Forest], ids=["root", "nested"])
async def test_a_recursive_schema_is_refused_before_any_request(
    emu: Emulator, config: Config, model: type[pydantic.BaseModel]
) -> None:
    # Anthropic's structured output does not serve recursive schemas: say so, not "the root
    # must be an object", and spend nothing.
    with pytest.raises(ConfigurationError, match="recursive") as caught:
        await run("Draw a tree.", config=config, output=model)
    assert "#/$defs/Tree" in str(caught.value) and "nest" in (caught.value.hint or "")
    assert emu.requests_for("anthropic.messages.create") == []


async def test_a_file_deleted_behind_the_sessions_back_is_uploaded_again(
    emu: Emulator, config: Config, tmp_path: Path
) -> None:
    # Anthropic keeps uploads until someone deletes them: a cleanup job or another process may.
    # The call that finds its file gone fails once, saying so; the next call uploads it again.
    import anthropic

    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4 fake pdf body")
    sdk = anthropic.Anthropic(api_key="k", base_url=emu.base_url("anthropic"), max_retries=0)
    async with Session(config) as session:
        await session.run_many(["a?"], sources=[Source.from_file(pdf)])
        (first,) = [f.id for f in sdk.beta.files.list()]
        sdk.beta.files.delete(first)
        failed = (await session.run_many(["b?"], sources=[Source.from_file(pdf)])).outputs[0]
        assert failed.metrics.completion_status == "error"
        assert "uploads it again" in failed.diagnostics.raw["error"]["hint"]
        again = await session.run_many(["c?"], sources=[Source.from_file(pdf)])
        assert again.answers == ["Emulated reply to: c? [1 file]"]
        assert len(emu.requests_for("anthropic.files.upload")) == 2
        (second,) = [f.id for f in sdk.beta.files.list()]
        assert second != first
    # Only the live upload is deleted on close; the vanished one is not asked for again.
    (delete,) = emu.requests_for("anthropic.files.delete")[1:]
    assert delete.path.endswith(second)
    sdk.close()


async def test_a_stream_cut_mid_body_is_a_network_error(emu: Emulator, config: Config) -> None:
    # A cut mid-body used to be an "unknown ... please report it" error (the SDK handed httpx's
    # exception to the caller) instead of a retryable network failure.
    emu.script("anthropic.messages.create", CutStream(after_events=3))
    with pytest.raises(APIError) as caught:
        async for _event in stream(Environment(), Input("hello there my friend"), config=config):
            pass
    assert caught.value.error_category == "network"
    assert caught.value.retryable is True
    assert "closed mid-stream" in str(caught.value)


async def test_a_stream_stalled_mid_body_says_which_limit_fired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Emulator(stream_delay=1.0) as slow:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", slow.base_url("anthropic"))
        config = Config(
            provider="anthropic",
            model=MODEL,
            api_key="sk-ant-test",
            retry=RetryPolicy(max_attempts=1, max_elapsed_s=None),
            request_timeout_s=0.2,
        )
        with pytest.raises(APIError) as caught:
            async for _event in stream(Environment(), Input("hello there"), config=config):
                pass
    assert caught.value.error_category == "timeout"
    assert "Config.request_timeout_s=0.2" in str(caught.value)
