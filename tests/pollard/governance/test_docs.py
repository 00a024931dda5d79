"""The governance page's Python examples run, in order, as one session (async MCP one excepted)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[3] / "docs" / "pollard" / "governance.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 5


def test_examples_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the examples write runs.db in the working directory
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    ran = 0
    for block in BLOCKS:
        if "await " in block:
            continue  # needs a live MCP session; tests/pollard/governance/test_mcp.py covers it
        exec(compile(block, str(PAGE), "exec"), namespace)
        ran += 1
    assert ran >= 5
    assert namespace["node"].result == {"refunded": "INV-7"}
    out = capsys.readouterr().out
    assert "{'invoice': 'INV-7', 'status': 'paid'}" in out
    assert "{'refunded': 'INV-7'}" in out
