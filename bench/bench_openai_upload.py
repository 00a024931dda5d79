"""Memory of an OpenAI Files API upload: the file is streamed from disk, not read into memory.

A 40 MiB PDF goes through ``prepare_parts`` (the provider's upload path, the official SDK) to the
emulator in its own process. ``tracemalloc`` reports the client's peak Python allocations during
the upload. If the file were read whole, as the original implementation did, the peak would be at
least the file size.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

import openai

from bench._result import Result
from pollux.providers.openai.uploads import delete_files, prepare_parts
from pollux.source import Source
from pollux.testing import Emulator

SIZE_MIB = 40


async def _measure(base_url: str, path: Path) -> tuple[float, float]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
        warm = await prepare_parts(
            client, [Source.from_bytes(b"%PDF-1.4", mime_type="application/pdf")]
        )
        await delete_files(client, list(warm.owned))
        tracemalloc.start()
        start = time.perf_counter()
        try:
            prepared = await prepare_parts(client, [Source.from_file(path)])
            elapsed = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await delete_files(client, list(prepared.owned))
        return peak / 2**20, elapsed


def run() -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.pdf"
        with path.open("wb") as handle:
            handle.write(b"%PDF-1.4\n")
            for _ in range(SIZE_MIB):
                handle.write(os.urandom(1 << 20))
        with Emulator(process=True) as emu:
            peak_mib, seconds = asyncio.run(_measure(emu.base_url("openai"), path))
    return [
        Result(
            f"openai upload {SIZE_MIB} MiB: client peak memory / file size",
            peak_mib / SIZE_MIB,
            "x",
            target=0.05,
            direction="lower",
            note=f"peak {peak_mib:.2f} MiB",
        ),
        Result(
            f"openai upload {SIZE_MIB} MiB: throughput",
            SIZE_MIB / seconds,
            "MiB/s",
            direction="higher",
        ),
    ]
