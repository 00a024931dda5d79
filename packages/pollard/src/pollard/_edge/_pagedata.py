"""The compact data of the HTML run view: columns of numbers, a string table, sparse details.

One row per step in preorder. Columns are plain JSON arrays (ids concatenated into one string),
so a 10,000-step run stays near a megabyte and the page parses it in milliseconds; the browser
draws only the rows on screen. Subtree roll-ups are computed by the page (one backward pass).
The budget burn-down and the concurrency strip are computed here and down-sampled, so their
size does not grow with the run.

Nothing here reads a payload unless ``payloads`` was asked for when the rows were built: the
rows carry content only then (`ViewNode.has_content`).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pollard._core._amounts import plain
from pollard._edge._view import ViewNode, format_decimal, parse_timestamp

__all__ = ["FLAGS", "page_data", "page_json", "top_contributors"]

# Bit flags of a row (the page shows each as a text marker too, never by colour alone).
FLAGS = {
    "refused": 1,
    "pruned": 2,
    "redacted": 4,
    "dry_run": 8,
    "failed": 16,
    "cached": 32,
    "retry": 64,
    "under_pruned": 128,
    "result_conflict": 256,
    "merge_conflict": 512,
    "confirmation": 1024,
    "cancelled": 2048,
    "cache_read": 4096,
    "approval": 8192,
}
_SERIES_POINTS = 240  # burn-down points per meter, whatever the run's size
_STRIP_BUCKETS = 200  # concurrency strip buckets
_USAGE = ("input", "output", "cache_read", "cache_write")


def _flags(row: ViewNode, label: str) -> int:
    """The row's flag bits; ``label`` is its label without the ``#index`` prefix."""
    bits = 0
    if row.refusal is not None:
        bits |= FLAGS["refused"]
    if row.pruned:
        bits |= FLAGS["pruned"]
    if row.under_pruned:
        bits |= FLAGS["under_pruned"]
    if row.redacted:
        bits |= FLAGS["redacted"]
    if row.dry_run:
        bits |= FLAGS["dry_run"]
    if row.kind == "note" and label.startswith("call_failed"):
        bits |= FLAGS["failed"]
    if row.kind == "note" and label.startswith("call_cancelled"):
        bits |= FLAGS["cancelled"]
    if row.avoided:  # served from a recording: the call was not made again
        bits |= FLAGS["cached"]
    if row.usage.get("cache_read"):  # the provider served part of the prompt from its cache
        bits |= FLAGS["cache_read"]
    # A call asked again (a refusal's attempt only counts refusals of the same request).
    if (row.attempt > 0 and row.kind in {"model_call", "tool_call"}) or (
        row.kind == "note" and label.startswith("call_repeated")
    ):
        bits |= FLAGS["retry"]
    if row.result_conflicts:
        bits |= FLAGS["result_conflict"]
    if row.merge_conflicts:
        bits |= FLAGS["merge_conflict"]
    if row.confirmation:
        bits |= FLAGS["confirmation"]
    if row.approval:
        bits |= FLAGS["approval"]
    return bits


def _number(value: Decimal) -> int | float:
    return plain(value)


def _base_label(row: ViewNode) -> str:
    """The label without the ``#index`` prefix (the page adds it back from its own column)."""
    if row.fanout_index is None:
        return row.label
    prefix = f"#{row.fanout_index}"
    label = row.label
    if label.startswith(prefix):
        label = label[len(prefix) :].lstrip(" ")
    return label


def _times(rows: Sequence[ViewNode]) -> tuple[float | None, list[float | None]]:
    """Each row's start in epoch seconds (None when not recorded) and the earliest start."""
    starts: list[float | None] = []
    for row in rows:
        parsed = parse_timestamp(row.created_at)
        starts.append(parsed.timestamp() if parsed is not None else None)
    known = [s for s in starts if s is not None]
    return (min(known) if known else None), starts


def _sample(points: list[tuple[float, float]], size: int) -> list[list[float]]:
    """At most ``size`` points of a step line, always keeping the first and the last."""
    if len(points) <= size:
        return [[round(t, 1), v] for t, v in points]
    step = (len(points) - 1) / (size - 1)
    picked = [points[round(n * step)] for n in range(size)]
    return [[round(t, 1), v] for t, v in picked]


def _burn_down(
    rows: Sequence[ViewNode], starts: Sequence[float | None], t0: float
) -> list[dict[str, Any]]:
    """Per charged meter: spent over time (ms since the first start), its limits, refusals."""
    limits: dict[str, set[Decimal]] = {}
    for row in rows:
        for meter, limit in row.budget.items():
            limits.setdefault(meter, set()).add(limit)
    events: dict[str, list[tuple[float, Decimal]]] = {}
    for row, start in zip(rows, starts, strict=True):
        if start is None or not row.charges:
            continue
        end = (start - t0) * 1000 + (row.duration_s or 0) * 1000
        for meter, amount in row.charges.items():
            events.setdefault(meter, []).append((end, amount))
    out: list[dict[str, Any]] = []
    # Meters with a limit first (they are what a burn-down is for), then usd and tokens.
    wanted = sorted(limits, key=lambda m: (m != "usd", m))
    wanted += [m for m in ("usd", "tokens") if m in events and m not in limits]
    for meter in wanted:
        if meter == "depth":
            continue
        spent: list[tuple[float, float]] = [(0.0, 0.0)]
        times: list[float] = [0.0]
        total = Decimal(0)
        for when, amount in sorted(events.get(meter, []), key=lambda e: e[0]):
            total += amount
            spent.append((when, float(total)))
            times.append(when)
        refusals: list[list[Any]] = []
        for row, start in zip(rows, starts, strict=True):
            if row.refusal is None or start is None:
                continue
            if (row.refusal.get("meter") or "") != meter:
                continue
            when = (start - t0) * 1000
            at = bisect.bisect_right(times, when) - 1
            refusals.append([round(when, 1), spent[max(at, 0)][1]])
        out.append(
            {
                "meter": meter,
                "total": format_decimal(total),
                "limits": sorted(_number(v) for v in limits.get(meter, ())),
                "points": _sample(spent, _SERIES_POINTS),
                "refusals": refusals[:_SERIES_POINTS],
                "refusal_count": len(refusals),
            }
        )
    return out[:4]


def _concurrency(
    rows: Sequence[ViewNode], starts: Sequence[float | None], t0: float, span: float
) -> tuple[list[int], int]:
    """Steps in flight at the middle of each time bucket, and the most at any moment."""
    edges: list[tuple[float, int]] = []
    for row, start in zip(rows, starts, strict=True):
        if start is None or row.duration_s is None or row.duration_s <= 0:
            continue
        begin = (start - t0) * 1000
        edges.append((begin, 1))
        edges.append((begin + row.duration_s * 1000, -1))
    if not edges or span <= 0:
        return [], 0
    # Ends sort before starts at the same instant: back-to-back steps do not overlap.
    edges.sort()
    level = peak = 0
    for _when, delta in edges:
        level += delta
        peak = max(peak, level)
    begins = sorted(e[0] for e in edges if e[1] > 0)
    ends = sorted(e[0] for e in edges if e[1] < 0)
    buckets = []
    for slot in range(_STRIP_BUCKETS):
        middle = (slot + 0.5) * span / _STRIP_BUCKETS
        buckets.append(bisect.bisect_right(begins, middle) - bisect.bisect_right(ends, middle))
    return buckets, peak


def _primary(meters: Sequence[str]) -> str | None:
    for name in ("usd", "tokens"):
        if name in meters:
            return name
    return meters[0] if meters else None


def top_contributors(rows: Sequence[ViewNode], count: int = 10) -> list[int]:
    """The row numbers of the steps charged most on the primary meter (usd, else tokens)."""
    meters = sorted({m for row in rows for m in row.charges if m != "steps"})
    meter = _primary(meters)
    if meter is None:
        return []
    ranked = sorted(
        (n for n, row in enumerate(rows) if row.charges.get(meter)),
        key=lambda n: (-rows[n].charges[meter], n),
    )
    return ranked[:count]


def page_data(rows: Sequence[ViewNode], *, payloads: bool) -> dict[str, Any]:
    """The page's embedded data for ``rows`` (preorder)."""
    position = {row.id: n for n, row in enumerate(rows)}
    t0, starts = _times(rows)
    kinds: list[str] = []
    kind_at: dict[str, int] = {}
    strings: list[str] = []
    string_at: dict[str, int] = {}
    meters = sorted({m for row in rows for m in row.charges})
    charges: dict[str, list[int | float]] = {m: [] for m in meters}
    usage: dict[str, list[int]] = {u: [] for u in _USAGE}
    parent: list[int] = []
    kind: list[int] = []
    label: list[int] = []
    indent: list[int] = []
    start: list[int] = []
    duration: list[int] = []
    flags: list[int] = []
    attempt: list[int] = []
    fanout: list[int] = []
    details: dict[str, dict[str, Any]] = {}
    content: dict[str, list[str]] = {}
    span = 0.0
    for n, (row, begin) in enumerate(zip(rows, starts, strict=True)):
        parent.append(position.get(row.parent, -1) if row.parent is not None else -1)
        if row.kind not in kind_at:
            kind_at[row.kind] = len(kinds)
            kinds.append(row.kind)
        kind.append(kind_at[row.kind])
        text = _base_label(row)  # pollard's dispatch notes: "call_failed model_call", ...
        if text not in string_at:
            string_at[text] = len(strings)
            strings.append(text)
        label.append(string_at[text])
        indent.append(row.indent)
        if begin is not None and t0 is not None:
            offset = round((begin - t0) * 1000)
            start.append(offset)
            length = round((row.duration_s or 0) * 1000, 1)
            duration.append(int(length) if length == int(length) else length)  # type: ignore[arg-type]
            span = max(span, offset + (row.duration_s or 0) * 1000)
        else:
            start.append(-1)
            duration.append(0)
        flags.append(_flags(row, text))
        attempt.append(row.attempt)
        fanout.append(row.fanout_index if row.fanout_index is not None else -1)
        for meter in meters:
            amount = row.charges.get(meter)
            charges[meter].append(_number(amount) if amount is not None else 0)
        for name in _USAGE:
            usage[name].append(row.usage.get(name, 0))
        extra: dict[str, Any] = {}
        if row.avoided:
            extra["avoided"] = {k: format_decimal(v) for k, v in row.avoided.items()}
        if row.refusal:
            extra["refusal"] = row.refusal
        if row.confirmation:
            extra["confirmation"] = row.confirmation
        if row.approval:
            extra["approval"] = row.approval
        if row.error_type:
            extra["error"] = row.error_type
        if row.result_conflicts:
            extra["result_conflicts"] = row.result_conflicts
        if row.merge_conflicts:
            extra["merge_conflicts"] = row.merge_conflicts
        if row.created_at:
            extra["created_at"] = row.created_at
        if row.duration_s is not None:
            extra["duration_s"] = row.duration_s
        if row.indent > 64:
            extra["fork_depth"] = row.indent
        if row.actor:  # the team agent whose work this is (its anchor carries the identity)
            extra["actor"] = row.actor
        if row.agent:
            extra["agent"] = row.agent
        if extra and (len(extra) > 2 or "created_at" not in extra):
            details[str(n)] = extra
        if payloads and row.has_content:
            content[str(n)] = [_pretty(row.payload), _pretty(row.result)]
    strip, peak = _concurrency(rows, starts, t0 or 0.0, span)
    data: dict[str, Any] = {
        "v": 1,
        "n": len(rows),
        # Fixed-width ids (a node id is 64 hex digits; anything else is padded to keep the slots).
        "ids": "".join(row.id if len(row.id) == 64 else row.id[:64].ljust(64, "?") for row in rows),
        "t0": round(t0 * 1000) if t0 is not None else None,
        "span": round(span, 1),
        "kinds": kinds,
        "strings": strings,
        "parent": parent,
        "kind": kind,
        "label": label,
        "indent": indent,
        "start": start,
        "duration": duration,
        "flags": flags,
        "attempt": attempt,
        "fanout": fanout,
        "meters": meters,
        "charges": charges,
        "usage": usage,
        "details": details,
        "burn": _burn_down(rows, starts, t0) if t0 is not None else [],
        "strip": strip,
        "peak": peak,
        "top": top_contributors(rows),
        "primary": _primary([m for m in meters if m != "steps"]),
        "payloads": payloads,
    }
    if payloads:
        data["content"] = content
    return data


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def page_json(data: dict[str, Any]) -> str:
    """The data as JSON safe inside a ``<script type="application/json">`` element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # "<" never appears raw, so neither "</script>" nor "<!--" can end or bend the element.
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
