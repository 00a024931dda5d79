"""The gemini provider's ``run_many`` fan-out, side by side with raw google-genai and a bare socket.

300 prompts over one shared 20 KB text source, C=32, a canned Gemini server
(``bench/_canned_server.py``, its own process) answering after 50 ms. Clients, each warmed up
first and measured in the same run:

- pollux ``run_many`` with ``provider="gemini"``: ``generateContent`` goes through the Session's
  transport (pollux's keep-alive pool, raw JSON), everything else through the SDK;
- the raw ``google-genai`` async client (``client.aio.models.generate_content`` under a
  32-slot semaphore, retries off), on each transport;
- a bare asyncio socket client (keep-alive HTTP/1.1, JSON encode/decode, nothing else): the floor.

Reported: fan-out efficiency (ideal ``ceil(300 / 32) * 50 ms`` / wall) and client CPU per request,
as ratios to the bare socket and pollux / raw SDK. Targets (issue 16): pollux's efficiency
>= 0.85 and its client CPU per request <= 4x the bare socket's; pollux is not costlier than the
raw SDK on aiohttp (CPU ratio <= 1.1).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Awaitable, Callable
from typing import Any

from bench._fanout import SOURCE_TEXT, canned_server, measure, questions
from bench._result import Result

N_PROMPTS = 300
CONCURRENCY = 32
LATENCY_S = 0.05
MODEL = "gemini-2.5-flash"


def _pollux() -> Callable[[], Awaitable[None]]:
    import pollux

    config = pollux.Config(
        provider="gemini",
        model=MODEL,
        api_key="bench-key",
        request_concurrency=CONCURRENCY,
        retry=pollux.RetryPolicy(max_attempts=1),
    )
    source = pollux.Source.from_text(SOURCE_TEXT)
    prompts = questions(N_PROMPTS)

    async def work() -> None:
        async with pollux.Session(config) as session:
            result = await session.run_many(prompts, sources=[source])
        assert result.status == "ok", result.errors
        assert len(result.answers) == N_PROMPTS

    return work


def _sdk(transport: str) -> Callable[[], Awaitable[None]]:
    from google import genai
    from google.genai import types

    prompts = questions(N_PROMPTS)

    async def work() -> None:
        options: dict[str, Any] = {"retry_options": types.HttpRetryOptions(attempts=1)}
        if transport == "httpx":
            import httpx

            options["async_client_args"] = {"transport": httpx.AsyncHTTPTransport()}
        client = genai.Client(api_key="bench-key", http_options=types.HttpOptions(**options))
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def one(prompt: str) -> str:
            async with limiter:
                response = await client.aio.models.generate_content(
                    model=MODEL, contents=[SOURCE_TEXT, prompt]
                )
                return response.text or ""

        answers = await asyncio.gather(*(one(p) for p in prompts))
        assert len(answers) == N_PROMPTS
        await client.aio.aclose()

    return work


class _Bare:
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
            {"contents": [{"role": "user", "parts": [{"text": SOURCE_TEXT}, {"text": prompt}]}]}
        ).encode()
        writer.write(
            (
                f"POST /v1beta/models/{MODEL}:generateContent HTTP/1.1\r\nHost: {self.host}\r\n"
                f"x-goog-api-key: bench-key\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        data = json.loads(await reader.readexactly(length))
        self.idle.append((reader, writer))
        return str(data["candidates"][0]["content"]["parts"][0]["text"])

    async def aclose(self) -> None:
        for _, writer in self.idle:
            writer.close()
            await writer.wait_closed()


def _bare(base_url: str) -> Callable[[], Awaitable[None]]:
    prompts = questions(N_PROMPTS)

    async def work() -> None:
        client = _Bare(base_url)
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def one(prompt: str) -> str:
            async with limiter:
                return await client.complete(prompt)

        answers = await asyncio.gather(*(one(p) for p in prompts))
        assert len(answers) == N_PROMPTS
        await client.aclose()

    return work


def run() -> list[Result]:
    ideal = math.ceil(N_PROMPTS / CONCURRENCY) * LATENCY_S
    previous = os.environ.get("GOOGLE_GEMINI_BASE_URL")
    with canned_server(LATENCY_S) as url:
        os.environ["GOOGLE_GEMINI_BASE_URL"] = url
        try:
            measured = {
                "pollux": measure(_pollux()),
                "raw SDK aiohttp": measure(_sdk("aiohttp")),
                "raw SDK httpx": measure(_sdk("httpx")),
                "bare socket": measure(_bare(url)),
            }
        finally:
            if previous is None:
                os.environ.pop("GOOGLE_GEMINI_BASE_URL", None)
            else:
                os.environ["GOOGLE_GEMINI_BASE_URL"] = previous
    per = 1000.0 / N_PROMPTS
    bare_cpu = measured["bare socket"][1]
    note = f"{N_PROMPTS} prompts, 20 KB source, C={CONCURRENCY}, {LATENCY_S * 1000:g} ms server"
    results = [
        Result(
            f"gemini fan-out efficiency: {name}",
            ideal / wall,
            "x",
            0.85 if name == "pollux" else None,
            "higher",
            note=note if i == 0 else "",
        )
        for i, (name, (wall, _)) in enumerate(measured.items())
    ]
    results += [
        Result(f"gemini fan-out CPU per request: {name}", cpu * per, "ms")
        for name, (_, cpu) in measured.items()
    ]
    results += [
        Result(
            f"gemini CPU ratio {name} / bare socket",
            cpu / bare_cpu,
            "x",
            4.0 if name == "pollux" else None,
            "lower",
        )
        for name, (_, cpu) in measured.items()
        if name != "bare socket"
    ]
    for transport in ("aiohttp", "httpx"):
        results.append(
            Result(
                f"gemini CPU ratio pollux / raw SDK ({transport})",
                measured["pollux"][1] / measured[f"raw SDK {transport}"][1],
                "x",
                1.1 if transport == "aiohttp" else None,
                "lower",
            )
        )
    return results
