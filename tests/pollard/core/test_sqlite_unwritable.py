"""Recording into a SQLite file the process cannot write fails cleanly and leaves no side files.

SQLite opens a write-protected file read-only, and on a WAL database it used to create empty
``-wal`` and ``-shm`` files beside it before the first write failed. Root writes any file, so as
root the scenario runs in a subprocess as ``nobody``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import Runtime

_NOBODY = 65534

_SCRIPT = r"""
import asyncio, json, os, subprocess, sys
from pathlib import Path

from pollard import AsyncRuntime, Runtime, SQLiteStore

path = Path(sys.argv[1])
out = {}


def side_files():
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


async def open_async():
    async with AsyncRuntime(path):
        pass


opens = {
    "store": lambda: SQLiteStore(path).close(),
    "runtime": lambda: Runtime(path).close(),
    "hybrid": lambda: Runtime(path, mode="hybrid").close(),
    "async": lambda: asyncio.run(open_async()),
}
for name, open_ in opens.items():
    try:
        open_()
        out[name] = None
    except Exception as exc:
        out[name] = [type(exc).__name__, str(exc), getattr(exc, "hint", None)]
    out[name + "_side_files"] = side_files()
gc = subprocess.run(
    [sys.executable, "-m", "pollard.cli", "gc", str(path), "compact"],
    capture_output=True, text=True, check=False,
)
out["gc"] = [gc.returncode, gc.stderr]
out["gc_side_files"] = side_files()
with Runtime(path, mode="replay") as rt:
    out["replayed_roots"] = len(rt.store.roots())
with SQLiteStore(path, read_only=True) as store:
    out["read_roots"] = len(store.roots())
runs = subprocess.run(
    [sys.executable, "-m", "pollard.cli", "runs", str(path)],
    capture_output=True, text=True, check=False,
)
out["runs"] = runs.returncode
out["read_side_files"] = side_files()
print(json.dumps(out))
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder ``nobody`` may write into (pytest's tmp_path is private to the test user)."""
    folder = Path(tempfile.mkdtemp(prefix="pollard-unwritable-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_unprivileged(path: Path) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if os.geteuid() == 0:
        kwargs = {"user": _NOBODY, "group": _NOBODY, "extra_groups": []}
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLLARD_")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
            cwd=path.parent,
            **kwargs,
        )
    except PermissionError:  # pragma: no cover - root without CAP_SETUID
        pytest.skip("cannot drop root privileges to test an unwritable file")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_recording_into_a_read_only_file_fails_and_leaves_no_side_files(
    shared_dir: Path,
) -> None:
    path = shared_dir / "runs.db"
    with Runtime(path) as rt:
        rt.run("kept").note({"n": 1})
    path.chmod(0o444)
    out = _run_unprivileged(path)
    if os.geteuid() != 0 and out["store"] is None:  # pragma: no cover - modes not enforced
        pytest.skip("this filesystem lets the test user write a 0444 file")

    assert out["store"][0] == "OperationalError"
    assert "readonly database" in out["store"][1]
    for name in ("runtime", "hybrid", "async"):
        kind, message, hint = out[name]
        assert kind == "PollardError", out[name]
        assert f"cannot open the SQLite store {path}" in message
        assert "readonly database" in message
        assert hint is not None and "writable SQLite file" in hint
    assert out["gc"][0] == 2 and "readonly database" in out["gc"][1], out["gc"]
    for name in ("store", "runtime", "hybrid", "async", "gc"):
        assert out[f"{name}_side_files"] == [], (name, out)
    # Reading the file still works and still leaves nothing beside it.
    assert out["replayed_roots"] == out["read_roots"] == 1
    assert out["runs"] == 0
    assert out["read_side_files"] == []
