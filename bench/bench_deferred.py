"""Deferred submission memory, and what prepare_environment saves across run_many calls.

1. ``defer()`` of 2,000 prompts that share a 20 KB text source (about 40 MB of JSONL, since the
   Batch API needs the source inlined in every line) to the emulator in its own process.
   ``tracemalloc`` reports the client's peak Python allocations: the JSONL is written to a
   temporary file and streamed to the Files API, so the peak stays far below the file size (the
   original built the whole JSONL in memory).
2. Five ``run_many`` calls of four prompts over one 4 MiB PDF: with a prepared environment the PDF
   is uploaded once; without, every call uploads it and deletes it again. Wall-clock seconds side
   by side, as a ratio (higher = prepared is faster).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench._result import Result
from pollux import Config, Session, Source
from pollux.testing import Emulator

PROMPTS = 2_000
TEXT_BYTES = 20_000
PDF_MIB = 4
CALLS = 5


async def _defer_peak() -> tuple[float, float, float]:
    config = Config(provider="openai", model="gpt-5-nano", api_key="k")
    text = Source.from_text("lorem ipsum " * (TEXT_BYTES // 12))
    prompts = [f"Question {i}?" for i in range(PROMPTS)]
    async with Session(config) as session:
        await session.defer(["warm up"], sources=[text])
        tracemalloc.start()
        start = time.perf_counter()
        try:
            handle = await session.defer(prompts, sources=[text])
            elapsed = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await session.cancel_deferred(handle)
    jsonl_mib = PROMPTS * TEXT_BYTES / 2**20
    return peak / 2**20, jsonl_mib, elapsed


async def _fanouts(path: Path, *, prepared: bool) -> float:
    config = Config(provider="openai", model="gpt-5-nano", api_key="k")
    prompts = ["Q1?", "Q2?", "Q3?", "Q4?"]
    async with Session(config) as session:
        await session.run_many(["warm up"])
        start = time.perf_counter()
        if prepared:
            env = await session.prepare_environment(sources=[Source.from_file(path)])
            for _ in range(CALLS):
                await session.run_many(prompts, environment=env)
        else:
            for _ in range(CALLS):
                await session.run_many(prompts, sources=[Source.from_file(path)])
        return time.perf_counter() - start


def run() -> list[Result]:
    results: list[Result] = []
    with Emulator(process=True) as emu, tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("OPENAI_BASE_URL")
        os.environ["OPENAI_BASE_URL"] = emu.base_url("openai")
        try:
            peak_mib, jsonl_mib, seconds = asyncio.run(_defer_peak())
            results.append(
                Result(
                    f"defer {PROMPTS} prompts: client peak memory / JSONL size",
                    peak_mib / jsonl_mib,
                    "x",
                    target=0.5,
                    direction="lower",
                    note=f"peak {peak_mib:.1f} MiB for {jsonl_mib:.0f} MiB of JSONL, "
                    f"{PROMPTS / seconds:,.0f} prompts/s submitted",
                )
            )
            path = Path(tmp) / "paper.pdf"
            with path.open("wb") as handle:
                handle.write(b"%PDF-1.4\n")
                handle.write(os.urandom(PDF_MIB << 20))
            plain = asyncio.run(_fanouts(path, prepared=False))
            kept = asyncio.run(_fanouts(path, prepared=True))
            results.append(
                Result(
                    f"{CALLS} run_many over a {PDF_MIB} MiB PDF: per-call uploads / prepared",
                    plain / kept,
                    "x",
                    target=1.0,
                    direction="higher",
                    note=f"{plain * 1000:.0f} ms ({CALLS} uploads) vs {kept * 1000:.0f} ms "
                    "(1 upload)",
                )
            )
        finally:
            if old is None:
                os.environ.pop("OPENAI_BASE_URL", None)
            else:
                os.environ["OPENAI_BASE_URL"] = old
    return results
