"""Run the pollard CLI in a subprocess, as users do."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def pollard(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Result:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("POLLARD_")}
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "pollard.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=environment,
        timeout=120,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def one_error_line(result: Result, code: int = 2) -> str:
    """Assert an error exit: the code, nothing on stdout, one ``pollard: ...`` line on stderr."""
    assert result.code == code, (result.code, result.out, result.err)
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pollard: "), result.err
    return lines[0]


def tamper(path: Path, sql: str) -> None:
    """Change a SQLite store behind pollard's back."""
    with sqlite3.connect(path) as connection:
        assert connection.execute(sql).rowcount >= 1
    connection.close()
