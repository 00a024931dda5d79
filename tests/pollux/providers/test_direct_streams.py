"""``pollux.stream`` on every provider, over the Session's transport, against the emulator.

OpenAI, Anthropic and Gemini stream through pollux's keep-alive pool like local servers and
OpenRouter do (the SDKs' own stream pipelines are not used when pollux built the client). These
tests drive each provider through the public ``pollux.stream``: the SDK stream entry points are
patched to fail, so a pass proves the direct path; a small front between pollux and the
emulator re-encodes the emulator's event streams (gzip, a stall before the last events) and
counts connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from pollux import (
    APIError,
    Config,
    Environment,
    Event,
    Input,
    RetryPolicy,
    Session,
    ToolDeclaration,
    interact,
    stream,
)
from pollux.testing import Emulator, ErrorResponse, Latency, Reply, StreamError, ToolCall

KEY = "sk-direct-streams-0123456789"
ONCE = RetryPolicy(max_attempts=1, max_elapsed_s=None)


@dataclass(frozen=True)
class Wire:
    env_var: str | None  # None: Config(base_url=...)
    path: str  # the emulator base path
    model: str
    selector: str  # the emulator's script selector for the streamed call
    sdk: bool  # an official-SDK provider


WIRES = {
    "openai": Wire("OPENAI_BASE_URL", "/openai/v1", "gpt-5-nano", "openai.responses", True),
    "anthropic": Wire(
        "ANTHROPIC_BASE_URL", "/anthropic", "claude-sonnet-4-6", "anthropic.messages.create", True
    ),
    "gemini": Wire(
        "GOOGLE_GEMINI_BASE_URL", "/gemini", "gemini-2.5-flash", "gemini.generate.stream", True
    ),
    "local": Wire(None, "/local/v1", "emulator-model", "local", False),
    "openrouter": Wire(
        "OPENROUTER_BASE_URL", "/openrouter/api/v1", "emulator-model", "openrouter", False
    ),
    # The resource endpoint is Config(base_url=...); the model is the deployment name.
    "azure_openai": Wire(None, "/azure", "prod-deployment", "azure_openai.responses", True),
    # Vertex AI: Config(base_url=...), project and location, and a google.auth bearer token.
    "vertex": Wire(None, "/vertex", "gemini-2.5-flash", "vertex.generate.stream", True),
}
SDK_PROVIDERS = [name for name, wire in WIRES.items() if wire.sdk]
LONG = "Tell me " + " ".join(f"word{i}" for i in range(60))
WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture(autouse=True)
def _no_sdk_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any stream through the SDKs' own pipelines: these tests must not take them."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the SDK stream path was used")

    from anthropic.resources.messages import AsyncMessages
    from google.genai._api_client import BaseApiClient
    from google.genai.models import AsyncModels
    from openai.resources.responses import AsyncResponses

    monkeypatch.setattr(AsyncResponses, "create", refuse)
    monkeypatch.setattr(AsyncMessages, "create", refuse)
    monkeypatch.setattr(AsyncModels, "generate_content_stream", refuse)
    monkeypatch.setattr(BaseApiClient, "async_request_streamed", refuse)


# -- a front between pollux and the emulator ---------------------------------------------------


@dataclass
class Front:
    """Forwards each request to the emulator and re-sends its answer, optionally altered."""

    upstream: tuple[str, int]
    gzip: bool = False
    stall_s: float = 0.0  # pause before the last two events of an event stream
    connections: int = 0
    heads: list[bytes] = field(default_factory=list)
    url: str = ""

    async def _forward(self, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        reader, writer = await asyncio.open_connection(*self.upstream)
        try:
            lines = [
                line
                for line in head.split(b"\r\n")
                if line and not line.lower().startswith((b"connection:", b"accept-encoding:"))
            ]
            writer.write(b"\r\n".join([*lines, b"Connection: close", b"", b""]) + body)
            data = await reader.read()
        finally:
            writer.close()
            await writer.wait_closed()
        answer_head, _, raw = data.partition(b"\r\n\r\n")
        if b"chunked" in answer_head.lower():
            raw = _dechunk(raw)
        return answer_head, raw

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.heads.append(head)
                answer_head, raw = await self._forward(head, body)
                await self._answer(writer, answer_head, raw)
        writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, head: bytes, raw: bytes) -> None:
        lines = [
            line
            for line in head.split(b"\r\n")
            if not line.lower().startswith(
                (b"content-length:", b"transfer-encoding:", b"connection:")
            )
        ]
        if b"text/event-stream" not in head.lower():
            writer.write(b"\r\n".join([*lines, b"Content-Length: %d" % len(raw), b"", b""]) + raw)
            return
        events = [event + b"\n\n" for event in raw.split(b"\n\n") if event.strip()]
        pieces = [b"".join(events[:-2]), b"".join(events[-2:])]
        if self.gzip:
            lines.append(b"Content-Encoding: gzip")
            packed = gzip.compress(raw)
            pieces = [packed[i : i + 97] for i in range(0, len(packed), 97)]
        writer.write(b"\r\n".join([*lines, b"Transfer-Encoding: chunked", b"", b""]))
        for index, piece in enumerate(pieces):
            if self.stall_s and index == len(pieces) - 1:
                await writer.drain()
                await asyncio.sleep(self.stall_s)
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _dechunk(raw: bytes) -> bytes:
    out: list[bytes] = []
    while True:
        size_line, _, rest = raw.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(rest[:size])
        raw = rest[size + 2 :]


@contextlib.asynccontextmanager
async def front(emu: Emulator, **options: Any) -> AsyncIterator[Front]:
    host, port = emu.url.split("//", 1)[1].split(":")
    proxy = Front((host, int(port)), **options)
    writers: list[asyncio.StreamWriter] = []
    tasks: set[asyncio.Task[Any]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        with contextlib.suppress(asyncio.CancelledError):
            await proxy.handle(reader, writer)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    proxy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield proxy
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in writers:
            writer.close()
        await server.wait_closed()


# -- configs -------------------------------------------------------------------------------------


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def configure(
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    origin: str,
    *,
    timeout_s: float = 5.0,
    retry: RetryPolicy = ONCE,
) -> Config:
    wire = WIRES[provider]
    if wire.env_var is not None:
        monkeypatch.setenv(wire.env_var, origin + wire.path)
    if provider == "vertex":
        from google.oauth2.credentials import Credentials

        return Config(
            provider="vertex",
            model=wire.model,
            project="direct-streams",
            location="us-central1",
            credentials=Credentials(token=KEY),
            base_url=origin + wire.path,
            request_timeout_s=timeout_s,
            retry=retry,
        )
    return Config(
        provider=provider,  # type: ignore[arg-type]
        model=wire.model,
        api_key=KEY,
        base_url=origin + wire.path if wire.env_var is None else None,
        request_timeout_s=timeout_s,
        retry=retry,
    )


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if e.type == "text_delta")


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_streams_go_over_one_pooled_connection(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    async with front(emu) as proxy:
        config = configure(monkeypatch, provider, proxy.url)
        async with Session(config) as session:
            for _ in range(3):
                events = [e async for e in session.stream(Environment(), Input(LONG))]
                assert events[-1].type == "done"
                assert text_of(events) == events[-1].output.text  # type: ignore[union-attr]
                assert text_of(events).startswith("Emulated reply to: Tell me")
    # Three streams, read to their end, over one keep-alive connection of the pool (which asks
    # for gzip as the SDKs' httpx would not: "gzip, deflate").
    assert proxy.connections == 1
    assert all(b"accept-encoding: gzip\r\n" in head.lower() for head in proxy.heads)


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_tool_call_deltas_and_usage_assemble_to_interact(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    config = configure(monkeypatch, provider, emu.url)
    reply = Reply("Checking.", tool_calls=[ToolCall("get_weather", {"city": "Rome"}, "call_r")])
    emu.script(WIRES[provider].selector, reply)
    env = Environment(tools=[WEATHER])
    events = [e async for e in stream(env, Input("Rome?"), config=config)]
    kinds = [e.type for e in events]
    assert kinds[0] == "start" and kinds[-3:] == ["tool_call", "finish", "done"]
    assert "usage" in kinds and "tool_call_delta" in kinds
    arguments = "".join(e.delta.arguments for e in events if e.delta is not None)
    done = events[-1].output
    assert done is not None and done.usage is not None and done.usage.output_tokens > 0
    assert done.tool_calls[0].arguments == {"city": "Rome"}
    assert arguments.replace(" ", "") == '{"city":"Rome"}'
    one_shot = (
        f"{provider}.generate.content"
        if provider in ("gemini", "vertex")
        else WIRES[provider].selector
    )
    emu.script(one_shot, reply)
    plain = await interact(env, Input("Rome?"), config=config)

    def shape(calls: Any) -> list[tuple[str, str, str]]:
        return [(c.id, c.name, c.arguments_text) for c in calls]

    assert shape(plain.tool_calls) == shape(done.tool_calls)
    if provider in ("gemini", "vertex"):
        # The call's thought signature (one per response) is kept for the replay.
        assert (done.tool_calls[0].provider_state or {}).get("thought_signature")
    assert plain.text == done.text == "Checking."


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_a_mid_stream_error_raises_after_the_deltas_and_is_not_retried(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    retry = RetryPolicy(max_attempts=3, initial_delay_s=0.001)
    config = configure(monkeypatch, provider, emu.url, retry=retry)
    selector = WIRES[provider].selector
    emu.script(selector, StreamError(f"overloaded, key {KEY}", after_events=6, code="overloaded"))
    seen: list[Event] = []
    with pytest.raises(APIError) as info:
        async for event in stream(Environment(), Input(LONG), config=config):
            seen.append(event)
    error = info.value
    assert (error.provider, error.phase) == (provider, "stream")
    assert error.hint
    assert "done" not in [e.type for e in seen]
    assert text_of(seen)  # the deltas before the error were delivered
    assert len(emu.requests_for(selector)) == 1  # not retried once chunks flowed
    # The scrubber: the key the server echoed never reaches the message or the hint.
    assert KEY not in str(error) and KEY not in (error.hint or "")


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_an_error_status_is_the_sdk_exception_mapped_as_before(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    config = configure(monkeypatch, provider, emu.url)
    emu.script(WIRES[provider].selector, ErrorResponse(429, retry_after=0))
    with pytest.raises(APIError) as info:
        async for _ in stream(Environment(), Input("hi"), config=config):
            pass
    assert info.value.status_code == 429 and info.value.retryable is True
    assert info.value.phase == "stream"
    cause = info.value.__cause__
    sdk = {
        "openai": "openai",
        "azure_openai": "openai",
        "anthropic": "anthropic",
        "gemini": "google.genai",
        "vertex": "google.genai",
    }[provider]
    assert cause is not None and type(cause).__module__.startswith(sdk)


@pytest.mark.parametrize("provider", list(WIRES))
async def test_a_gzip_stream_is_decoded(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    async with front(emu, gzip=True) as proxy:
        config = configure(monkeypatch, provider, proxy.url)
        events = [e async for e in stream(Environment(), Input(LONG), config=config)]
        plain = await interact(Environment(), Input(LONG), config=config)
    done = events[-1].output
    assert done is not None and done.text == plain.text == text_of(events)
    assert len(text_of(events)) > 200


@pytest.mark.parametrize("provider", list(WIRES))
async def test_a_stall_mid_stream_is_bounded_by_the_request_timeout(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    async with front(emu, stall_s=1.0) as proxy:
        config = configure(monkeypatch, provider, proxy.url, timeout_s=0.3)
        seen: list[str] = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(APIError) as info:
            async for event in stream(Environment(), Input(LONG), config=config):
                seen.append(event.type)
        elapsed = loop.time() - start
    assert info.value.error_category == "timeout" and info.value.phase == "stream"
    assert "text_delta" in seen and "done" not in seen
    assert elapsed < 0.9  # cut at the 0.3 s stall limit, not when the front resumes


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_time_between_events_spent_by_the_consumer_is_not_a_stall(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    config = configure(monkeypatch, provider, emu.url, timeout_s=0.2)
    deltas = 0
    async for event in stream(Environment(), Input(LONG), config=config):
        if event.type == "text_delta":
            deltas += 1
            if deltas == 1:
                await asyncio.sleep(0.5)  # longer than request_timeout_s
        last = event
    assert last.type == "done"


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_max_elapsed_bounds_a_stream_that_has_not_started(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    retry = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_elapsed_s=0.2)
    config = configure(monkeypatch, provider, emu.url, timeout_s=3.0, retry=retry)
    emu.script(WIRES[provider].selector, Latency(1.5), Reply("too late"))
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(APIError) as info:
        async for _ in stream(Environment(), Input("Hi"), config=config):
            pass
    assert info.value.error_category == "deadline" and info.value.phase == "stream"
    assert loop.time() - start < 1.2


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_leaving_a_stream_early_closes_it_without_resource_warnings(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    config = configure(monkeypatch, provider, emu.url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with Session(config) as session:
            events = session.stream(Environment(), Input(LONG))
            async for event in events:
                if event.type == "text_delta":
                    break
            await events.aclose()
            # The half-read connection was dropped, not pooled: the next stream still works.
            after = [e async for e in session.stream(Environment(), Input("again"))]
            assert after[-1].type == "done"
        await asyncio.sleep(0)
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("provider", SDK_PROVIDERS)
async def test_cancelling_a_stream_is_a_cancellation_not_a_timeout(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    async with front(emu, stall_s=2.0) as proxy:
        config = configure(monkeypatch, provider, proxy.url, timeout_s=5.0)
        started = asyncio.Event()

        async def consume() -> None:
            async for event in stream(Environment(), Input(LONG), config=config):
                if event.type == "text_delta":
                    started.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def canned_stream(events: list[bytes]) -> AsyncIterator[str]:
    """A server answering every POST with 200 and these server-sent events, then the end."""
    body = b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events) + b"0\r\n\r\n"
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + body
    )
    writers: list[asyncio.StreamWriter] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(answer)
                await writer.drain()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


async def test_an_openai_event_carrying_an_error_object_raises_as_the_sdk_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = b'event: response.created\ndata: {"type":"response.created","response":{"id":"r1"}}'
    delta = (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"output_index":0,"content_index":0,"delta":"Hel"}'
    )
    failed = b'data: {"error":{"message":"upstream went away","code":"server_error"}}'
    async with canned_stream([created + b"\n\n", delta + b"\n\n", failed + b"\n\n"]) as url:
        config = configure(monkeypatch, "openai", url)  # the canned server ignores the path
        seen: list[Event] = []
        with pytest.raises(APIError, match="upstream went away") as info:
            async for event in stream(Environment(), Input("hi"), config=config):
                seen.append(event)
    assert text_of(seen) == "Hel"
    assert info.value.phase == "stream" and info.value.provider == "openai"


async def test_a_gemini_in_band_error_chunk_raises_its_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chunk = (
        b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]},"index":0}],'
        b'"responseId":"r1"}\n\n'
    )
    error = (
        b'data: {"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}'
    )
    async with canned_stream([chunk, error + b"\n\n"]) as url:
        config = configure(monkeypatch, "gemini", url)
        seen: list[Event] = []
        with pytest.raises(APIError) as info:
            async for event in stream(Environment(), Input("hi"), config=config):
                seen.append(event)
    assert text_of(seen) == "Hel"
    assert info.value.status_code == 503 and info.value.retryable is True
    assert type(info.value.__cause__).__name__ == "ServerError"


async def test_the_stall_limit_follows_reads_made_from_different_tasks() -> None:
    from pollux._transport import ConnectionPool, TransportError

    release = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (9, b"data: 1\n\n")
        )
        await writer.drain()
        await release.wait()  # then stall: no more events, no end
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    pool = ConnectionPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        async with pool.stream("GET", "/", timeout_s=0.3) as response:
            body = response.iter_bytes()
            # wait_for runs each read in a task of its own (Python < 3.12): the stall timer
            # must cancel the task reading now, not the one that read first.
            assert await asyncio.wait_for(body.__anext__(), 5) == b"data: 1\n\n"
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(TransportError) as info:
                await asyncio.wait_for(body.__anext__(), 5)
            assert info.value.kind == "timeout"
            assert loop.time() - start < 2  # the 0.3 s limit, not wait_for's 5 s
            await body.aclose()
    finally:
        release.set()
        await pool.aclose()
        server.close()
        await server.wait_closed()
