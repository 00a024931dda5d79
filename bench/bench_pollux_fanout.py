"""pollux's engine against a loopback Chat Completions server, side by side with the raw SDK.

Four measurements, each run against a server in its own process (``bench/_canned_server.py``):

1. Fan-out: ``run_many`` of 300 prompts over one shared 20 KB text source, ``provider="local"``,
   ``request_concurrency=32``, server answering after 50 ms. Efficiency = ideal time
   (``ceil(300 / 32) * 50 ms``) / actual time; target >= 0.85. The same workload through the raw
   ``openai`` SDK (``AsyncOpenAI`` with a 32-slot semaphore) and a bare asyncio socket client
   (keep-alive, JSON encode/decode, nothing else) runs in the same process for comparison.
2. Client CPU per fan-out request (process CPU time of the client / 300), as a ratio to the bare
   socket client; target <= 4x.
3. One-shot ``interact()`` against a zero-latency server: wall time per sequential call;
   target < 2.5 ms.
4. Streaming: client CPU per SSE chunk (``stream()`` over 500-chunk answers) as a ratio to the
   bare socket client parsing the same stream; target <= 2x.

Each client warms up first (connections, imports), so the numbers are steady-state.

Why a dedicated server rather than ``pollux.testing.Emulator(process=True)``: the emulator is a
faithful model (it parses every request, counts tokens, echoes the prompt) and costs the server
process enough CPU per request that, on a 2-core machine, it caps a C=32 fan-out at about 0.4
efficiency whatever the client does. ``bench/_canned_server.py`` answers with canned bytes so the
numbers measure the client.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from bench._fanout import SOURCE_TEXT, canned_server, measure, questions
from bench._result import Result

N_PROMPTS = 300
CONCURRENCY = 32
LATENCY_S = 0.05
ONE_SHOT_CALLS = 300
STREAM_CHUNKS = 500
STREAMS = 20
MODEL = "bench-model"


def _pollux_fanout(base_url: str) -> Callable[[], Awaitable[None]]:
    import pollux

    config = pollux.Config(
        provider="local",
        model=MODEL,
        base_url=base_url,
        request_concurrency=CONCURRENCY,
        retry=pollux.RetryPolicy(max_attempts=1),
    )
    source = pollux.Source.from_text(SOURCE_TEXT)
    prompts = questions(N_PROMPTS)

    async def work() -> None:
        result = await pollux.run_many(prompts, sources=[source], config=config)
        assert result.status == "ok", result.errors
        assert len(result.answers) == N_PROMPTS

    return work


def _sdk_fanout(base_url: str) -> Callable[[], Awaitable[None]]:
    from openai import AsyncOpenAI

    prompts = questions(N_PROMPTS)
    state: dict[str, Any] = {}

    async def work() -> None:
        client = state.get("client")
        if client is None:
            client = state["client"] = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def one(prompt: str) -> str:
            async with limiter:
                completion = await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": SOURCE_TEXT + "\n\n" + prompt}],
                )
                return completion.choices[0].message.content or ""

        answers = await asyncio.gather(*(one(p) for p in prompts))
        assert len(answers) == N_PROMPTS

    async def close() -> None:
        client = state.pop("client", None)
        if client is not None:
            await client.close()

    async def work_and_close() -> None:
        await work()
        if state.get("runs", 0) >= 1:
            await close()
        state["runs"] = state.get("runs", 0) + 1

    return work_and_close


class _BareClient:
    """Keep-alive HTTP/1.1 over asyncio streams: JSON in, JSON out, nothing else."""

    def __init__(self, base_url: str) -> None:
        host_port = base_url.split("//", 1)[1].split("/", 1)[0]
        self.host, port = host_port.split(":")
        self.port = int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _conn(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.idle:
            return self.idle.pop()
        return await asyncio.open_connection(self.host, self.port)

    def _request(self, payload: dict[str, Any]) -> bytes:
        body = json.dumps(payload).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        return head + body

    async def complete(self, prompt: str) -> str:
        reader, writer = await self._conn()
        writer.write(
            self._request(
                {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": SOURCE_TEXT + "\n\n" + prompt}],
                }
            )
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        data = json.loads(await reader.readexactly(length))
        self.idle.append((reader, writer))
        return str(data["choices"][0]["message"]["content"])

    async def stream(self, prompt: str) -> int:
        reader, writer = await self._conn()
        writer.write(
            self._request(
                {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": prompt}],
                    "stream": True,
                }
            )
        )
        await reader.readuntil(b"\r\n\r\n")
        pieces = 0
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            data = (await reader.readexactly(size + 2))[:-2]
            payload = data[6:].strip()
            if payload == b"[DONE]":
                continue
            event = json.loads(payload)
            choices = event.get("choices")
            if choices and choices[0]["delta"].get("content"):
                pieces += 1
        self.idle.append((reader, writer))
        return pieces

    async def aclose(self) -> None:
        for _, writer in self.idle:
            writer.close()
            await writer.wait_closed()
        self.idle.clear()


def _bare_fanout(base_url: str) -> Callable[[], Awaitable[None]]:
    prompts = questions(N_PROMPTS)
    runs = {"n": 0}

    async def work() -> None:
        client = _BareClient(base_url)
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def one(prompt: str) -> str:
            async with limiter:
                return await client.complete(prompt)

        answers = await asyncio.gather(*(one(p) for p in prompts))
        assert len(answers) == N_PROMPTS
        await client.aclose()
        runs["n"] += 1

    return work


# -- one-shot and streaming --------------------------------------------------------------------


def _pollux_one_shot(base_url: str) -> Callable[[], Awaitable[None]]:
    import pollux

    config = pollux.Config(provider="local", model=MODEL, base_url=base_url)
    env = pollux.Environment()

    async def work() -> None:
        for i in range(ONE_SHOT_CALLS):
            out = await pollux.interact(env, pollux.Input(f"Hello {i}"), config=config)
            assert out.text

    return work


def _sdk_one_shot(base_url: str) -> Callable[[], Awaitable[None]]:
    from openai import AsyncOpenAI

    async def work() -> None:
        async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            for i in range(ONE_SHOT_CALLS):
                completion = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"Hello {i}"}]
                )
                assert completion.choices[0].message.content

    return work


def _pollux_stream(base_url: str) -> Callable[[], Awaitable[None]]:
    import pollux

    config = pollux.Config(provider="local", model=MODEL, base_url=base_url)
    env = pollux.Environment()

    async def work() -> None:
        for i in range(STREAMS):
            deltas = 0
            async for event in pollux.stream(env, pollux.Input(f"Stream {i}"), config=config):
                if event.type == "text_delta":
                    deltas += 1
            assert deltas == STREAM_CHUNKS

    return work


def _bare_stream(base_url: str) -> Callable[[], Awaitable[None]]:
    async def work() -> None:
        client = _BareClient(base_url)
        for i in range(STREAMS):
            assert await client.stream(f"Stream {i}") == STREAM_CHUNKS
        await client.aclose()

    return work


def _sdk_stream(base_url: str) -> Callable[[], Awaitable[None]]:
    from openai import AsyncOpenAI

    async def work() -> None:
        async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            for i in range(STREAMS):
                deltas = 0
                response = await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": f"Stream {i}"}],
                    stream=True,
                )
                async for chunk in response:
                    if chunk.choices and chunk.choices[0].delta.content:
                        deltas += 1
                assert deltas == STREAM_CHUNKS

    return work


def run() -> list[Result]:
    ideal = math.ceil(N_PROMPTS / CONCURRENCY) * LATENCY_S
    with canned_server(LATENCY_S, stream_chunks=STREAM_CHUNKS, path="/v1") as url:
        pollux_wall, pollux_cpu = measure(_pollux_fanout(url))
        sdk_wall, sdk_cpu = measure(_sdk_fanout(url))
        bare_wall, bare_cpu = measure(_bare_fanout(url))
    with canned_server(0.0, stream_chunks=STREAM_CHUNKS, path="/v1") as url:
        one_wall, _ = measure(_pollux_one_shot(url))
        sdk_one_wall, _ = measure(_sdk_one_shot(url))
        _, pollux_stream_cpu = measure(_pollux_stream(url))
        _, bare_stream_cpu = measure(_bare_stream(url))
        _, sdk_stream_cpu = measure(_sdk_stream(url))

    per = 1000.0 / N_PROMPTS
    chunks = STREAMS * STREAM_CHUNKS
    fanout = f"{N_PROMPTS} prompts, 20 KB source, C={CONCURRENCY}, {LATENCY_S * 1000:g} ms server"
    return [
        Result("fan-out efficiency: pollux run_many", ideal / pollux_wall, "x", 0.85, note=fanout),
        Result("fan-out efficiency: raw openai SDK", ideal / sdk_wall, "x", note="same workload"),
        Result("fan-out efficiency: bare socket client", ideal / bare_wall, "x"),
        Result("fan-out client CPU per request: pollux", pollux_cpu * per, "ms"),
        Result("fan-out client CPU per request: raw openai SDK", sdk_cpu * per, "ms"),
        Result("fan-out client CPU per request: bare socket", bare_cpu * per, "ms"),
        Result(
            "fan-out client CPU ratio pollux / bare socket",
            pollux_cpu / bare_cpu,
            "x",
            4.0,
            "lower",
        ),
        Result(
            "fan-out client CPU ratio raw SDK / bare socket", sdk_cpu / bare_cpu, "x", None, "lower"
        ),
        Result(
            "one-shot interact() wall per call (0 ms server)",
            one_wall * 1000 / ONE_SHOT_CALLS,
            "ms",
            2.5,
            "lower",
        ),
        Result(
            "one-shot raw SDK create() wall per call",
            sdk_one_wall * 1000 / ONE_SHOT_CALLS,
            "ms",
            None,
            "lower",
        ),
        Result("stream CPU per chunk: pollux", pollux_stream_cpu * 1e6 / chunks, "us"),
        Result("stream CPU per chunk: raw openai SDK", sdk_stream_cpu * 1e6 / chunks, "us"),
        Result("stream CPU per chunk: bare socket", bare_stream_cpu * 1e6 / chunks, "us"),
        Result(
            "stream CPU ratio pollux / bare socket",
            pollux_stream_cpu / bare_stream_cpu,
            "x",
            2.0,
            "lower",
        ),
    ]
