"""The HTML view of a run: one self-contained file, no remote assets, works from ``file://``.

The page shows the run as a tree with a waterfall timeline beside it (each step a bar from its
recorded start, as long as its recorded duration; overlapping bars are steps that ran at the same
time, and a strip above counts the steps in flight), the cost of each step and of its subtree,
a budget burn-down per limited meter with the refusals marked, the top cost contributors, and
filters by kind, status, label text and cost. Every marker is text (``[REFUSED]``, ``[CACHED]``,
``[RETRY]``, ...) as well as colour, and the list is keyboard-driven (arrow keys, Home/End,
``/`` to search).

The run is embedded once as compact JSON and the page's one inline script draws only the rows on
screen, so a 10,000-step run is about a megabyte and opens at once. A Content-Security-Policy
meta tag allows exactly that script (by its hash) and forbids every remote load, so the file is
safe to open from an e-mail or a CI artifact store. Payloads and results are in the file only
with ``payloads=True``.

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

import base64
import hashlib
import html
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from pollard._core._node import Node
from pollard._core._store import Store
from pollard._edge._manifest import ManifestStore
from pollard._edge._page_assets import CSS, SCRIPT
from pollard._edge._pagedata import page_data, page_json
from pollard._edge._seal import seal
from pollard._edge._view import ViewNode, add_into, build_view, format_decimal

from ._version import __version__
from .errors import IntegrityError

__all__ = ["render_html", "write_html"]

_LEGEND = (
    "Each row is one step: kind, short id, label (a fan-out prompt shows #index, its position "
    "in the prompts), text markers, its own cost and, after \u03a3, its subtree's; the bar on "
    "the right is when it ran and for how long. Markers: [REFUSED] a budget or policy refusal "
    "(\u2715 on its bar), [FAILED]/[CANCELLED] a dispatch that did not return (!), [RETRY] a "
    "repeated call or an attempt above 0 (\u21bb), [CACHED] served from a recording (dashed "
    "bar), [CACHE-READ] part of the prompt read from the provider's cache, [PRUNED], "
    "[REDACTED], [DRY-RUN], [CONFIRMATION:...], [APPROVAL:...] an approval request (pending, "
    "approved, denied, or spent once the approved call ran), [RESULT-CONFLICT]/[MERGE-CONFLICT]. "
    "Keys: "
    "arrows, Page Up/Down, Home/End move; Left goes to the parent; Enter opens the details; "
    "/ searches."
)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _amounts(values: dict[str, Decimal]) -> str:
    return " ".join(f"{key}={format_decimal(value)}" for key, value in values.items())


def _dl(items: Sequence[tuple[str, str]], cls: str) -> str:
    body = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="{cls}">{body}</dl>'


_SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
_CSP = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{_SCRIPT_HASH}'"

_CONTROLS = """<div class="controls" role="search" aria-label="filter the steps">
<label>kind<select id="f-kind"><option value="">any</option></select></label>
<label>status<select id="f-status"><option value="">any</option>
<option value="failed">failed or cancelled</option><option value="refused">refused</option>
<option value="cached">cached (recording or provider)</option>
<option value="redacted">redacted</option>
<option value="retry">retried</option><option value="pruned">pruned</option>
<option value="approval">approval requests</option></select></label>
<label>label or id<input id="f-text" type="search" placeholder="/ to search"></label>
<label>cost from <span id="f-unit"></span>
<input id="f-min" type="number" min="0" step="any"></label>
<label>cost to<input id="f-max" type="number" min="0" step="any"></label>
<span id="count" role="status" aria-live="polite"></span></div>"""


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
    """Render view rows (preorder) as one HTML page."""
    root = rows[0] if rows else None
    label = root.label if root is not None and root.label else root_id[:8]
    spent: dict[str, Decimal] = {}
    avoided: dict[str, Decimal] = {}
    for row in rows:
        add_into(spent, row.charges)
        add_into(avoided, row.avoided)
    refusals = sum(1 for row in rows if row.refusal is not None)
    pruned = sum(1 for row in rows if row.pruned)
    budget = root.budget if root is not None else {}
    summary = [
        ("root", f"<code>{_e(root_id)}</code>"),
        ("nodes", _e(len(rows))),
        ("spent", _e(_amounts(dict(sorted(spent.items()))) or "nothing")),
        ("avoided", _e(_amounts(dict(sorted(avoided.items()))) or "nothing")),
        *([("budget", _e(_amounts(budget)))] if budget else []),
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
    data = page_json(page_data(rows, payloads=payloads))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="pollard {_e(__version__)}">\n'
        f"<title>pollard run {_e(label)}</title>\n"
        f"<style>{CSS}</style></head>\n"
        f"<body><header><h1>pollard run {_e(label)}</h1>\n"
        f"{_dl(summary, 'summary')}\n"
        '<noscript><p class="bad">The steps, the timeline and the charts are drawn by the '
        "page's inline script; allow it to see them (the summary above is complete).</p>"
        "</noscript></header>\n"
        '<nav class="views" aria-label="views"><a href="#run">Steps and timeline</a>'
        '<a href="#cost">Cost and budget</a><a href="#all">Both</a></nav>\n'
        '<main><section id="run" aria-labelledby="steps-title">'
        '<h2 id="steps-title">Steps and timeline</h2>\n'
        f'<details class="help"><summary>How to read the rows</summary>'
        f'<p class="legend" id="steps-hint">{_e(_LEGEND)}</p></details>\n{_CONTROLS}\n'
        '<div class="layout"><div>'
        '<div class="grid-head" aria-hidden="true"><span>step</span><span class="num">cost '
        '(own, \u03a3 subtree)</span><span><svg class="strip" id="strip" role="img" '
        'viewBox="0 0 100 22" preserveAspectRatio="none"></svg><span class="axis" id="axis">'
        "</span></span></div>\n"
        '<div id="steps" role="tree" tabindex="0" aria-label="steps of the run" '
        'aria-describedby="steps-hint"><div id="spacer" role="none"></div></div>'
        '<p class="legend" id="peak"></p></div>\n'
        '<aside id="detail" tabindex="-1" aria-live="polite" aria-label="step details"></aside>'
        "</div></section>\n"
        '<section id="cost" aria-labelledby="cost-title"><h2 id="cost-title">Cost</h2>\n'
        '<div class="cost-grid"><div><h3>Totals</h3><table class="totals" id="totals"></table>'
        '<h3>Top cost contributors</h3><div id="top"></div></div>'
        '<div><h3>Budget burn-down</h3><div id="burn"></div></div></div></section></main>\n'
        f'<script type="application/json" id="pollard-data">{data}</script>\n'
        f"<script>{SCRIPT}</script>\n"
        "</body></html>\n"
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
