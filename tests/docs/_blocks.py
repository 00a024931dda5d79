"""Parse a site page into its code blocks, with the markers that say how the runner treats them.

Conventions (written for authors in docs/contributing/docs.md):

- every ```` ```python ```` block runs, in page order, in one namespace per page, in a fresh
  working directory;
- ``<!-- docs: skip REASON -->`` on the line before a block opts it out (for example an example
  that needs a real provider key); the reason is required;
- ``<!-- docs: requires MODULE -->`` before a block runs it only when ``MODULE`` imports (for
  providers merged from other branches); otherwise the page's test skips with that reason;
- a ```` ```text ```` block right after a Python block (only blank lines between) is the output
  that block prints, and the runner compares it line by line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Block", "page_blocks"]

_FENCE = re.compile(
    r"(?:^<!-- docs: (?P<marker>skip|requires) (?P<argument>[^\n]+?) -->\n)?"
    r"^```python\n(?P<code>.*?)^```\n"
    r"(?:\s*?^```text\n(?P<output>.*?)^```\n)?",
    re.M | re.S,
)


@dataclass(frozen=True)
class Block:
    """One Python block: its code, its line, how to treat it, and the output it shows."""

    code: str
    line: int
    skip: str | None
    requires: str | None
    output: str | None


def page_blocks(path: Path) -> list[Block]:
    """Every Python block of the page at ``path``, in order."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in _FENCE.finditer(text):
        marker, argument = match.group("marker"), match.group("argument")
        code_start = match.start("code")
        blocks.append(
            Block(
                code=match.group("code"),
                line=text.count("\n", 0, code_start) + 1,
                skip=argument if marker == "skip" else None,
                requires=argument if marker == "requires" else None,
                output=match.group("output"),
            )
        )
    total = len(re.findall(r"^```python\n", text, re.M))
    if total != len(blocks):  # a block the pattern missed would silently not run
        raise AssertionError(f"{path}: {total} python fences but {len(blocks)} parsed blocks")
    return blocks
