"""A content-free view of a stored tree, shared by the CLI, the HTML page and OpenTelemetry.

``build_view`` turns node records (in preorder, parents before children) into ``ViewNode``
rows: kind, a short label, charges, and the refusal/pruned/redacted/dry-run markers. Payloads and
results are copied only when asked for; everything else is metadata, never content.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from pollard._core._amounts import plain, read_charges
from pollard._core._usage import usable_count
from pollard._step._settle import DISPATCH_EVENTS
from pollard.redaction import contains_redaction, is_redacted

__all__ = [
    "LABEL_MAX",
    "PREVIEW_MAX",
    "NodeLike",
    "ViewNode",
    "add_into",
    "build_view",
    "decimal_map",
    "decimal_map_exact",
    "decimal_map_json",
    "format_decimal",
    "kind_name",
    "node_label",
    "parse_timestamp",
    "printable",
    "prompt_preview",
    "to_decimal",
    "view_node",
]

LABEL_MAX = 60
PREVIEW_MAX = 40
_NOTE_LABEL_KEYS = ("label", "checkpoint", "status")
_REFUSAL_KEYS = (
    "reason",
    "rule",
    "meter",
    "tool",
    "version",
    "requested",
    "remaining",
    "estimated",
    "window_seconds",
    "blocked_kind",
    "detail",
    "actor",
)


class NodeLike(Protocol):
    """What the view needs from a node (``pollard.Node`` satisfies it)."""

    @property
    def id(self) -> str: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def kind(self) -> Any: ...
    @property
    def attempt(self) -> int: ...
    @property
    def payload(self) -> Any: ...
    @property
    def result(self) -> Any: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...


@dataclass
class ViewNode:
    """One row of the view: everything the CLI and the HTML page show for a node."""

    id: str
    parent: str | None
    kind: str
    attempt: int
    depth: int
    label: str
    charges: dict[str, Decimal]
    avoided: dict[str, Decimal]
    refusal: dict[str, str] | None
    pruned: bool
    redacted: bool
    dry_run: bool
    created_at: str | None
    duration_s: float | None
    result_conflicts: int
    merge_conflicts: int
    confirmation: str | None = None
    approval: str | None = None
    children: list[str] = field(default_factory=list)
    payload: Any = None
    result: Any = None
    has_content: bool = False
    indent: int = 0
    under_pruned: bool = False
    fanout_index: int | None = None
    usage: dict[str, int] = field(default_factory=dict)
    budget: dict[str, Decimal] = field(default_factory=dict)
    error_type: str | None = None
    agent: dict[str, str] | None = None
    actor: str | None = None

    def markers(self) -> list[str]:
        """The bracketed markers of the text tree, in a fixed order."""
        out = []
        if self.refusal is not None:
            out.append("REFUSED")
        if self.pruned:
            out.append("PRUNED")
        if self.redacted:
            out.append("REDACTED")
        if self.dry_run:
            out.append("DRY-RUN")
        if self.confirmation:
            out.append(f"CONFIRMATION:{self.confirmation.upper()}")
        if self.approval:
            out.append(f"APPROVAL:{self.approval.upper()}")
        if self.result_conflicts:
            out.append("RESULT-CONFLICT")
        if self.merge_conflicts:
            out.append("MERGE-CONFLICT")
        return out

    def to_json(self) -> dict[str, Any]:
        """The JSON form used by ``pollard show --json``."""
        out: dict[str, Any] = {
            "id": self.id,
            "parent": self.parent,
            "kind": self.kind,
            "attempt": self.attempt,
            "depth": self.depth,
            "label": self.label,
            "charges": decimal_map_json(self.charges),
            "avoided": decimal_map_json(self.avoided),
            "refusal": self.refusal,
            "pruned": self.pruned,
            "redacted": self.redacted,
            "dry_run": self.dry_run,
            "created_at": self.created_at,
            "duration_s": self.duration_s,
            "result_conflicts": self.result_conflicts,
            "merge_conflicts": self.merge_conflicts,
            "confirmation": self.confirmation,
            "approval": self.approval,
            "children": list(self.children),
            "fanout_index": self.fanout_index,
            "usage": dict(self.usage),
            "agent": None if self.agent is None else dict(self.agent),
            "actor": self.actor,
        }
        if self.has_content:
            out["payload"] = self.payload
            out["result"] = self.result
        return out


def kind_name(kind: Any) -> str:
    """The string name of a node kind (an enum member or a plain string)."""
    value = getattr(kind, "value", kind)
    return str(value)


def to_decimal(value: Any) -> Decimal | None:
    """A charge amount as a Decimal, or None when it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, str):
        try:
            result = Decimal(value)
        except InvalidOperation:
            return None
        return result if result.is_finite() else None
    return None


def decimal_map(raw: Any) -> dict[str, Decimal]:
    """A ``{meter: amount}`` mapping from meta, with non-numbers dropped and keys sorted."""
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, Decimal] = {}
    for key in sorted(raw, key=str):
        amount = to_decimal(raw[key])
        if amount is not None:
            out[str(key)] = amount
    return out


def format_decimal(value: Decimal) -> str:
    """Plain decimal text without exponent or trailing zeros (``Decimal("1.50")`` -> ``"1.5"``)."""
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    text = format(value.normalize(), "f")
    return text


def decimal_map_json(values: Mapping[str, Decimal]) -> dict[str, int | float]:
    """Amounts as plain JSON numbers (an int when integral, else a float), keys in order.

    The exact form for audits is `decimal_map_exact` (the CLI prints it under ``"exact"``).
    """
    return {key: plain(value) for key, value in values.items()}


def decimal_map_exact(values: Mapping[str, Decimal]) -> dict[str, str]:
    """Amounts as exact decimal strings (the audit form of `decimal_map_json`)."""
    return {key: format_decimal(value) for key, value in values.items()}


def add_into(total: dict[str, Decimal], values: Mapping[str, Decimal]) -> None:
    """Add ``values`` into ``total`` meter by meter."""
    for key, value in values.items():
        total[key] = total.get(key, Decimal(0)) + value


def _short(text: str, limit: int = LABEL_MAX) -> str:
    text = " ".join(text.split())
    if not text.isprintable():
        text = printable(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str) -> str:
    r"""``text`` with every non-printable character escaped (````, ``‮``).

    Labels come from recorded payloads (a model name, a tool name a model chose), and the text
    views print them to a terminal: an escape sequence or a bidi override in one must not repaint
    the screen or disguise the lines around it.
    """
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def _scalar_label(value: Any) -> str | None:
    if is_redacted(value):
        return "REDACTED"
    if isinstance(value, str):
        return _short(value)
    if isinstance(value, (bool, int)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return None


def node_label(kind: str, payload: Any) -> str:
    """A short, content-free label: run name, model, tool, refusal reason or note tag."""
    if not isinstance(payload, Mapping):
        return ""
    if kind == "root":
        return _scalar_label(payload.get("run")) or ""
    if kind == "model_call":
        for key in ("model", "modelId", "model_id"):
            label = _scalar_label(payload.get(key))
            if label:
                return label
        return ""
    if kind == "tool_call":
        tool = _scalar_label(payload.get("tool")) or ""
        version = _scalar_label(payload.get("version"))
        return f"{tool}@{version}" if tool and version else tool
    if kind == "refusal":
        reason = _scalar_label(payload.get("reason")) or "refused"
        why = _scalar_label(payload.get("meter")) or _scalar_label(payload.get("rule"))
        label = f"{reason}:{why}" if why else reason
        blocked = _scalar_label(payload.get("tool"))
        if blocked:
            blocked_version = _scalar_label(payload.get("version"))
            label += f" {blocked}@{blocked_version}" if blocked_version else f" {blocked}"
        actor = _scalar_label(payload.get("actor"))
        if actor:
            label += f" by {actor}"
        return label
    if payload.get("branch") is True:
        return "branch"
    if payload.get("pollard") == "team":
        return f"team {_scalar_label(payload.get('name')) or ''}".rstrip()
    agent = _agent_of("note", payload)
    if agent is not None:
        # Who the subtree works for: "agent scout (researcher): find sources".
        label = f"agent {agent['name']}"
        if agent["role"]:
            label += f" ({agent['role']})"
        return f"{label}: {agent['task']}" if agent["task"] else label
    if payload.get("pollard") in ("dependency", "handoff"):
        to = _scalar_label(payload.get("to"))
        return f"{payload['pollard']} to {to}" if to else str(payload["pollard"])
    event = payload.get("event")
    if event in DISPATCH_EVENTS and "payload_digest" in payload:
        # pollard's own record of a failed, cancelled or repeated dispatch (no content in it)
        kind_of = _scalar_label(payload.get("kind")) or "call"
        return f"{event} {kind_of}"
    for key in _NOTE_LABEL_KEYS:
        label = _scalar_label(payload.get(key))
        if label is not None:
            return f"{key}={label}"
    return ""


def _agent_of(kind: str, payload: Any) -> dict[str, str] | None:
    """A team agent's identity (name, role, task, team) from its anchor note, else None."""
    if kind != "note" or not isinstance(payload, Mapping) or payload.get("pollard") != "agent":
        return None
    fields = {key: _scalar_label(payload.get(key)) or "" for key in ("name", "role", "task")}
    fields["team"] = _scalar_label(payload.get("team")) or ""
    return fields if fields["name"] else None


def _refusal(kind: str, payload: Any) -> dict[str, str] | None:
    if kind != "refusal":
        return None
    out: dict[str, str] = {}
    if isinstance(payload, Mapping):
        for key in _REFUSAL_KEYS:
            value = payload.get(key)
            if value is None or is_redacted(value):
                continue
            if isinstance(value, (str, int, bool)):
                out[key] = _short(str(value))
    return out


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _budget(kind: str, payload: Any, meta: Mapping[str, Any]) -> dict[str, Decimal]:
    """The limits a node records: a run root's budget, or the limit a refusal hit."""
    if kind == "root":
        return decimal_map(meta.get("budget"))
    if kind == "refusal" and isinstance(payload, Mapping):
        meter = payload.get("meter")
        limit = to_decimal(meta.get("limit"))
        if isinstance(meter, str) and limit is not None:
            return {meter: limit}
    return {}


def _confirmation(value: Any) -> str | None:
    status = value.get("status") if isinstance(value, Mapping) else None
    return _short(status) if isinstance(status, str) and status else None


def _approval(kind: str, payload: Any, meta: Mapping[str, Any]) -> str | None:
    """An approval request's state: pending, approved, denied, or spent (approved and used)."""
    if kind != "refusal" or not isinstance(payload, Mapping):
        return None
    if payload.get("rule") != "approval_required":
        return None
    if isinstance(meta.get("approval_spent_on"), str):
        return "spent"
    decided = meta.get("approval")
    status = decided.get("status") if isinstance(decided, Mapping) else None
    return _short(status) if isinstance(status, str) and status else "pending"


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _result_conflicts(meta: Mapping[str, Any]) -> int:
    """How many differing results a node recorded (its list keeps the first and the latest)."""
    kept = _count(meta.get("result_conflicts"))
    count = meta.get("result_conflict_count")
    return max(kept, count) if type(count) is int else kept


_USAGE_FIELDS = (
    ("input", ("input_tokens",)),
    ("output", ("output_tokens",)),
    ("cache_read", ("cache_read_tokens", "cache_read_input_tokens")),
    ("cache_write", ("cache_write_tokens", "cache_creation_input_tokens")),
)


def _usage(raw: Any) -> dict[str, int]:
    """The recorded token counts (input, output, cache reads and writes) that are usable."""
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, int] = {}
    for name, keys in _USAGE_FIELDS:
        for key in keys:
            count = usable_count(raw.get(key))
            if count is not None:
                out[name] = count
                break
    return out


def prompt_preview(payload: Any) -> str | None:
    """A short quoted preview of a model call's prompt, ``REDACTED`` (unquoted), or None.

    Only for views that include payloads: the preview is content.
    """
    if not isinstance(payload, Mapping):
        return None
    candidates: list[Any] = []
    turn = payload.get("input")
    if isinstance(turn, Mapping):  # the pollux bridge: {"input": {"content": ...}}
        candidates.append(turn.get("content"))
    else:
        candidates.append(turn)
    candidates.append(payload.get("prompt"))
    messages = payload.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], Mapping):
        candidates.append(messages[-1].get("content"))
    for value in candidates:
        if is_redacted(value):
            return "REDACTED"
        if isinstance(value, str) and value.strip():
            return f'"{_short(value, PREVIEW_MAX)}"'
    return None


def view_node(node: NodeLike, depth: int, *, payloads: bool = False) -> ViewNode:
    """Build the view row of one node."""
    kind = kind_name(node.kind)
    meta = node.meta if isinstance(node.meta, Mapping) else {}
    created = meta.get("created_at")
    error = meta.get("error_type")
    row = ViewNode(
        id=node.id,
        parent=node.parent,
        kind=kind,
        attempt=node.attempt,
        depth=depth,
        label=node_label(kind, node.payload),
        charges=dict(sorted(read_charges(meta).items())),
        avoided=dict(sorted(read_charges(meta, "avoided").items())),
        refusal=_refusal(kind, node.payload),
        pruned=meta.get("pruned") is True,
        redacted=contains_redaction(node.payload),
        dry_run=meta.get("dry_run") is True,
        created_at=created if isinstance(created, str) else None,
        duration_s=_float(meta.get("duration_s")),
        result_conflicts=_result_conflicts(meta),
        merge_conflicts=_count(meta.get("merge_conflicts")),
        confirmation=_confirmation(meta.get("confirmation")),
        approval=_approval(kind, node.payload, meta),
        usage=_usage(meta.get("usage")),
        error_type=_short(error) if isinstance(error, str) and error else None,
        budget=_budget(kind, node.payload, meta),
    )
    if kind == "model_call" and isinstance(node.payload, Mapping):
        # A label the caller put in the identity payload names the step better than the model.
        caller = _scalar_label(node.payload.get("label"))
        if caller and caller != row.label:
            row.label = f"{row.label} {caller}" if row.label else caller
    if payloads:
        row.payload = node.payload
        row.result = node.result
        row.has_content = True
    return row


def _fanout_calls(node: NodeLike) -> list[Any] | None:
    """The prompt-ordered ids of a ``pollux run_many`` fan-in note, or None for other nodes."""
    payload = node.payload
    if kind_name(node.kind) != "note" or not isinstance(payload, Mapping):
        return None
    calls = payload.get("calls")
    if payload.get("pollux") != "run_many" or not isinstance(calls, list):
        return None
    return calls


def _label_fanout(row: ViewNode, index: int, preview: str | None) -> None:
    parts = [f"#{index}"]
    if row.label:
        parts.append(row.label)
    if preview:
        parts.append(preview)
    row.label = " ".join(parts)


def _preorder(rows: list[ViewNode], by_id: dict[str, ViewNode]) -> list[ViewNode]:
    """The rows in preorder again after children were reordered (tops keep their order)."""
    out: list[ViewNode] = []
    tops = [row for row in rows if row.parent is None or row.parent not in by_id]
    stack = list(reversed(tops))
    while stack:
        row = stack.pop()
        out.append(row)
        stack.extend(by_id[kid] for kid in reversed(row.children))
    return out


def build_view(nodes: Iterable[NodeLike], *, payloads: bool = False) -> list[ViewNode]:
    """Build view rows from nodes given parents-first (a preorder walk).

    The children of a ``pollux run_many`` fan-out are shown in prompt order, each labelled
    ``#index`` (its position in the prompts, from the fan-in note), then the other children in
    the given order.

    Args:
        nodes: Node records; a node whose parent is not among the earlier ones is shown at
            depth 0 (the top of the subtree).
        payloads: Copy payloads and results into the rows (and preview each fan-out prompt in
            its label).

    Returns:
        The rows in preorder, with ``children`` and ``indent`` (the visual depth: only forks
        indent) filled in.
    """
    rows: list[ViewNode] = []
    by_id: dict[str, ViewNode] = {}
    index_of: dict[str, tuple[int, str | None]] = {}
    previews: dict[str, str | None] = {}
    for node in nodes:
        parent_row = by_id.get(node.parent) if node.parent is not None else None
        depth = parent_row.depth + 1 if parent_row is not None else 0
        row = view_node(node, depth, payloads=payloads)
        row.agent = _agent_of(row.kind, node.payload)
        # Every node of an agent's subtree is that agent's work: the nearest anchor above.
        row.actor = (
            row.agent["name"]
            if row.agent is not None
            else (parent_row.actor if parent_row is not None else None)
        )
        if parent_row is not None:
            parent_row.children.append(row.id)
        by_id[row.id] = row
        rows.append(row)
        calls = _fanout_calls(node)
        if calls is not None:
            for position, call_id in enumerate(calls):
                if isinstance(call_id, str):
                    index_of.setdefault(call_id, (position, node.parent))
        if payloads and kind_name(node.kind) == "model_call":
            previews[node.id] = prompt_preview(node.payload)
    if index_of:
        reordered: set[str] = set()
        for node_id, (position, parent) in index_of.items():
            child = by_id.get(node_id)
            # Only the note's siblings are its prompts (a stray id elsewhere is left alone).
            if child is None or child.parent != parent:
                continue
            child.fanout_index = position
            _label_fanout(child, position, previews.get(node_id))
            if parent is not None and parent in by_id:
                reordered.add(parent)
        for parent_id in reordered:
            parent_row = by_id[parent_id]
            order = {kid: n for n, kid in enumerate(parent_row.children)}
            parent_row.children.sort(
                key=lambda kid: (
                    (0, by_id[kid].fanout_index)
                    if by_id[kid].fanout_index is not None
                    else (1, order[kid])
                )
            )
        rows = _preorder(rows, by_id)
    # Agent runs are mostly chains (each step is the child of the previous one), so only a
    # fork indents: an only child is drawn at its parent's column.
    for row in rows:
        parent_row = by_id.get(row.parent) if row.parent is not None else None
        if parent_row is not None:
            row.indent = parent_row.indent + (1 if len(parent_row.children) > 1 else 0)
            row.under_pruned = parent_row.pruned or parent_row.under_pruned
    return rows


def parse_timestamp(text: str | None) -> datetime | None:
    """Parse a recorded ``created_at`` (ISO 8601, UTC ``Z``) into an aware datetime."""
    if not text:
        return None
    value = text[:-1] + "+00:00" if text.endswith("Z") else text
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
