"""The Anthropic provider's ``run_many`` fan-out beside the raw ``anthropic`` SDK and a bare socket.

Workload: 300 prompts over one shared 20 KB text source, ``request_concurrency=32``, against a
loopback Messages server (``bench/_canned_server.py``, its own process) that answers after 50 ms
with a canned message. Efficiency = ideal time (``ceil(300 / 32) * 50 ms``) / actual time.

Clients, each warmed up first (connections, imports), then measured in the same run:

- pollux ``run_many`` with ``cache="none"`` (the same bytes on the wire as the raw SDK loop):
  ``messages.create`` goes through the Session's transport (pollux's keep-alive pool, raw JSON);
- pollux ``run_many`` with the default cache setting: a 20 KB prefix is cacheable, so pollux
  runs the first call alone (it writes the prompt cache) and fans out the rest (they read it).
  That costs one extra round trip of wall time and saves the write premium on 299 calls;
- the raw SDK (``AsyncAnthropic(max_retries=0)`` with a 32-slot semaphore), on httpx (the SDK's
  default) and on aiohttp;
- a bare asyncio socket client (keep-alive, JSON encode/decode, nothing else): the floor.

Targets: pollux (``cache="none"``) is not slower than the raw SDK on its default transport
(wall-time ratio <= 1.05); its efficiency is >= 0.85 and its client CPU per request <= 4x the
bare socket's (issue 16).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from bench._fanout import SOURCE_TEXT, Work, best_of, canned_server, measure, questions
from bench._result import Result

N_PROMPTS = 300
CONCURRENCY = 32
LATENCY_S = 0.05
MODEL = "claude-sonnet-4-6"
ROUNDS = 5


def _pollux_fanout(base_url: str, *, cache: Any) -> Callable[[], Awaitable[None]]:
    import os

    import pollux
    from pollux.providers.anthropic import AnthropicProvider

    os.environ["ANTHROPIC_BASE_URL"] = base_url
    config = pollux.Config(
        provider="anthropic",
        model=MODEL,
        api_key="bench-key",
        request_concurrency=CONCURRENCY,
        retry=pollux.RetryPolicy(max_attempts=1),
    )
    env = pollux.Environment(sources=[pollux.Source.from_text(SOURCE_TEXT)], cache=cache)
    prompts = questions(N_PROMPTS)
    state: dict[str, Any] = {}

    async def work() -> None:
        session = state.get("session")
        if session is None:
            session = state["session"] = pollux.Session(config)
            rt = session._runtime()
            assert isinstance(rt.provider, AnthropicProvider)
        result = await session.run_many(prompts, environment=env)
        assert result.status == "ok", result.errors
        state["runs"] = state.get("runs", 0) + 1
        if state["runs"] >= 2:
            await state.pop("session").aclose()

    return work


def _sdk_fanout(base_url: str, *, aiohttp: bool) -> Callable[[], Awaitable[None]]:
    import anthropic

    prompts = questions(N_PROMPTS)
    state: dict[str, Any] = {}

    async def work() -> None:
        client = state.get("client")
        if client is None:
            options: dict[str, Any] = {}
            if aiohttp:
                options["http_client"] = anthropic.DefaultAioHttpClient()
            client = state["client"] = anthropic.AsyncAnthropic(
                base_url=base_url, api_key="bench-key", max_retries=0, **options
            )
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def one(prompt: str) -> str:
            async with limiter:
                message = await client.messages.create(
                    model=MODEL,
                    max_tokens=16384,
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": SOURCE_TEXT},
                                {"type": "text", "text": prompt},
                            ],
                        }
                    ],
                )
                return str(getattr(message.content[0], "text", ""))

        answers = await asyncio.gather(*(one(p) for p in prompts))
        assert len(answers) == N_PROMPTS
        state["runs"] = state.get("runs", 0) + 1
        if state["runs"] >= 2:
            await state.pop("client").close()

    return work


class _BareClient:
    """Keep-alive HTTP/1.1 over asyncio streams: JSON in, JSON out, nothing else."""

    def __init__(self, base_url: str) -> None:
        host, port = base_url.split("//", 1)[1].split(":")
        self.host, self.port = host, int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def complete(self, prompt: str) -> str:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        body = json.dumps(
            {
                "model": MODEL,
                "max_tokens": 16384,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": SOURCE_TEXT},
                            {"type": "text", "text": prompt},
                        ],
                    }
                ],
            }
        ).encode()
        writer.write(
            (
                f"POST /v1/messages HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Content-Type: application/json\r\nx-api-key: bench-key\r\n"
                f"anthropic-version: 2023-06-01\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        data = json.loads(await reader.readexactly(length))
        self.idle.append((reader, writer))
        return str(data["content"][0]["text"])

    async def aclose(self) -> None:
        for _, writer in self.idle:
            writer.close()
            await writer.wait_closed()
        self.idle.clear()


def _bare_fanout(base_url: str) -> Callable[[], Awaitable[None]]:
    prompts = questions(N_PROMPTS)

    async def work() -> None:
        client = _BareClient(base_url)
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def one(prompt: str) -> str:
            async with limiter:
                return await client.complete(prompt)

        answers = await asyncio.gather(*(one(p) for p in prompts))
        assert len(answers) == N_PROMPTS
        await client.aclose()

    return work


def _measure_made(make: Callable[[], Work]) -> tuple[float, float]:
    return measure(make())


def run() -> list[Result]:
    ideal = math.ceil(N_PROMPTS / CONCURRENCY) * LATENCY_S
    with canned_server(LATENCY_S) as url:
        best = best_of(
            ROUNDS,
            {
                "p": lambda: _pollux_fanout(url, cache="none"),
                "p_warm": lambda: _pollux_fanout(url, cache=None),
                "sdk_httpx": lambda: _sdk_fanout(url, aiohttp=False),
                "sdk_aio": lambda: _sdk_fanout(url, aiohttp=True),
                "bare": lambda: _bare_fanout(url),
            },
            _measure_made,
        )
    p, p_warm = best["p"], best["p_warm"]
    sdk_httpx, sdk_aio, bare = best["sdk_httpx"], best["sdk_aio"], best["bare"]

    per = 1000.0 / N_PROMPTS
    note = f"{N_PROMPTS} prompts, 20 KB source, C={CONCURRENCY}, {LATENCY_S * 1000:g} ms server"
    rows = [
        ("pollux run_many, cache='none'", p),
        ("pollux run_many, cache warm-up then fan-out", p_warm),
        ("raw anthropic SDK, httpx (its default)", sdk_httpx),
        ("raw anthropic SDK, aiohttp", sdk_aio),
        ("bare socket client", bare),
    ]
    results = [
        Result(
            f"efficiency: {name}",
            ideal / wall,
            "x",
            0.85 if i == 0 else None,
            "higher",
            note=note if i == 0 else "",
        )
        for i, (name, (wall, _)) in enumerate(rows)
    ]
    results += [
        Result(f"client CPU per request: {name}", cpu * per, "ms") for name, (_, cpu) in rows
    ]
    results += [
        Result(
            "wall ratio pollux / raw SDK (httpx)",
            p[0] / sdk_httpx[0],
            "x",
            1.05,
            "lower",
        ),
        Result("wall ratio pollux / raw SDK (aiohttp)", p[0] / sdk_aio[0], "x"),
        Result("CPU ratio pollux / bare socket", p[1] / bare[1], "x", 4.0, "lower"),
        Result("CPU ratio raw SDK (httpx) / bare socket", sdk_httpx[1] / bare[1], "x"),
    ]
    return results
