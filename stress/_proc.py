"""Starting campaign children with the repository on their path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def spawn(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "stress._workers", *args],
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


def fleet(
    code: str, workers: int, prompts: int, env: dict[str, str]
) -> list[subprocess.Popen[str]]:
    """``workers`` processes running ``python -c code <n> <prompts>``, pipes open (see below)."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", code, str(n), str(prompts)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(workers)
    ]


def start_together(procs: Sequence[subprocess.Popen[str]]) -> None:
    """Wait for each child's ready line, then release them all at once (start-up is not timed).

    Every campaign child prints one line once it has opened what it needs, then waits for a
    line on its standard input before it starts.
    """
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.readline()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
