"""What the fan-out benches share: the workload, the canned server process and the measurement.

Every fan-out bench (``bench_*_fanout``, ``bench_transport``, ``bench_bridge``, ``bench_cli``)
sends the same prompts over the same 20 KB source to ``bench/_canned_server.py`` in its own
process, and measures each client as wall and client-CPU seconds after a warm-up pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

__all__ = ["SOURCE_TEXT", "Work", "best_of", "canned_server", "measure", "questions"]

SOURCE_TEXT = "".join(f"Context sentence {i:05d} about the benchmark. " for i in range(500))[
    :20_000
]

Work = Callable[[], Awaitable[None]]
_Client = TypeVar("_Client")


def questions(n: int) -> list[str]:
    """``n`` distinct questions about the source's sentences."""
    return [f"Question {i}: what does sentence {i % 500:05d} say?" for i in range(n)]


@contextlib.contextmanager
def canned_server(latency: float, *, stream_chunks: int = 0, path: str = "") -> Iterator[str]:
    """Run ``bench/_canned_server.py`` for the block; yield its base URL (plus ``path``)."""
    script = Path(__file__).with_name("_canned_server.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(latency), str(stream_chunks)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def measure(work: Work, *, warm: bool = True) -> tuple[float, float]:
    """Run ``work`` in a fresh loop after a warm-up pass; return (wall s, client CPU s).

    ``warm=False`` measures the first pass (what a cold start costs).
    """
    result: dict[str, float] = {}

    async def main() -> None:
        if warm:
            await work()  # warm-up: connections, imports, caches
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await work()
        result["wall"] = time.perf_counter() - wall0
        result["cpu"] = time.process_time() - cpu0

    asyncio.run(main())
    return result["wall"], result["cpu"]


def best_of(
    rounds: int,
    clients: Mapping[str, _Client],
    measure_one: Callable[[_Client], tuple[float, float]],
) -> dict[str, tuple[float, float]]:
    """Best (wall, CPU) of ``rounds`` rounds per client, the clients interleaved in each round.

    The machine is shared: interleaving spreads other processes' load over every client alike,
    and the best round is the one least disturbed.
    """
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):
        for name, client in clients.items():
            wall, cpu = measure_one(client)
            old = best.get(name)
            best[name] = (min(wall, old[0]), min(cpu, old[1])) if old else (wall, cpu)
    return best
