"""The static HTML view of a run: one self-contained file, no JavaScript, no remote assets.

The page lists the tree in preorder with indentation, kinds, labels, charges and text markers
(``[REFUSED]``, ``[PRUNED]``, ``[REDACTED]``, ...). Refusals are red and pruned nodes dimmed.
Per-node details (full id, attempt, timestamps, refusal fields, conflicts) sit in ``<details>``
elements, which open without scripts. Payloads and results appear only with ``payloads=True``.

A Content-Security-Policy meta tag forbids every remote load, so the file is safe to open from an
e-mail or a CI artifact store.

Example:
    >>> from pollard import Runtime
    >>> from pollard.html import render_html
    >>> with Runtime().run("demo") as run:
    ...     _ = run.note({"status": "ready"})
    ...     page = render_html(run.store, run.root_id)
    >>> page.startswith("<!DOCTYPE html>")
    True
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from pollard._core._node import Node
from pollard._core._store import Store
from pollard._edge._manifest import ManifestStore
from pollard._edge._seal import seal
from pollard._edge._view import ViewNode, add_into, build_view, format_decimal

from ._version import __version__
from .errors import IntegrityError

__all__ = ["render_html", "write_html"]

# Forks nest (each branch is a bordered list); chains stay flat. Past this many nested forks the
# page stops nesting, because browsers flatten very deep markup anyway.
_NEST_CAP = 64

_CSS = """
:root{color-scheme:light dark;--fg:#1d1f23;--bg:#fff;--mut:#69707d;--line:#d7dbe0;
--bad:#b3261e;--badbg:#fdecea;--acc:#0b57d0;--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
@media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--bg:#15171a;--mut:#9aa1ab;--line:#343840;
--bad:#ff8a80;--badbg:#3a1d1b;--acc:#8ab4f8}}
*{box-sizing:border-box}
body{margin:0;padding:1.5rem;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;
color:var(--fg);background:var(--bg)}
h1{font-size:1.3rem;margin:0 0 .75rem}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0 0 1rem}
dl.summary dt{color:var(--mut)}dl.summary dd{margin:0}
code,.id,.charges,pre{font-family:var(--mono);font-size:.9em}
.legend{color:var(--mut);margin:0 0 1rem}
ol{list-style:none;margin:0;padding:0}
ol.branches{padding-left:1.1rem}
li.branch{border-left:2px solid var(--line);padding-left:.4rem;margin:.15rem 0}
li.branch+li.branch{margin-top:.6rem}
li.node{padding:.15rem .3rem;border-bottom:1px solid var(--line)}
summary{cursor:pointer;display:flex;flex-wrap:wrap;gap:.2rem .6rem;align-items:baseline}
summary::before{content:"\\25B8";color:var(--mut)}details[open]>summary::before{content:"\\25BE"}
summary::-webkit-details-marker{display:none}
.kind{font-weight:600;min-width:6.5rem}
.id{color:var(--acc);text-decoration:none}
.label{font-weight:500}
.charges,.deep{color:var(--mut)}
.bad{color:var(--bad)}
.mark{font-family:var(--mono);font-size:.8em;font-weight:700;padding:0 .3rem;border-radius:3px;
border:1px solid currentColor}
li.refused{background:var(--badbg)}
li.refused .kind,li.refused .label,.mark.refused{color:var(--bad)}
li.pruned summary,li.under-pruned summary{opacity:.55}li.pruned .label{text-decoration:line-through}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;
margin:.3rem 0 .3rem 1.2rem}
.facts dt{color:var(--mut)}.facts dd{margin:0;word-break:break-all}
.content{margin:.2rem 0 .3rem 1.2rem}
.content h4{margin:.3rem 0 0;font-size:.85em;color:var(--mut);font-weight:600}
pre{margin:.3rem 0;padding:.5rem;border:1px solid var(--line);border-radius:4px;overflow:auto;
white-space:pre-wrap;word-break:break-word}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _amounts(values: dict[str, Decimal]) -> str:
    return " ".join(f"{key}={format_decimal(value)}" for key, value in values.items())


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _dl(items: Sequence[tuple[str, str]], cls: str) -> str:
    body = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="{cls}">{body}</dl>'


def _node_html(row: ViewNode) -> str:
    classes = ["node", f"k-{row.kind}"]
    if row.refusal is not None:
        classes.append("refused")
    if row.pruned:
        classes.append("pruned")
    elif row.under_pruned:
        classes.append("under-pruned")
    if row.redacted:
        classes.append("redacted")
    parts = [
        f'<span class="kind">{_e(row.kind)}</span>',
        f'<a class="id" href="#n-{_e(row.id)}">{_e(row.id[:8])}</a>',
    ]
    if row.label:
        parts.append(f'<span class="label">{_e(row.label)}</span>')
    if row.charges:
        parts.append(f'<span class="charges">[{_e(_amounts(row.charges))}]</span>')
    for mark in row.markers():
        parts.append(f'<span class="mark {_e(mark.lower())}">[{_e(mark)}]</span>')
    if row.indent > _NEST_CAP:
        parts.append(f'<span class="deep">fork depth {row.indent}</span>')
    facts: list[tuple[str, str]] = [
        ("id", f"<code>{_e(row.id)}</code>"),
        (
            "parent",
            f'<a class="id" href="#n-{_e(row.parent)}">{_e(row.parent[:8])}</a>'
            if row.parent
            else "none",
        ),
        ("attempt", _e(row.attempt)),
        ("depth", _e(row.depth)),
    ]
    if row.created_at:
        facts.append(("created at", _e(row.created_at)))
    if row.duration_s is not None:
        facts.append(("duration", f"{row.duration_s:.6f} s"))
    if row.charges:
        facts.append(("charges", _e(_amounts(row.charges))))
    if row.avoided:
        facts.append(("avoided", _e(_amounts(row.avoided))))
    for key, value in (row.refusal or {}).items():
        facts.append((f"refusal {key}", _e(value)))
    if row.result_conflicts:
        facts.append(("result conflicts", _e(row.result_conflicts)))
    if row.merge_conflicts:
        facts.append(("merge conflicts", _e(row.merge_conflicts)))
    facts.append(("children", _e(len(row.children))))
    content = ""
    if row.has_content:
        content = (
            f'<div class="content"><h4>payload</h4><pre>{_e(_pretty(row.payload))}</pre>'
            f"<h4>result</h4><pre>{_e(_pretty(row.result))}</pre></div>"
        )
    return (
        f'<li class="{" ".join(classes)}" id="n-{_e(row.id)}"><details>'
        f"<summary>{' '.join(parts)}</summary>{_dl(facts, 'facts')}{content}</details></li>"
    )


def _tree_html(rows: Sequence[ViewNode]) -> str:
    """Nest the rows: a chain stays in one list, every fork opens one bordered list per branch."""
    if not rows:
        return ""
    by_id = {row.id: row for row in rows}
    out: list[str] = []
    # Work items: a row to draw, or literal markup to emit (pushed in reverse order).
    stack: list[ViewNode | str] = [rows[0]]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        out.append(_node_html(item))
        kids = [by_id[kid] for kid in item.children if kid in by_id]
        if len(kids) == 1 or (kids and item.indent >= _NEST_CAP):
            stack.extend(reversed(kids))
        elif kids:
            stack.append("</ol></li>")
            for kid in reversed(kids):
                stack.extend(("</ol></li>", kid, '<li class="branch"><ol class="chain">'))
            stack.append('<li class="fork"><ol class="branches">')
    return "\n".join(out)


def seal_summary(nodes: Sequence[Node], root_id: str) -> str:
    """The page's seal line: the subtree's seal digest, or why it does not verify."""
    try:
        digest = seal(ManifestStore(nodes), root_id).digest
    except IntegrityError as exc:
        return f'<strong class="bad">does not verify: {_e(exc)}</strong>'
    return f"<code>{_e(digest)}</code>"


def render_rows(
    rows: Sequence[ViewNode], *, root_id: str, payloads: bool, seal_html: str | None = None
) -> str:
    """Render view rows (preorder) as one static HTML page."""
    root = rows[0] if rows else None
    label = root.label if root is not None and root.label else root_id[:8]
    spent: dict[str, Decimal] = {}
    avoided: dict[str, Decimal] = {}
    for row in rows:
        add_into(spent, row.charges)
        add_into(avoided, row.avoided)
    refusals = sum(1 for row in rows if row.refusal is not None)
    pruned = sum(1 for row in rows if row.pruned)
    summary = [
        ("root", f"<code>{_e(root_id)}</code>"),
        ("nodes", _e(len(rows))),
        ("spent", _e(_amounts(dict(sorted(spent.items()))) or "nothing")),
        ("avoided", _e(_amounts(dict(sorted(avoided.items()))) or "nothing")),
        ("refusals", _e(refusals)),
        ("pruned", _e(pruned)),
        *([("seal", seal_html)] if seal_html is not None else []),
        (
            "content",
            "payloads and results included"
            if payloads
            else "hidden (content-free view; pass --payloads to include it)",
        ),
    ]
    legend = (
        "Each line is one step: kind, short id, label, charges and markers; open a line for "
        "its details (and its payload and result when they are included). Forks open one "
        "bordered list per branch. Markers: [REFUSED] a refusal node (red), [PRUNED] a pruned "
        "tip (dimmed with its descendants), [REDACTED] a payload with redacted values, "
        "[DRY-RUN] not executed, [CONFIRMATION:...] a confirmation request and its status, "
        "[RESULT-CONFLICT] / [MERGE-CONFLICT] conflicting copies kept in metadata."
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="pollard {_e(__version__)}">\n'
        f"<title>pollard run {_e(label)}</title>\n"
        f"<style>{_CSS}</style></head>\n"
        f"<body><header><h1>pollard run {_e(label)}</h1>\n"
        f"{_dl(summary, 'summary')}\n"
        f'<p class="legend">{_e(legend)}</p></header>\n'
        f'<main><ol class="tree chain">\n{_tree_html(rows)}\n</ol></main></body></html>\n'
    )


def render_html(store: Store, root_id: str, *, payloads: bool = False) -> str:
    """Render the subtree under ``root_id`` as one static HTML page.

    Args:
        store: The store holding the run.
        root_id: The node at the top of the page (a run root or any node).
        payloads: Include payloads and results; the default page is content-free.

    Returns:
        The page text (UTF-8 when written). Its summary carries the subtree's seal digest (the
        same as ``pollard seal``), or says that the subtree does not verify.

    Raises:
        KeyError: ``root_id`` is not in the store.
    """
    nodes = list(store.walk(root_id))
    rows = build_view(nodes, payloads=payloads)
    return render_rows(
        rows, root_id=root_id, payloads=payloads, seal_html=seal_summary(nodes, root_id)
    )


def write_html(store: Store, root_id: str, path: str | Path, *, payloads: bool = False) -> int:
    """Write :func:`render_html` output to ``path`` and return the number of bytes written."""
    data = render_html(store, root_id, payloads=payloads).encode("utf-8")
    Path(path).write_bytes(data)
    return len(data)
