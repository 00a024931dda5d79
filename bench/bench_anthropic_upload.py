"""Memory of an Anthropic Files API upload: the file is streamed from disk, not read into memory.

A 40 MiB PDF goes through the provider's upload path (``UploadRegistry``, the official SDK's
``beta.files.upload`` with an open file object, over the Session transport's httpx client) to the
emulator in its own process. ``tracemalloc`` reports the client's peak Python allocations during
the upload, hashing included. If the file were read whole, as the original implementation did,
the peak would be at least the file size.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench._result import Result
from pollux.config import Config
from pollux.providers.anthropic import AnthropicProvider
from pollux.source import Source
from pollux.testing import Emulator

SIZE_MIB = 40


async def _measure(path: Path) -> tuple[float, float]:
    provider = AnthropicProvider(
        Config(provider="anthropic", model="claude-haiku-4-5", api_key="k")
    )
    try:
        # Warm up: the SDK's imports and the connection are not part of the upload.
        await provider.prepare_sources(
            [Source.from_bytes(b"%PDF-1.4", mime_type="application/pdf")]
        )
        tracemalloc.start()
        start = time.perf_counter()
        try:
            await provider.prepare_sources([Source.from_file(path)])
            elapsed = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        await provider.aclose()  # deletes both uploads
    return peak / 2**20, elapsed


def run() -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.pdf"
        with path.open("wb") as handle:
            handle.write(b"%PDF-1.4\n")
            for _ in range(SIZE_MIB):
                handle.write(os.urandom(1 << 20))
        with Emulator(process=True) as emu:
            os.environ["ANTHROPIC_BASE_URL"] = emu.base_url("anthropic")
            try:
                peak_mib, seconds = asyncio.run(_measure(path))
                results.append(
                    Result(
                        f"anthropic upload {SIZE_MIB} MiB: peak memory / size",
                        peak_mib / SIZE_MIB,
                        "x",
                        target=0.1,
                        direction="lower",
                        note=f"peak {peak_mib:.2f} MiB, {SIZE_MIB / seconds:.0f} MiB/s",
                    )
                )
            finally:
                del os.environ["ANTHROPIC_BASE_URL"]
    return results
