"""Plain-text rendering for the CLI: the tree of ``pollard show`` and small tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pollard._edge._view import ViewNode, format_decimal

ASCII = ("|-- ", "`-- ", "|   ", "    ")
UNICODE = ("├── ", "└── ", "│   ", "    ")


def amounts(values: dict[str, Decimal]) -> str:
    """``k=v`` pairs in key order."""
    return " ".join(f"{key}={format_decimal(value)}" for key, value in values.items())


def node_line(row: ViewNode) -> str:
    """``kind id8 label [charges] [MARKERS]`` for one node."""
    parts = [row.kind, row.id[:8]]
    if row.label:
        parts.append(row.label)
    if row.charges:
        parts.append(f"[{amounts(row.charges)}]")
    parts.extend(f"[{mark}]" for mark in row.markers())
    return " ".join(parts)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def render_tree(rows: Sequence[ViewNode], *, unicode: bool = False) -> str:
    """Draw rows (preorder) as a tree.

    In ASCII only forks indent (an only child continues its parent's column, so long chains stay
    readable). ``unicode=True`` draws pollard 0.8's tree: every child on its own branch with box
    characters, indented under its parent.
    """
    tee, end, pipe, blank = UNICODE if unicode else ASCII
    by_id = {row.id: row for row in rows}
    cont: dict[str, str] = {}
    lines: list[str] = []
    for row in rows:
        parent = by_id.get(row.parent) if row.parent is not None else None
        if parent is None:
            prefix = own = ""
        elif len(parent.children) == 1 and not unicode:
            prefix = own = cont[parent.id]
        else:
            last = parent.children[-1] == row.id
            prefix = cont[parent.id] + (end if last else tee)
            own = cont[parent.id] + (blank if last else pipe)
        # The continuation is only needed while children are still to come.
        if row.children:
            cont[row.id] = own
        lines.append(prefix + node_line(row))
        if row.has_content:
            lines.append(f"{own}  payload: {_compact(row.payload)}")
            lines.append(f"{own}  result: {_compact(row.result)}")
    return "\n".join(lines)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A left-aligned text table with a header line."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)).rstrip()]
    out.extend(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows
    )
    return "\n".join(out)
