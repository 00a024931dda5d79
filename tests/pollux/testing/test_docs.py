"""The examples in docs/pollux/emulator.md run as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "pollux" / "emulator.md"
BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    if not block.startswith("# conftest.py")
]


def test_the_page_has_examples() -> None:
    # The runner below is parametrized over BLOCKS, so a changed fence would otherwise run nothing.
    assert len(BLOCKS) >= 8
    assert sum("anthropic" in block for block in BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_doc_example_runs(block: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(block, str(DOC), "exec"), {"__name__": "__doc_example__"})
