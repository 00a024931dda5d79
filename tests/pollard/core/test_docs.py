"""The runtime page's Python examples run, in order, as one session."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[3] / "docs" / "pollard" / "runtime.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_examples_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the first example writes runs.db in the working directory
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    for block in BLOCKS:
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert len(BLOCKS) >= 9
    out = capsys.readouterr().out
    assert "ready {'spent'" in out
    assert "'reason': 'budget'" in out and "'remaining': '0'" in out
    assert "differs at $.messages[0]" in out
    assert namespace["report"].digest in out


def test_package_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = PAGE.parents[2] / "packages" / "pollard" / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.S)
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(readme), "exec"), {"__name__": "readme_example"})
    assert blocks and "ready {'spent'" in capsys.readouterr().out
