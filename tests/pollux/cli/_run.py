"""Run the installed ``pollux`` console script in a subprocess, with a clean environment."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from dataclasses import dataclass
from pathlib import Path

#: The console script of pollux-ai[cli], installed next to the interpreter.
POLLUX = Path(sys.executable).with_name("pollux")
POLLARD = Path(sys.executable).with_name("pollard")

# Variables that would change what the command talks to; a test sets the ones it needs.
_CLEARED = (
    "POLLUX_PROVIDER",
    "POLLUX_MODEL",
    "POLLUX_LOCAL_BASE_URL",
    "POLLUX_LOCAL_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
)


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without provider settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(extra)
    return env


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def pollux(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str = "") -> Result:
    """Run ``pollux ARGS`` and capture everything (stdin is not a terminal)."""
    done = subprocess.run(
        [str(POLLUX), *args],
        cwd=cwd,
        env=clean_env() if env is None else env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def pollard(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """Run ``pollard ARGS`` (the same ledger files, read by pollard's own command)."""
    done = subprocess.run(
        [str(POLLARD), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return Result(done.returncode, done.stdout, done.stderr)


def on_a_terminal(tmp_path: Path, *args: str, stdout_too: bool) -> str:
    """Run ``pollux ARGS`` with stderr (and maybe stdout) on a pseudo-terminal; its screen."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen(
        [str(POLLUX), *args],
        cwd=tmp_path,
        env=clean_env(TERM="xterm-256color", COLUMNS="160"),
        stdin=slave,
        stdout=slave if stdout_too else subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert process.wait(timeout=60) == 0
    return b"".join(chunks).decode("utf-8", "replace")
