"""Streaming client CPU per chunk for every provider, beside a bare-socket SSE floor per wire.

Workload (issue 16's streaming target): 50 streamed answers of 200 text chunks each, 10 streams
in flight, from the emulator (``pollux.testing.Emulator(process=True)``: the providers' real SSE
wires, served from its own process so its CPU is not counted). The emulator writes each event as
its own HTTP chunk; two servers run side by side:

- ``burst``: every event of an answer written at once (a fast server; reads carry many events);
- ``paced``: one event every 0.5 ms per stream (what a model's token rate looks like to the
  client: most socket reads carry one event, so per-read costs count).

Clients, each in a fresh event loop, warmed up (imports, connections) and then measured over the
same 50 answers (the raw SDKs over 20, in the first round only), best of two interleaved rounds
(the machine is shared):

- pollux ``stream()`` for ``local``, ``openrouter`` (Chat Completions), ``openai`` (Responses),
  ``anthropic`` (Messages) and ``gemini`` (``streamGenerateContent``), counting ``text_delta``
  events and reading ``done.output``;
- the raw official SDK's stream for each wire (``openai`` chat and responses, ``anthropic``,
  ``google-genai``), retries off, on its default transport;
- the floor, per wire: keep-alive HTTP/1.1 over asyncio streams that reads the chunked body
  chunk by chunk, splits the SSE events and ``json.loads`` each ``data:`` line, nothing else.

Figure: client CPU (``time.process_time``) per text chunk, and its ratio to the same wire's floor.
Target: pollux <= 2x the floor on every provider, in both modes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from bench._result import Result

N_ANSWERS = 50
SDK_ANSWERS = 20  # the raw SDKs cost 5-25x as much per chunk: fewer answers measure them as well
CHUNKS = 200
CONCURRENCY = 10
PACE_S = 0.0005
ROUNDS = 2
TARGET = 2.0

#: provider -> (emulator wire, model, floor wire)
PROVIDERS = {
    "local": ("local", "bench-model", "chat"),
    "openrouter": ("openrouter", "openai/gpt-5-nano", "chat"),
    "openai": ("openai", "gpt-5-nano", "responses"),
    "anthropic": ("anthropic", "claude-sonnet-4-6", "messages"),
    "gemini": ("gemini", "gemini-2.5-flash", "gemini"),
}
_ENV = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "OPENROUTER_BASE_URL")

Work = Callable[[int], Awaitable[None]]
Close = Callable[[], Awaitable[None]]
Make = Callable[[], Awaitable[tuple[Work, Close]]]


def _prompt(i: int) -> str:
    """A prompt whose echoed answer is exactly ``CHUNKS`` chunks on every wire."""
    # The emulator's default answer is "Emulated reply to: <prompt>", cut into deltas of about
    # 24 characters on word boundaries: 18-character words plus a space make one delta each.
    words = " ".join(f"w{i:04d}{k:05d}abcdefghi" for k in range(CHUNKS - 2))
    return f"{words} end{i:04d}"


def _count_floor(wire: str, event: Any) -> bool:
    """Whether one decoded event of ``wire`` carries answer text (the floor's only logic)."""
    if wire == "chat":
        choices = event.get("choices")
        return bool(choices and choices[0]["delta"].get("content"))
    if wire == "responses":
        return bool(event.get("type") == "response.output_text.delta")
    if wire == "messages":
        return bool(event.get("type") == "content_block_delta")
    candidates = event.get("candidates")
    return bool(candidates and candidates[0]["content"]["parts"][0].get("text"))


# -- the floor -------------------------------------------------------------------------------


class _Floor:
    """Keep-alive HTTP/1.1 SSE reader: post, read chunks, split events, json-decode data."""

    def __init__(self, url: str, path: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path + path
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.all: list[asyncio.StreamWriter] = []

    async def stream(self, body: dict[str, Any], wire: str) -> int:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.all.append(writer)
        data = json.dumps(body).encode()
        writer.write(
            (
                f"POST {self.path} HTTP/1.1\r\nHost: {self.host}\r\n{self.extra}"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            ).encode()
            + data
        )
        await reader.readuntil(b"\r\n\r\n")
        pieces = 0
        buffer = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            buffer += (await reader.readexactly(size + 2))[:-2]
            while True:
                end = buffer.find(b"\n\n")
                if end < 0:
                    break
                block, buffer = buffer[:end], buffer[end + 2 :]
                for line in block.split(b"\n"):
                    if line.startswith(b"data: "):
                        payload = line[6:]
                        if payload != b"[DONE]" and _count_floor(wire, json.loads(payload)):
                            pieces += 1
        self.idle.append((reader, writer))
        return pieces

    async def aclose(self) -> None:
        for writer in self.all:
            writer.close()
        for writer in self.all:
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _floor_request(wire: str, url: str, model: str, prompt: str) -> tuple[str, dict[str, Any]]:
    if wire == "chat":
        body = {"model": model, "stream": True, "messages": [{"role": "user", "content": prompt}]}
        return "/chat/completions", body
    if wire == "responses":
        return "/responses", {"model": model, "stream": True, "input": prompt}
    if wire == "messages":
        messages = [{"role": "user", "content": prompt}]
        body = {"model": model, "max_tokens": 4096, "stream": True, "messages": messages}
        return "/v1/messages", body
    contents = [{"role": "user", "parts": [{"text": prompt}]}]
    return f"/v1beta/models/{model}:streamGenerateContent?alt=sse", {"contents": contents}


def _floor(url: str, provider: str) -> Make:
    _, model, wire = PROVIDERS[provider]

    async def make() -> tuple[Work, Close]:
        path, _ = _floor_request(wire, url, model, "")
        headers = {"x-api-key": "bench-key", "x-goog-api-key": "bench-key"}
        headers["authorization"] = "Bearer bench-key"
        headers["anthropic-version"] = "2023-06-01"
        client = _Floor(url, path, headers)

        async def one(i: int) -> int:
            return await client.stream(_floor_request(wire, url, model, _prompt(i))[1], wire)

        return _fan(one), client.aclose

    return make


# -- pollux and the raw SDKs -----------------------------------------------------------------


def _fan(one: Callable[[int], Awaitable[int]]) -> Work:
    async def work(n: int) -> None:
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def limited(i: int) -> int:
            async with limiter:
                return await one(i)

        counts = await asyncio.gather(*(limited(i) for i in range(n)))
        assert all(c == CHUNKS for c in counts), counts[:3]

    return work


def _pollux(url: str, provider: str) -> Make:
    async def make() -> tuple[Work, Close]:
        import pollux

        config = pollux.Config(
            provider=provider,  # type: ignore[arg-type]
            model=PROVIDERS[provider][1],
            api_key="bench-key",
            base_url=url if provider == "local" else None,
            request_concurrency=CONCURRENCY,
            retry=pollux.RetryPolicy(max_attempts=1),
        )
        session = pollux.Session(config)
        env = pollux.Environment()

        async def one(i: int) -> int:
            deltas = 0
            output = None
            async for event in session.stream(env, pollux.Input(_prompt(i))):
                if event.type == "text_delta":
                    deltas += 1
                elif event.type == "done":
                    output = event.output
            assert output is not None and output.usage is not None
            return deltas

        return _fan(one), session.aclose

    return make


def _sdk(url: str, provider: str) -> Make:
    _, model, wire = PROVIDERS[provider]

    async def make() -> tuple[Work, Close]:
        one: Callable[[int], Awaitable[int]]
        if wire in ("chat", "responses"):
            import openai

            oclient = openai.AsyncOpenAI(base_url=url, api_key="bench-key", max_retries=0)
            close: Close = oclient.close
            if wire == "chat":

                async def one(i: int) -> int:
                    deltas = 0
                    response = await oclient.chat.completions.create(
                        model=model,
                        messages=[{"role": "user", "content": _prompt(i)}],
                        stream=True,
                    )
                    async for chunk in response:
                        if chunk.choices and chunk.choices[0].delta.content:
                            deltas += 1
                    return deltas

            else:

                async def one(i: int) -> int:
                    deltas = 0
                    events = await oclient.responses.create(
                        model=model, input=_prompt(i), stream=True
                    )
                    async for event in events:
                        if event.type == "response.output_text.delta":
                            deltas += 1
                    return deltas

        elif wire == "messages":
            import anthropic

            aclient = anthropic.AsyncAnthropic(base_url=url, api_key="bench-key", max_retries=0)
            close = aclient.close

            async def one(i: int) -> int:
                deltas = 0
                events = await aclient.messages.create(
                    model=model,
                    max_tokens=4096,
                    messages=[{"role": "user", "content": _prompt(i)}],
                    stream=True,
                )
                async for event in events:
                    if event.type == "content_block_delta":
                        deltas += 1
                return deltas

        else:
            from google import genai
            from google.genai import types

            gclient = genai.Client(
                api_key="bench-key",
                http_options=types.HttpOptions(
                    base_url=url, retry_options=types.HttpRetryOptions(attempts=1)
                ),
            )
            close = gclient.aio.aclose

            async def one(i: int) -> int:
                deltas = 0
                chunks = await gclient.aio.models.generate_content_stream(
                    model=model, contents=_prompt(i)
                )
                async for chunk in chunks:
                    if chunk.text:
                        deltas += 1
                return deltas

        return _fan(one), close

    return make


# -- measurement -----------------------------------------------------------------------------


def _measure(make: Make, answers: int = N_ANSWERS) -> float:
    """Client CPU seconds per chunk of one measured pass, after a short warm-up pass."""
    result: dict[str, float] = {}

    async def main() -> None:
        work, close = await make()
        try:
            await work(CONCURRENCY)  # warm-up: imports, connections, caches
            cpu0 = time.process_time()
            await work(answers)
            result["cpu"] = (time.process_time() - cpu0) / (answers * CHUNKS)
        finally:
            await close()

    asyncio.run(main())
    return result["cpu"]


@contextlib.contextmanager
def _servers() -> Iterator[dict[str, Any]]:
    from pollux.testing import Emulator

    saved = {k: os.environ.get(k) for k in _ENV}
    models = tuple(model for _, model, _ in PROVIDERS.values())
    with (
        Emulator(process=True, record=False, models=models) as burst,
        Emulator(process=True, record=False, models=models, stream_delay=PACE_S) as paced,
    ):
        try:
            yield {"burst": burst, "paced": paced}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _point_sdks_at(emu: Any) -> None:
    os.environ["OPENAI_BASE_URL"] = emu.base_url("openai")
    os.environ["ANTHROPIC_BASE_URL"] = emu.base_url("anthropic")
    os.environ["GOOGLE_GEMINI_BASE_URL"] = emu.base_url("gemini")
    os.environ["OPENROUTER_BASE_URL"] = emu.base_url("openrouter")


def _clients(emu: Any) -> dict[str, Make]:
    clients: dict[str, Make] = {}
    for provider, (wire_name, _, _) in PROVIDERS.items():
        url = emu.base_url(wire_name)
        clients[f"pollux {provider}"] = _pollux(url, provider)
        clients[f"floor {provider}"] = _floor(url, provider)
        if provider != "openrouter":
            clients[f"raw SDK {provider}"] = _sdk(url, provider)
    return clients


def measure_all(
    modes: tuple[str, ...] = ("burst", "paced"), rounds: int = ROUNDS, *, sdk: bool = True
) -> dict[str, dict[str, float]]:
    """Best client CPU seconds per chunk per (mode, client), the clients interleaved in rounds.

    The raw SDKs (5-25x the floor, a reference only) run in the first round alone, over
    ``SDK_ANSWERS`` answers, which keeps the whole bench under a minute.
    """
    best: dict[str, dict[str, float]] = {mode: {} for mode in modes}
    with _servers() as servers:
        for round_ in range(rounds):
            for mode in modes:
                emu = servers[mode]
                _point_sdks_at(emu)
                for name, make in _clients(emu).items():
                    if (round_ or not sdk) and name.startswith("raw SDK"):
                        continue
                    sdk_client = name.startswith("raw SDK")
                    cpu = _measure(make, SDK_ANSWERS if sdk_client else N_ANSWERS)
                    old = best[mode].get(name)
                    best[mode][name] = cpu if old is None else min(cpu, old)
    return best


def run() -> list[Result]:
    best = measure_all()
    load = os.getloadavg()[0]
    results: list[Result] = []
    for mode, cpu in best.items():
        note = (
            f"{mode}: {N_ANSWERS} answers x {CHUNKS} chunks, {CONCURRENCY} in flight, "
            f"load {load:.1f}"
        )
        for i, provider in enumerate(PROVIDERS):
            floor = cpu[f"floor {provider}"]
            for kind in ("pollux", "raw SDK", "floor"):
                name = f"{kind} {provider}"
                if name not in cpu:
                    continue
                results.append(
                    Result(
                        f"{mode} CPU per chunk: {name}",
                        cpu[name] * 1e6,
                        "us",
                        note=note if i == 0 and kind == "pollux" else "",
                    )
                )
            for kind in ("pollux", "raw SDK"):
                name = f"{kind} {provider}"
                if name in cpu:
                    results.append(
                        Result(
                            f"{mode} CPU ratio {name} / floor",
                            cpu[name] / floor,
                            "x",
                            TARGET if kind == "pollux" else None,
                            "lower",
                        )
                    )
    return results
