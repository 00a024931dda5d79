"""The pollux bridge: what governing a fan-out costs, side by side with plain ``pollux.run_many``.

The workload of ``bench_pollux_fanout``: 300 prompts over one shared 20 KB text source,
``provider="local"``, ``request_concurrency=32``, against the canned Chat Completions server in its
own process answering after 50 ms. Measured, each after a warm-up pass:

1. Fan-out efficiency (ideal ``ceil(300 / 32) * 50 ms`` / actual wall time) of plain
   ``pollux.run_many`` and of ``governed_run_many`` recording into a ``MemoryStore`` and into a
   SQLite file, under ``Budget(steps=...)``; the governed/plain wall-time ratio (target <= 1.25
   for SQLite: governing a fan-out must not serialize it).
2. Client CPU per prompt, governed (SQLite) / plain.
3. Replay of the recorded fan-out from SQLite: prompts served per second, and the wall time as
   a ratio to the live plain fan-out (no provider call is made).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench._fanout import SOURCE_TEXT, canned_server, measure, questions
from bench._result import Result
from bench.bench_pollux_fanout import CONCURRENCY, LATENCY_S, MODEL, N_PROMPTS

IDEAL_S = math.ceil(N_PROMPTS / CONCURRENCY) * LATENCY_S


def run() -> list[Result]:
    import pollux
    from pollard import AsyncRuntime, Budget
    from pollard.adapters.pollux import governed_run_many

    prompts = questions(N_PROMPTS)
    source = pollux.Source.from_text(SOURCE_TEXT)
    budget = Budget(steps=10 * N_PROMPTS)
    results: list[Result] = []
    with canned_server(LATENCY_S, path="/v1") as base_url, tempfile.TemporaryDirectory() as tmp:
        config = pollux.Config(
            provider="local",
            model=MODEL,
            base_url=base_url,
            request_concurrency=CONCURRENCY,
            retry=pollux.RetryPolicy(max_attempts=1),
        )

        async def plain() -> None:
            answers = await pollux.run_many(prompts, sources=[source], config=config)
            assert answers.status == "ok", answers.errors

        def governed(store: str | None, label: str) -> Callable[[], Awaitable[None]]:
            async def work() -> None:
                async with AsyncRuntime(store) as rt:
                    run = rt.run(label, budget=budget)
                    answers = await governed_run_many(run, prompts, sources=[source], config=config)
                    assert answers.status == "ok", answers.errors

            return work

        db = str(Path(tmp) / "bridge.db")
        plain_wall, plain_cpu = measure(plain)
        memory_wall, _ = measure(governed(None, "memory"))
        sqlite_wall, sqlite_cpu = measure(governed(db, "sqlite"))

        async def replay() -> None:
            async with AsyncRuntime(db, mode="replay") as rt:
                run = rt.run("sqlite", budget=budget)
                answers = await governed_run_many(run, prompts, sources=[source], config=config)
                assert answers.status == "ok" and run.report()["spent"] == {}

        replay_wall, _ = measure(replay, warm=False)

    note = f"{N_PROMPTS} prompts, C={CONCURRENCY}, {LATENCY_S * 1000:.0f} ms server"
    results += [
        Result("fan-out efficiency, plain pollux.run_many", IDEAL_S / plain_wall, "x", note=note),
        Result("fan-out efficiency, governed (MemoryStore)", IDEAL_S / memory_wall, "x"),
        Result("fan-out efficiency, governed (SQLite)", IDEAL_S / sqlite_wall, "x"),
        Result(
            "wall time governed (MemoryStore) / plain",
            memory_wall / plain_wall,
            "ratio",
            target=1.25,
            direction="lower",
        ),
        Result(
            "wall time governed (SQLite) / plain",
            sqlite_wall / plain_wall,
            "ratio",
            note="adds SQLite's per-step writes (bench_pollard_core)",
        ),
        Result(
            "client CPU per prompt governed (SQLite) / plain",
            sqlite_cpu / plain_cpu,
            "ratio",
            note=f"plain {plain_cpu / N_PROMPTS * 1000:.2f} ms, "
            f"governed {sqlite_cpu / N_PROMPTS * 1000:.2f} ms",
        ),
        Result("replay from SQLite", N_PROMPTS / replay_wall, "prompts/s", note="no provider"),
        Result("replay wall time / live plain fan-out", replay_wall / plain_wall, "ratio"),
    ]
    return results
