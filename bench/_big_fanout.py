"""The 10,000-prompt fan-out at ``request_concurrency=256`` (issue 16), one process per client.

Each client (pollux ``run_many`` per provider, and the bare-socket floor) runs in a worker
process of its own, so what is measured is that client alone: its process CPU
(``time.process_time`` of the worker, nothing else), and its resident memory growth over the
fan-out, a peak taken from a fresh high-water mark (``/proc/self/status`` ``VmHWM``, reset through
``/proc/self/clear_refs`` before each run; elsewhere ``ru_maxrss``, which only rises). A worker
imports, builds its client and sends one request (the SDK's imports), then waits; the parent
has the workers warm up in turn with one 256-wide pass each (256 keep-alive connections,
caches), then runs their fan-outs one at a time, rounds interleaved, so no two clients ever
share the machine, and keeps each client's best round.

The canned server (``bench/_canned_server.py``) reports its own CPU and how late its answers
left after their due time over each run (``GET /_bench/stats``): the rows show the floor is the
client's, not the server's. Usage as a worker: ``python -m bench._big_fanout URL CLIENT N C``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import re
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench._fanout import SOURCE_TEXT, questions
from bench._result import Result

__all__ = ["BARE", "BigRun", "big_results", "run_big"]

BARE = "bare socket"


@dataclass(frozen=True)
class BigRun:
    """One client's best 10k round: efficiency, CPU, memory and the server's view of it."""

    efficiency: float
    cpu_per_request_ms: float
    rss_growth_mb: float
    server_cpu_per_request_ms: float
    server_late_p99_ms: float


# -- the worker (one client, in its own process) ------------------------------------------------


def _rss_kb() -> tuple[int, int] | None:
    """(current, peak) resident KB from /proc, or None where there is no /proc."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    now = re.search(r"VmRSS:\s+(\d+)", status)
    peak = re.search(r"VmHWM:\s+(\d+)", status)
    return (int(now.group(1)), int(peak.group(1))) if now and peak else None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _client(url: str, name: str, c: int) -> tuple[Callable[[Sequence[str]], Awaitable[None]], Any]:
    """(fan out these prompts, close) for one client."""
    # The workload and the floor client are bench_transport's (imported here, in the worker).
    from bench.bench_transport import _Bare, bench_config

    if name == BARE:
        bare = _Bare(url)

        async def bare_fan_out(prompts: Sequence[str]) -> None:
            # C workers pulling the next prompt, as run_many schedules: no task per prompt.
            it = iter(prompts)

            async def worker() -> None:
                for prompt in it:
                    await bare.post(prompt)

            await asyncio.gather(*(worker() for _ in range(min(c, len(prompts)))))

        return bare_fan_out, bare.aclose

    import pollux

    config = bench_config(url, name, c)
    env = pollux.Environment(
        sources=[pollux.Source.from_text(SOURCE_TEXT)],
        cache="none" if name == "anthropic" else None,
    )
    session = pollux.Session(config)

    async def fan_out(prompts: Sequence[str]) -> None:
        result = await session.run_many(list(prompts), environment=env)
        assert result.status == "ok", result.errors[:1]

    return fan_out, session.aclose


async def _serve(url: str, name: str, n: int, c: int) -> None:
    fan_out, close = _client(url, name, c)
    prompts = questions(n)
    loop = asyncio.get_running_loop()
    try:
        await fan_out(questions(1))  # imports (the provider SDK's too), one connection
        print("ready", flush=True)
        while (command := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) in (
            "warm",
            "go",
        ):
            if command == "warm":  # c connections, caches
                await fan_out(questions(c))
                print("warm", flush=True)
                continue
            gc.collect()
            before = _rss_kb()
            exact = before is not None and _reset_peak()
            peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await fan_out(prompts)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            after = _rss_kb()
            if exact and before is not None and after is not None:
                growth_kb = after[1] - before[0]
            else:  # ru_maxrss is the process's lifetime peak: growth past the earlier peak
                growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak0
            print(json.dumps({"wall": wall, "cpu": cpu, "rss_kb": growth_kb}), flush=True)
    finally:
        await close()


def _worker_main(argv: list[str]) -> None:
    url, name, n, c = argv[0], argv[1], int(argv[2]), int(argv[3])
    asyncio.run(_serve(url, name, n, c))


# -- the parent ---------------------------------------------------------------------------------


def _server_stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/_bench/stats", timeout=10) as answer:
        stats: dict[str, float] = json.load(answer)
    return stats


def _send(proc: subprocess.Popen[str], command: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(f"{command}\n")
    proc.stdin.flush()


def _expect(name: str, proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != word:
        raise RuntimeError(f"10k worker {name!r} said {line!r}, not {word!r} (see its stderr)")


def run_big(
    url: str,
    clients: Sequence[str],
    *,
    prompts: int,
    concurrency: int,
    latency_s: float,
    rounds: int,
    env: Mapping[str, str],
) -> dict[str, BigRun]:
    """Each client's best of ``rounds`` fan-outs of ``prompts`` prompts against ``url``."""
    root = Path(__file__).resolve().parent.parent
    workers = {
        name: subprocess.Popen(
            [sys.executable, "-m", "bench._big_fanout", url, name, str(prompts), str(concurrency)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
            env={**os.environ, **env},
        )
        for name in clients
    }
    ideal = math.ceil(prompts / concurrency) * latency_s
    runs: dict[str, list[BigRun]] = {name: [] for name in clients}
    try:
        for name, proc in workers.items():
            _expect(name, proc, "ready")
        # One worker at a time opens its 256 connections: all at once could overflow the
        # server's SYN backlog, and a dropped SYN costs a second or more to retry.
        for name, proc in workers.items():
            _send(proc, "warm")
            _expect(name, proc, "warm")
        for _ in range(rounds):
            for name, proc in workers.items():
                assert proc.stdout is not None
                _server_stats(url)  # resets the server's counters
                _send(proc, "go")
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"10k worker {name!r} exited mid-run")
                run = json.loads(line)
                server = _server_stats(url)
                runs[name].append(
                    BigRun(
                        efficiency=ideal / run["wall"],
                        cpu_per_request_ms=run["cpu"] / prompts * 1000,
                        rss_growth_mb=run["rss_kb"] / 1024,
                        server_cpu_per_request_ms=server["cpu_s"]
                        / max(1, server["requests"])
                        * 1000,
                        server_late_p99_ms=server["late_p99_ms"],
                    )
                )
    finally:
        for proc in workers.values():
            if proc.stdin is not None:
                proc.stdin.close()  # the worker's readline sees EOF, closes its client, exits
        for proc in workers.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    # The best round (least disturbed by the shared machine), with the worst growth of any.
    return {
        name: replace(
            max(done, key=lambda r: r.efficiency),
            rss_growth_mb=max(r.rss_growth_mb for r in done),
        )
        for name, done in runs.items()
    }


def big_results(big: Mapping[str, BigRun], *, note: str) -> list[Result]:
    """The bench rows of :func:`run_big`: targets on pollux's rows, the floor's for reference."""
    results: list[Result] = []
    for i, (name, run) in enumerate(big.items()):
        ours = name != BARE
        label = f"pollux {name}" if ours else name
        server = (
            f"server {run.server_cpu_per_request_ms * 1000:.0f} us/request, "
            f"answers late p99 {run.server_late_p99_ms:.1f} ms"
        )
        results += [
            Result(
                f"10k fan-out efficiency: {label}",
                run.efficiency,
                "x",
                0.85 if ours else None,
                note=f"{note}; {server}" if i == 0 else server,
            ),
            Result(f"10k fan-out CPU per request: {label}", run.cpu_per_request_ms, "ms"),
            Result(
                f"10k fan-out RSS growth: {label}",
                run.rss_growth_mb,
                "MB",
                100.0 if ours else None,
                "lower",
            ),
        ]
    return results


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
