"""Source hashing: streamed, memoized file hashes against the naive whole-file read.

The original implementation hashed ``path.read_bytes()`` on every call. We hash in 1 MiB chunks
and memoize per (path, size, mtime), so peak memory stays flat and repeated hashing is free.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from bench._result import Result
from pollux import Source
from pollux import source as source_module

SIZE = 64 * 1024 * 1024


def _peak_bytes(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _seconds(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def run() -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.bin"
        with path.open("wb") as handle:
            for _ in range(SIZE // (1 << 20)):
                handle.write(os.urandom(1 << 20))
        src = Source.from_file(path)

        def naive() -> str:
            return hashlib.sha256(path.read_bytes()).hexdigest()

        def streamed_cold() -> str:
            source_module._HASH_MEMO.clear()
            return src._content_hash()

        assert naive() == streamed_cold()
        naive_peak = _peak_bytes(naive)
        streamed_peak = _peak_bytes(streamed_cold)
        naive_s = _seconds(naive)
        cold_s = _seconds(streamed_cold)
        src._content_hash()
        warm_s = _seconds(src._content_hash, repeat=50)

    return [
        Result(
            "source hash peak memory, naive / streamed (64 MiB file)",
            naive_peak / max(streamed_peak, 1),
            "x",
            target=10.0,
            note=f"naive {naive_peak / 2**20:.1f} MiB, streamed {streamed_peak / 2**20:.2f} MiB",
        ),
        Result(
            "source hash time, streamed / naive (cold, 64 MiB file)",
            cold_s / naive_s,
            "x",
            target=1.5,
            direction="lower",
            note=f"naive {naive_s * 1000:.1f} ms, streamed {cold_s * 1000:.1f} ms",
        ),
        Result(
            "source re-hash speedup, cold / memoized",
            cold_s / warm_s,
            "x",
            target=100.0,
            note=f"memoized {warm_s * 1e6:.1f} us",
        ),
    ]
