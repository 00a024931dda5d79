"""pollard core: step throughput, flatness over a long chain, replay, verify and storage per step.

Targets come from issue 6; the pollard 0.8 figures they are set against are in the notes (0.8
records 28 steps/s at 100 steps on SQLite with a budget and cannot pass about 990 steps; it stores
about 780 bytes per step, about 1,370 with a repeated 4 KiB string per payload).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._result import Result
from pollard import Budget, MemoryStore, Runtime, SQLiteStore, verify

STEPS = 5_000
WINDOW = 500  # steps per timing window (first vs last)


def _fn(payload: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 12, "output_tokens": 3}}


def _payload(i: int, big: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": "mock-1",
        "messages": [{"role": "user", "content": f"turn {i}"}],
    }
    if big is not None:
        payload["system"] = big
    return payload


def _record(path: Path, big: str | None = None) -> list[float]:
    """Record STEPS model calls in one chain; return the seconds of each WINDOW of steps."""
    windows: list[float] = []
    with Runtime(path) as rt:
        run = rt.run("bench", budget=Budget(tokens=10**12, steps=10**9))
        start = time.perf_counter()
        for i in range(STEPS):
            run.model_call(_payload(i, big), fn=_fn)
            if (i + 1) % WINDOW == 0:
                now = time.perf_counter()
                windows.append(now - start)
                start = now
    return windows


def _size(path: Path) -> int:
    with SQLiteStore(path) as store:  # checkpoint the WAL into the main file
        store.compact()
    return path.stat().st_size + sum(
        p.stat().st_size for p in path.parent.glob(path.name + "-*") if p.exists()
    )


def run() -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        path = base / "record.db"
        windows = _record(path)
        total = sum(windows)
        results.append(
            Result(
                "sqlite record 5,000-step chain with a Budget",
                STEPS / total,
                "steps/s",
                target=2000,
                note="pollard 0.8: 28 steps/s at 100 steps, stalls near 990",
            )
        )
        first, last = min(windows[:2]), min(windows[-2:])
        results.append(
            Result(
                "sqlite last 500 steps vs first 500 (time ratio)",
                last / first,
                "x",
                target=1.5,
                direction="lower",
                note=f"first {WINDOW / first:.0f} steps/s, last {WINDOW / last:.0f} steps/s",
            )
        )
        with Runtime(path, mode="replay") as rt:
            replay = rt.run("bench")
            start = time.perf_counter()
            for i in range(STEPS):
                replay.model_call(_payload(i), fn=_fn)
            elapsed = time.perf_counter() - start
        results.append(
            Result(
                "sqlite replay 5,000 steps (ancestry verified)",
                STEPS / elapsed,
                "steps/s",
                target=5000,
            )
        )
        with SQLiteStore(path, read_only=True) as store:
            start = time.perf_counter()
            report = verify(store)
            elapsed = time.perf_counter() - start
        assert report.ok
        results.append(
            Result("verify the whole store", report.nodes / elapsed, "nodes/s", target=20000)
        )
        results.append(
            Result(
                "storage per step (SQLite)",
                _size(path) / STEPS,
                "bytes",
                target=780,
                direction="lower",
                note="pollard 0.8: about 780",
            )
        )
        big_path = base / "big.db"
        _record(big_path, big="lorem ipsum " * 342)  # a repeated ~4 KiB string per payload
        results.append(
            Result(
                "storage per step with a repeated 4 KiB string",
                _size(big_path) / STEPS,
                "bytes",
                target=1370,
                direction="lower",
                note="pollard 0.8: about 1,370 (interned)",
            )
        )
    best = 0.0
    for _ in range(3):
        with Runtime(MemoryStore()) as rt:
            mem = rt.run("bench", budget=Budget(tokens=10**12, steps=10**9))
            start = time.perf_counter()
            for i in range(STEPS):
                mem.model_call(_payload(i), fn=_fn)
            best = max(best, STEPS / (time.perf_counter() - start))
    results.append(
        Result("memory record 5,000 steps with a Budget (best of 3)", best, "steps/s", target=20000)
    )
    results.append(Result("cpu count", float(os.cpu_count() or 1), "cores", note="machine context"))
    return results
