"""Import cost of each package in a fresh interpreter (pollard stays dependency-free, cheap)."""

from __future__ import annotations

import subprocess
import sys

from bench._result import Result


def _import_ms(module: str, repeat: int = 5) -> float:
    code = (
        f"import time; t=time.perf_counter(); import {module}; print((time.perf_counter()-t)*1000)"
    )
    samples = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(repeat)
    ]
    return min(samples)


def run() -> list[Result]:
    return [
        Result("import pollard (fresh interpreter, best of 5)", _import_ms("pollard"), "ms"),
        Result("import pollux (fresh interpreter, best of 5)", _import_ms("pollux"), "ms"),
    ]
