"""The bridge page's Python examples run, in order, as one session, and print what it says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "bridge.md"
TEXT = PAGE.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


def test_examples_run_in_order_and_print_what_the_page_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the examples write their SQLite files here
    namespace: dict[str, Any] = {"__name__": "bridge_docs"}
    for block in BLOCKS:
        exec(compile(block, str(PAGE), "exec"), namespace)
    lines = capsys.readouterr().out.splitlines()
    assert len(BLOCKS) == 6
    assert lines == [
        "[False, False, True] 2",
        "True 0 2",
        "['api', 'environment', 'input', 'mock', 'model', 'pollux', 'provider', 'requirements']",
        "{'temperature': 0.2} text",
        "True",
        "true",
        "model_call 1",
        "refused: tokens",
        "ok True True",
    ]
    for line in lines[:4] + lines[-2:]:
        assert line in TEXT  # the page shows the real output
