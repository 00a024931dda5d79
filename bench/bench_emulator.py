"""Emulator throughput: small Chat Completions (and Anthropic Messages) requests per second.

The Gemini wire's ``generateContent`` is measured beside it, as a ratio (its request translation
and validation must not make it the slow wire).

The emulator runs in its own process (``Emulator(process=True)``) so the load generator does not
share its interpreter. The load generator is a minimal asyncio HTTP/1.1 client (the official SDK
spends far more CPU per request than the server does, so it would measure itself); the SDK's own
rate is reported alongside for scale: the emulator must never be the bottleneck of a test suite.
"""

from __future__ import annotations

import asyncio
import json
import time

import openai

from bench._result import Result
from pollux.testing import Emulator

BODY = json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "What is two plus two?"}]}
).encode()


MESSAGES_BODY = json.dumps(
    {
        "model": "claude-haiku-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "What is two plus two?"}],
    }
).encode()
GEMINI_BODY = json.dumps(
    {
        "contents": [{"role": "user", "parts": [{"text": "What is two plus two?"}]}],
        "generationConfig": {"temperature": 0.5},
    }
).encode()
CHAT = ("/local/v1/chat/completions", BODY, "authorization: Bearer k")
MESSAGES = (
    "/anthropic/v1/messages",
    MESSAGES_BODY,
    "x-api-key: k\r\nanthropic-version: 2023-06-01",
)
GEMINI = (
    "/gemini/v1beta/models/gemini-2.5-flash-lite:generateContent",
    GEMINI_BODY,
    "x-goog-api-key: k",
)


def _request(port: int, route: tuple[str, bytes, str] = CHAT) -> bytes:
    path, body, headers = route
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\n{headers}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _worker(
    port: int, deadline: float, counts: list[int], route: tuple[str, bytes, str]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = _request(port, route)
    done = 0
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.decode())
            done += 1
    finally:
        counts.append(done)
        writer.close()
        await writer.wait_closed()


async def _load(
    port: int, connections: int, seconds: float, route: tuple[str, bytes, str] = CHAT
) -> float:
    counts: list[int] = []
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(_worker(port, deadline, counts, route) for _ in range(connections)))
    return sum(counts) / (time.perf_counter() - start)


def _sdk_rate(base_url: str, seconds: float) -> float:
    with openai.OpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
        done = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "What is two plus two?"}]
            )
            done += 1
        return done / (time.perf_counter() - start)


def _anthropic_sdk_rate(base_url: str, seconds: float) -> float:
    import anthropic

    with anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0) as client:
        done = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            client.messages.create(
                model="claude-haiku-4-5",
                max_tokens=64,
                messages=[{"role": "user", "content": "What is two plus two?"}],
            )
            done += 1
        return done / (time.perf_counter() - start)


def run() -> list[Result]:
    results: list[Result] = []
    with Emulator(process=True) as emu:
        asyncio.run(_load(emu.port, 4, 0.5))  # warm up
        one = asyncio.run(_load(emu.port, 1, 2.0))
        many = asyncio.run(_load(emu.port, 16, 3.0))
        gemini = asyncio.run(_load(emu.port, 16, 3.0, GEMINI))
        sdk = _sdk_rate(emu.base_url("local"), 2.0)
        messages = asyncio.run(_load(emu.port, 16, 3.0, MESSAGES))
        anthropic_sdk = _anthropic_sdk_rate(emu.base_url("anthropic"), 2.0)
    results.append(
        Result(
            "emulator Anthropic Messages / Chat Completions, 16 connections",
            messages / many,
            "x",
            target=0.5,
            note=f"{messages:.0f} req/s on the Anthropic wire, measured in the same run",
        )
    )
    results.append(
        Result(
            "emulator Anthropic capacity / anthropic SDK client rate",
            messages / anthropic_sdk,
            "x",
            target=1.0,
            note="above 1: the SDK, not the emulator, limits a test",
        )
    )
    results.append(
        Result("emulator (own process), 1 keep-alive connection", one, "req/s", target=1000)
    )
    results.append(
        Result("emulator (own process), 16 keep-alive connections", many, "req/s", target=2000)
    )
    results.append(
        Result(
            "Gemini generateContent / Chat Completions, 16 connections",
            gemini / many,
            "x",
            target=0.5,
            note=f"{gemini:.0f} req/s on the Gemini wire",
        )
    )
    results.append(Result("openai SDK sync client against the emulator, sequential", sdk, "req/s"))
    results.append(
        Result(
            "emulator capacity / SDK client rate",
            many / sdk,
            "x",
            target=1.0,
            note="above 1: the SDK, not the emulator, limits a test",
        )
    )
    with Emulator(process=True, latency=0.05) as emu:
        waiting = asyncio.run(_load(emu.port, 64, 3.0))
    ideal = 64 / 0.05
    results.append(
        Result(
            "emulator with 50 ms latency, 64 connections / ideal (1280 req/s)",
            waiting / ideal,
            "x",
            target=0.7,
            note="latency overlaps: no thread or process per request",
        )
    )
    with Emulator(record=False) as emu:
        in_thread = asyncio.run(_load(emu.port, 16, 2.0))
    results.append(
        Result("emulator (thread, same process as client), 16 conns", in_thread, "req/s")
    )
    return results
