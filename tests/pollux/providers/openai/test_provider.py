"""The provider through the real ``openai`` SDK, over an in-process mock HTTP transport.

These tests pin the wire: the exact JSON body the SDK sends, SSE parsing, multipart uploads and
deletes, and that the SDK does not retry on its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI

from pollux.config import Config
from pollux.errors import APIError, ConfigurationError, RateLimitError
from pollux.interaction.continuation import Continuation
from pollux.interaction.input import Input
from pollux.interaction.requirements import OutputRequirements
from pollux.interaction.tools import ToolResult
from pollux.providers.base import PreparedSources, ProviderRequest, ProviderResponse, StreamChunk
from pollux.providers.openai import CAPABILITIES, OpenAIProvider
from pollux.source import Source

from . import _wire as w

Handler = Callable[[httpx2.Request], httpx2.Response]


class Recorder:
    def __init__(self, handler: Handler) -> None:
        self.requests: list[httpx2.Request] = []
        self.handler = handler

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        self.requests.append(request)
        return self.handler(request)


CONFIG = Config(provider="openai", model="gpt-5-nano", api_key="sk-test")


@pytest.fixture
async def make_provider() -> AsyncIterator[Callable[[Handler], tuple[OpenAIProvider, Recorder]]]:
    made: list[tuple[OpenAIProvider, httpx2.AsyncClient]] = []

    def factory(handler: Handler) -> tuple[OpenAIProvider, Recorder]:
        recorder = Recorder(handler)
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(recorder))
        client = AsyncOpenAI(
            api_key="sk-test", base_url="https://api.test/v1", http_client=http, max_retries=0
        )
        provider = OpenAIProvider(CONFIG, client=client)
        made.append((provider, http))
        return provider, recorder

    yield factory
    for provider, http in made:
        await provider.aclose()
        await http.aclose()


def request_for(
    content: str | None = "Hello",
    *,
    parts: tuple[Any, ...] = (),
    continuation: Continuation | None = None,
    tool_results: tuple[ToolResult, ...] = (),
    requirements: OutputRequirements | None = None,
    stream: bool = False,
    instructions: str | None = None,
) -> ProviderRequest:
    return ProviderRequest(
        model="gpt-5-nano",
        instructions=instructions,
        sources=PreparedSources(parts=parts),
        tools=(),
        input=Input(content=content, continuation=continuation, tool_results=tool_results),
        requirements=requirements or OutputRequirements(),
        continuation_state=dict(continuation._state) if continuation is not None else None,
        stream=stream,
    )


def json_response(payload: dict[str, Any], status: int = 200, **headers: str) -> httpx2.Response:
    return httpx2.Response(status, json=payload, headers=headers)


def sse(events: list[dict[str, Any]]) -> httpx2.Response:
    body = "".join(
        f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': i})}\n\n"
        for i, e in enumerate(events)
    )
    return httpx2.Response(200, text=body, headers={"content-type": "text/event-stream"})


def test_capability_table() -> None:
    assert CAPABILITIES.streaming and CAPABILITIES.structured_outputs and CAPABILITIES.tools
    assert CAPABILITIES.tool_result_errors and CAPABILITIES.uploads and CAPABILITIES.conversation
    assert not CAPABILITIES.seed
    assert not CAPABILITIES.reasoning_budget_tokens


async def test_execute_sends_the_compiled_body_and_extracts(make_provider: Any) -> None:
    final = w.response_dict([w.message("Hi there")], usage_=w.usage(7, 3, cached=2))
    provider, rec = make_provider(lambda r: json_response(final))
    req = request_for(
        "Hello",
        instructions="Be kind.",
        requirements=OutputRequirements(max_tokens=64, temperature=0.5),
    )
    provider.validate(req)
    compiled = provider.compile(req)
    out = await provider.execute(compiled)
    (sent,) = rec.requests
    assert sent.method == "POST"
    assert sent.url.path == "/v1/responses"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert json.loads(sent.content) == {
        "model": "gpt-5-nano",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
        "instructions": "Be kind.",
        "temperature": 0.5,
        "max_output_tokens": 64,
    }
    assert out.text == "Hi there"
    assert out.usage is not None and out.usage.cached_tokens == 2
    assert provider.continuation_state(req, out) == {"response_id": "resp_1"}


async def test_continuation_uses_previous_response_id(make_provider: Any) -> None:
    provider, rec = make_provider(lambda r: json_response(w.response_dict([w.message("done")])))
    continuation = Continuation._create(
        provider="openai", model="gpt-5-nano", state={"response_id": "resp_prev"}
    )
    req = request_for(
        None,
        parts=({"type": "input_text", "text": "SOURCE"},),
        continuation=continuation,
        tool_results=(ToolResult(call_id="call_1", content="42"),),
    )
    provider.validate(req)
    await provider.execute(provider.compile(req))
    body = json.loads(rec.requests[0].content)
    assert body["previous_response_id"] == "resp_prev"
    assert body["input"] == [{"type": "function_call_output", "call_id": "call_1", "output": "42"}]


def test_validate_rejects_before_io() -> None:
    provider = OpenAIProvider(CONFIG)
    with pytest.raises(ConfigurationError, match="seed"):
        provider.validate(request_for(requirements=OutputRequirements(seed=1)))
    with pytest.raises(ConfigurationError, match="response id"):
        provider.validate(
            request_for(continuation=Continuation._create(provider="openai", model=None, state={}))
        )
    youtube = ProviderRequest(
        model="m",
        instructions=None,
        sources=PreparedSources(sources=(Source.from_youtube("https://youtu.be/x"),)),
        tools=(),
        input=Input(content="x"),
        requirements=OutputRequirements(),
    )
    with pytest.raises(ConfigurationError, match="YouTube"):
        provider.validate(youtube)
    assert provider._client is None  # nothing was built, nothing was sent


async def test_stream_through_the_sdk(make_provider: Any) -> None:
    final = w.response_dict([w.message("Hey you")], usage_=w.usage(4, 2), response_id="resp_s")
    events = [
        {"type": "response.created", "response": {**final, "status": "in_progress"}},
        {
            "type": "response.output_text.delta",
            "delta": "Hey ",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "delta": "you",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "logprobs": [],
        },
        {"type": "response.completed", "response": final},
    ]
    provider, rec = make_provider(lambda r: sse(events))
    req = request_for("Hi", stream=True)
    chunks: list[StreamChunk] = [c async for c in provider.stream(provider.compile(req))]
    assert json.loads(rec.requests[0].content)["stream"] is True
    assert "".join(c.text for c in chunks) == "Hey you"
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 6
    assert chunks[0].response_id == "resp_s"


async def test_stream_cut_raises(make_provider: Any) -> None:
    events = [
        {
            "type": "response.output_text.delta",
            "delta": "Hey",
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "logprobs": [],
        }
    ]
    provider, _ = make_provider(lambda r: sse(events))
    with pytest.raises(APIError) as info:
        async for _chunk in provider.stream(provider.compile(request_for(stream=True))):
            pass
    assert info.value.error_category == "stream_cut"


async def test_http_errors_are_wrapped_and_not_retried_by_the_sdk(make_provider: Any) -> None:
    body = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
    provider, rec = make_provider(lambda r: json_response(body, 429, **{"retry-after": "3"}))
    with pytest.raises(RateLimitError) as info:
        await provider.execute(provider.compile(request_for()))
    assert len(rec.requests) == 1  # the engine owns the only retry loop
    assert info.value.retry_after_s == 3.0
    assert info.value.phase == "generate"


async def test_own_client_has_sdk_retries_off_and_our_timeout() -> None:
    config = Config(provider="openai", model="m", api_key="sk-x", request_timeout_s=12.5)
    provider = OpenAIProvider(config)
    client = provider._sdk()
    try:
        assert client.max_retries == 0
        assert client.timeout == 12.5
    finally:
        await provider.aclose()
    with pytest.raises(ConfigurationError):
        provider._sdk()


async def test_uploads_go_through_the_files_api_and_are_deleted(
    make_provider: Any, tmp_path: Path
) -> None:
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(b"%PDF-1.7 " + b"x" * 1000)

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and request.url.path == "/v1/files":
            return json_response(
                {
                    "id": "file-abc",
                    "object": "file",
                    "bytes": 1009,
                    "created_at": 1,
                    "filename": "doc.pdf",
                    "purpose": "user_data",
                    "status": "processed",
                }
            )
        if request.method == "DELETE":
            return json_response({"id": "file-abc", "object": "file", "deleted": True})
        return json_response(w.response_dict([w.message("ok")]))

    provider, rec = make_provider(handler)
    prepared = await provider.prepare_sources([Source.from_file(pdf)])
    assert prepared.parts == ({"type": "input_file", "file_id": "file-abc"},)
    assert prepared.owned == ("file-abc",)
    upload = rec.requests[0]
    assert upload.headers["content-type"].startswith("multipart/form-data")
    assert b'name="purpose"\r\n\r\nuser_data' in upload.content
    assert b'filename="doc.pdf"' in upload.content
    assert b"%PDF-1.7 xxxx" in upload.content
    await provider.release_sources(prepared)
    assert [(r.method, r.url.path) for r in rec.requests[1:]] == [("DELETE", "/v1/files/file-abc")]


def test_store_false_responses_cannot_be_continued() -> None:
    provider = OpenAIProvider(CONFIG)
    first = request_for(
        requirements=OutputRequirements(provider_options={"openai": {"store": False}})
    )
    provider.validate(first)

    state = provider.continuation_state(first, ProviderResponse(response_id="resp_x"))
    assert state == {"response_id": "resp_x", "stored": False}
    continuation = Continuation._create(provider="openai", model=None, state=state)
    with pytest.raises(ConfigurationError, match="store=False") as info:
        provider.validate(request_for(continuation=continuation))
    assert "history" in (info.value.hint or "")


def test_continuation_turns_need_no_sources() -> None:
    provider = OpenAIProvider(CONFIG)
    assert provider.needs_sources(request_for()) is True
    continuation = Continuation._create(
        provider="openai", model=None, state={"response_id": "resp_1"}
    )
    assert (
        provider.needs_sources(
            request_for(
                None,
                continuation=continuation,
                tool_results=(ToolResult(call_id="c", content="x"),),
            )
        )
        is False
    )


async def test_failed_deletes_are_logged(
    make_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    provider, rec = make_provider(lambda r: json_response({"error": {"message": "gone"}}, 500))
    with caplog.at_level("WARNING", logger="pollux.providers.openai"):
        await provider.release_sources(PreparedSources(owned=("file-1",)))
    assert [r.method for r in rec.requests] == ["DELETE"]
    assert "file-1" in caplog.text
