"""Memory of a Gemini Files API upload: streamed from disk in chunks, never read whole.

A 40 MiB PDF goes through the provider's upload path (``UploadRegistry``: the SDK's resumable
upload on a worker thread) to the emulator in its own process. ``tracemalloc`` (which sees every
thread) reports the client's peak Python allocations. google-genai sends 8 MiB chunks, so the
floor is about one chunk; a whole-file read would peak at the file size or more.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench._result import Result

SIZE_MIB = 40


async def _measure(path: Path) -> tuple[float, float]:
    from pollux import Config
    from pollux.providers.gemini.client import build_client
    from pollux.providers.gemini.uploads import UploadRegistry
    from pollux.source import Source

    client = build_client(Config(provider="gemini", model="gemini-2.5-flash", api_key="k"))
    registry = UploadRegistry(lambda: client)
    try:
        await registry.parts(
            [Source.from_bytes(b"%PDF-1.4" * 200_000, mime_type="application/pdf")]
        )
        tracemalloc.start()
        start = time.perf_counter()
        try:
            await registry.parts([Source.from_file(path)])
            elapsed = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await registry.delete_all()
    finally:
        await client.aio.aclose()
    return peak / 2**20, elapsed


def run() -> list[Result]:
    from pollux.testing import Emulator

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.pdf"
        with path.open("wb") as handle:
            handle.write(b"%PDF-1.4\n")
            for _ in range(SIZE_MIB):
                handle.write(os.urandom(1 << 20))
        previous = os.environ.get("GOOGLE_GEMINI_BASE_URL")
        with Emulator(process=True) as emu:
            os.environ["GOOGLE_GEMINI_BASE_URL"] = emu.base_url("gemini")
            try:
                peak_mib, seconds = asyncio.run(_measure(path))
            finally:
                if previous is None:
                    os.environ.pop("GOOGLE_GEMINI_BASE_URL", None)
                else:
                    os.environ["GOOGLE_GEMINI_BASE_URL"] = previous
    return [
        Result(
            f"gemini upload {SIZE_MIB} MiB: client peak memory / file size",
            peak_mib / SIZE_MIB,
            "x",
            target=0.5,
            direction="lower",
            note=f"peak {peak_mib:.2f} MiB (the SDK sends 8 MiB chunks)",
        ),
        Result(f"gemini upload {SIZE_MIB} MiB: throughput", SIZE_MIB / seconds, "MiB/s"),
    ]
