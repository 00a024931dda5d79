"""What provider="openai" costs next to the raw ``openai`` SDK (Responses API), side by side.

Both sides send the same request body through the same SDK to the same loopback emulator, which
runs in its own process so that only the client's CPU is measured. There are two workloads:
one-shot calls in sequence, and a fan-out of prompts with ``CONCURRENCY`` requests in flight. The
raw side calls ``responses.create`` with ordinary keyword arguments. pollux adds planning,
compilation, extraction, assembly, the limiter and its retry loop. It also sends the body as
``extra_body``, which skips the SDK's TypedDict transform of ``input``. Rounds alternate between
the two sides and the median is reported, because other processes on the machine add noise.
Client CPU time (``time.process_time``) is the steadier of the two numbers.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai

from bench._result import Result
from pollux import Config, Environment, Input, Session
from pollux.testing import Emulator

CALLS = 150
FANOUT = 200
CONCURRENCY = 16
ROUNDS = 3
MODEL = "gpt-5-nano"


def _body(i: int) -> list[Any]:
    return [{"role": "user", "content": [{"type": "input_text", "text": f"Question {i}?"}]}]


async def _measure(work: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    await work()
    return time.perf_counter() - wall, time.process_time() - cpu


async def _raw(base_url: str, fanout: bool) -> tuple[float, float]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
        await client.responses.create(model=MODEL, input="warm up")
        limiter = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> None:
            async with limiter:
                response = await client.responses.create(model=MODEL, input=_body(i))
                assert response.output_text

        async def sequential() -> None:
            for i in range(CALLS):
                await one(i)

        async def parallel() -> None:
            await asyncio.gather(*(one(i) for i in range(FANOUT)))

        return await _measure(parallel if fanout else sequential)


async def _pollux(config: Config, fanout: bool) -> tuple[float, float]:
    env = Environment()
    async with Session(config) as session:
        await session.interact(env, Input("warm up"))

        async def sequential() -> None:
            for i in range(CALLS):
                out = await session.interact(env, Input(f"Question {i}?"))
                assert out.text

        async def parallel() -> None:
            results = await session.run_many([f"Question {i}?" for i in range(FANOUT)])
            assert results.status == "ok"

        return await _measure(parallel if fanout else sequential)


def _median(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def run() -> list[Result]:
    previous = os.environ.get("OPENAI_BASE_URL")
    results: list[Result] = []
    with Emulator(process=True) as emu:
        base_url = emu.base_url("openai")
        os.environ["OPENAI_BASE_URL"] = base_url
        try:
            config = Config(
                provider="openai", model=MODEL, api_key="k", request_concurrency=CONCURRENCY
            )
            for fanout, label, count in ((False, "one-shot", CALLS), (True, "fan-out", FANOUT)):
                raw: list[tuple[float, float]] = []
                ours: list[tuple[float, float]] = []
                for _ in range(ROUNDS):
                    raw.append(asyncio.run(_raw(base_url, fanout)))
                    ours.append(asyncio.run(_pollux(config, fanout)))
                (raw_wall, raw_cpu), (our_wall, our_cpu) = _median(raw), _median(ours)
                name = f"openai {label}" + (f" {FANOUT}@{CONCURRENCY}" if fanout else "")
                results += [
                    Result(
                        f"{name}: raw SDK wall per call",
                        raw_wall / count * 1e3,
                        "ms",
                        direction="lower",
                    ),
                    Result(
                        f"{name}: pollux wall per call",
                        our_wall / count * 1e3,
                        "ms",
                        direction="lower",
                    ),
                    Result(
                        f"{name}: raw SDK CPU per call",
                        raw_cpu / count * 1e3,
                        "ms",
                        direction="lower",
                    ),
                    Result(
                        f"{name}: pollux CPU per call",
                        our_cpu / count * 1e3,
                        "ms",
                        direction="lower",
                    ),
                    Result(
                        f"{name}: pollux / raw SDK CPU",
                        our_cpu / raw_cpu,
                        "x",
                        target=1.25,
                        direction="lower",
                    ),
                    Result(
                        f"{name}: pollux / raw SDK wall",
                        our_wall / raw_wall,
                        "x",
                        direction="lower",
                    ),
                ]
        finally:
            if previous is None:
                os.environ.pop("OPENAI_BASE_URL", None)
            else:
                os.environ["OPENAI_BASE_URL"] = previous
    return results
