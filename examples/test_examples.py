"""Every example runs, offline, as part of the suite, so the examples cannot rot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted(
    p for p in Path(__file__).parent.glob("*.py") if not p.name.startswith(("test_", "_"))
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_offline(path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    result = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=path.parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "an example should say what it did"
