"""Every provider's ``run_many`` fan-out over the Session's transport, side by side in one run.

Workload (issue 16): 300 prompts over one shared 20 KB text source, ``request_concurrency=32``,
against one canned loopback server (``bench/_canned_server.py``, its own process) that answers
every wire after 50 ms. Each client is warmed up first (imports, connections), then measured in
the same run, rounds interleaved, best round kept (the machine is shared):

- pollux ``run_many`` for ``local``, ``openrouter``, ``openai``, ``anthropic``, ``gemini``,
  ``azure_openai`` (the OpenAI provider's direct path at an Azure endpoint's v1 API) and
  ``vertex`` (the Gemini provider's direct path at Vertex project/location paths, with a bearer
  token from an injected ``google.auth`` credentials object, checked per request);
- the raw official SDK (retries off, a 32-slot semaphore) for ``openai`` (Responses),
  ``anthropic`` (Messages) and ``gemini`` (``generate_content``), each on its default transport;
- a bare asyncio socket client (keep-alive HTTP/1.1, JSON encode/decode, nothing else) posting the
  same body size to the same server: the floor.

Then the 10,000-prompt fan-out at ``request_concurrency=256`` for every provider and the bare
socket, each client in a worker process of its own (``bench/_big_fanout.py``): efficiency, client
CPU per request, resident memory growth over the run, and the server's own CPU per request and
lateness, which show the floor is the client's and not the server's.

Every CPU figure is the process CPU (``time.process_time``) of the process that runs that client
and nothing else: the canned server is always another process.

Targets: efficiency (ideal ``ceil(n / C) * 50 ms`` / wall) >= 0.85 and client CPU per request
<= 4x the bare socket's for every provider; the 10,000-prompt run >= 0.85 with < 100 MB growth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

from bench._big_fanout import BARE, big_results, run_big
from bench._fanout import SOURCE_TEXT, Work, best_of, canned_server, questions
from bench._result import Result

N_PROMPTS = 300
CONCURRENCY = 32
LATENCY_S = 0.05
BIG_PROMPTS = 10_000
BIG_CONCURRENCY = 256
BIG_ROUNDS = 2
ROUNDS = 3
MODELS = {
    "local": "bench-model",
    "openrouter": "openai/gpt-5-nano",
    "openai": "gpt-5-nano",
    "anthropic": "claude-sonnet-4-6",
    "gemini": "gemini-2.5-flash",
    "azure_openai": "bench-deployment",
    "vertex": "gemini-2.5-flash",
}


def _base_url(url: str, provider: str) -> str | None:
    """``Config.base_url`` for ``provider``: a local server's, or the Azure endpoint."""
    if provider == "local":
        return f"{url}/v1"
    return url if provider in ("azure_openai", "vertex") else None


def bench_config(url: str, provider: str, concurrency: int) -> Any:
    """The ``pollux.Config`` every bench client of ``provider`` uses against ``url``."""
    import pollux

    credentials: dict[str, Any] = {"api_key": "bench-key"}
    if provider == "vertex":
        from google.oauth2.credentials import Credentials

        credentials = {
            "credentials": Credentials(token="ya29.bench-token"),  # type: ignore[no-untyped-call]
            "project": "bench-project",
            "location": "us-central1",
        }
    return pollux.Config(
        provider=provider,  # type: ignore[arg-type]
        model=MODELS[provider],
        base_url=_base_url(url, provider),
        request_concurrency=concurrency,
        retry=pollux.RetryPolicy(max_attempts=1),
        **credentials,
    )


def _sdk_env(url: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": f"{url}/v1",
        "ANTHROPIC_BASE_URL": url,
        "GOOGLE_GEMINI_BASE_URL": url,
        "OPENROUTER_BASE_URL": f"{url}/api/v1",
    }


def _point_sdks_at(url: str) -> None:
    os.environ.update(_sdk_env(url))


def _measure(make: Callable[[], tuple[Work, Work]]) -> tuple[float, float]:
    """(wall s, client CPU s) of one measured pass after a warm-up pass on the same client."""
    result: dict[str, float] = {}

    async def main() -> None:
        work, close = make()
        try:
            await work()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await work()
            result["wall"] = time.perf_counter() - wall0
            result["cpu"] = time.process_time() - cpu0
        finally:
            await close()

    asyncio.run(main())
    return result["wall"], result["cpu"]


def _pollux(url: str, provider: str, n: int = N_PROMPTS, c: int = CONCURRENCY) -> Any:
    def make() -> tuple[Work, Work]:
        import pollux

        config = bench_config(url, provider, c)
        env = pollux.Environment(
            sources=[pollux.Source.from_text(SOURCE_TEXT)],
            cache="none" if provider == "anthropic" else None,
        )
        session = pollux.Session(config)
        prompts = questions(n)

        async def work() -> None:
            result = await session.run_many(prompts, environment=env)
            assert result.status == "ok", result.errors[:1]

        return work, session.aclose

    return make


def _sdk(provider: str) -> Any:
    def make() -> tuple[Work, Work]:
        limiter = asyncio.Semaphore(CONCURRENCY)
        prompts = questions(N_PROMPTS)
        if provider == "openai":
            import openai

            oclient = openai.AsyncOpenAI(api_key="bench-key", max_retries=0)

            async def one(prompt: str) -> None:
                async with limiter:
                    await oclient.responses.create(
                        model=MODELS["openai"], input=f"{SOURCE_TEXT}\n\n{prompt}"
                    )

            close: Work = oclient.close
        elif provider == "anthropic":
            import anthropic

            aclient = anthropic.AsyncAnthropic(api_key="bench-key", max_retries=0)

            async def one(prompt: str) -> None:
                async with limiter:
                    await aclient.messages.create(
                        model=MODELS["anthropic"],
                        max_tokens=1024,
                        messages=[{"role": "user", "content": f"{SOURCE_TEXT}\n\n{prompt}"}],
                    )

            close = aclient.close
        else:
            from google import genai
            from google.genai import types

            gclient = genai.Client(
                api_key="bench-key",
                http_options=types.HttpOptions(retry_options=types.HttpRetryOptions(attempts=1)),
            )

            async def one(prompt: str) -> None:
                async with limiter:
                    await gclient.aio.models.generate_content(
                        model=MODELS["gemini"], contents=[SOURCE_TEXT, prompt]
                    )

            close = gclient.aio.aclose

        async def work() -> None:
            await asyncio.gather(*(one(p) for p in prompts))

        return work, close

    return make


class _Bare:
    """Keep-alive HTTP/1.1 over asyncio streams: JSON in, JSON out, nothing else."""

    def __init__(self, url: str) -> None:
        host, port = url.split("//", 1)[1].split(":")
        self.host, self.port = host, int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.all: list[asyncio.StreamWriter] = []

    async def post(self, prompt: str) -> Any:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.all.append(writer)
        payload = {
            "model": "bench-model",
            "messages": [{"role": "user", "content": f"{SOURCE_TEXT}\n\n{prompt}"}],
        }
        body = json.dumps(payload).encode()
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        data = json.loads(await reader.readexactly(length))
        self.idle.append((reader, writer))
        return data

    async def aclose(self) -> None:
        for writer in self.all:
            writer.close()
        for writer in self.all:
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _bare(url: str, n: int = N_PROMPTS, c: int = CONCURRENCY) -> Any:
    def make() -> tuple[Work, Work]:
        client = _Bare(url)
        limiter = asyncio.Semaphore(c)
        prompts = questions(n)

        async def one(prompt: str) -> None:
            async with limiter:
                await client.post(prompt)

        async def work() -> None:
            await asyncio.gather(*(one(p) for p in prompts))

        return work, client.aclose

    return make


def run() -> list[Result]:
    ideal = math.ceil(N_PROMPTS / CONCURRENCY) * LATENCY_S
    clients: dict[str, Callable[[], tuple[Work, Work]]] = {}
    saved = {
        k: os.environ.get(k)
        for k in (
            "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL",
            "GOOGLE_GEMINI_BASE_URL",
            "OPENROUTER_BASE_URL",
        )
    }
    with canned_server(LATENCY_S) as url:
        _point_sdks_at(url)
        try:
            for provider in MODELS:
                clients[f"pollux {provider}"] = _pollux(url, provider)
            for provider in ("openai", "anthropic", "gemini"):
                clients[f"raw SDK {provider}"] = _sdk(provider)
            clients["bare socket"] = _bare(url)
            best = best_of(ROUNDS, clients, _measure)
            big = run_big(
                url,
                [BARE, *MODELS],
                prompts=BIG_PROMPTS,
                concurrency=BIG_CONCURRENCY,
                latency_s=LATENCY_S,
                rounds=BIG_ROUNDS,
                env=_sdk_env(url),
            )
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    per = 1000.0 / N_PROMPTS
    bare_cpu = best["bare socket"][1]
    note = f"{N_PROMPTS} prompts, 20 KB source, C={CONCURRENCY}, {LATENCY_S * 1000:g} ms server"
    results: list[Result] = []
    for i, (name, (wall, _)) in enumerate(best.items()):
        target = 0.85 if name.startswith("pollux") else None
        results.append(
            Result(f"efficiency: {name}", ideal / wall, "x", target, note=note if i == 0 else "")
        )
    results += [Result(f"CPU per request: {n}", cpu * per, "ms") for n, (_, cpu) in best.items()]
    results += [
        Result(
            f"CPU ratio {name} / bare socket",
            cpu / bare_cpu,
            "x",
            4.0 if name.startswith("pollux") else None,
            "lower",
        )
        for name, (_, cpu) in best.items()
        if name != "bare socket"
    ]
    results += big_results(
        big, note=f"{BIG_PROMPTS} prompts, C={BIG_CONCURRENCY}, each client in its own process"
    )
    return results
