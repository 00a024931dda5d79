"""The examples in docs/pollux/deferred.md run as written (offline)."""

from __future__ import annotations

import contextlib
import io
import re
import threading
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "pollux" / "deferred.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def _run_script(code: str) -> str:
    # Each example calls asyncio.run(); run it in a thread, away from the test's event loop.
    out = io.StringIO()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, str(DOC), "exec"), {"__name__": "__main__"})
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return out.getvalue()


def test_lifecycle_example_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    printed = _run_script(_blocks()[0])
    lines = printed.splitlines()
    assert lines[0].startswith("saved mockbatch_")
    assert lines[1] == "not ready: queued"
    assert [line.split()[0] for line in lines[2:5]] == [
        "status=queued",
        "status=running",
        "status=completed",
    ]
    assert lines[5] == "ok"
    assert len(lines) == 8 and all("Mock answer" in line for line in lines[6:])
    assert (tmp_path / "outputs" / "deferred-job.json").is_file()


def test_emulator_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The example sets these itself; monkeypatch restores them afterwards.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://unused")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    printed = _run_script(_blocks()[1])
    assert printed.splitlines() == [
        "queued",
        "partial 2 1",
        "partial ['first', '', 'third']",
    ]


def test_index_links_the_page() -> None:
    index: Any = (DOC.parents[1] / "index.md").read_text(encoding="utf-8")
    assert "pollux/deferred.md" in index
