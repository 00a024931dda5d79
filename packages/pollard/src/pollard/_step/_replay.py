"""Replay: find a recorded step, serve it (verified, its charges avoided), or explain the miss."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pollard._core._amounts import charges_meta, read_charges
from pollard._core._ledger import ZERO
from pollard._core._node import Node, NodeKind
from pollard._step._effects import Emit, Step, io
from pollard.errors import BudgetExceeded, MissingRecording, PolicyViolation

if TYPE_CHECKING:
    from pollard._step._state import CursorState

__all__ = ["diff_paths", "recorded", "serve", "summary"]


def recorded(state: CursorState, node: Node, *, executable: bool) -> Step:
    """The recorded node that stands in for ``node`` (hybrid/replay), else None.

    A recorded dry run (no result) stands in for an executable step only when this runtime is
    also dry-running, or in replay (which can never execute); hybrid executes it instead. For a
    dry-run record (``executable=False``) only a recorded dry run stands in. In replay a miss
    raises `MissingRecording` (or the recorded refusal of that call).
    """
    rt = state.rt
    found: Node | None = yield io(rt.store.find, node.id)
    if found is not None:
        dry = found.meta.get("dry_run")
        if executable:
            if found.result is not None or (dry and (rt.dry_run or rt.mode == "replay")):
                return found
        elif dry:
            return found
    if rt.mode == "replay":
        yield from _miss(state, node)
    return None


def serve(state: CursorState, found: Node, on_delta: Callable[[Any], Any] | None) -> Step:
    """Serve a recorded node: verify its ancestry, count its charges avoided, move onto it."""
    rt = state.rt
    yield io(rt.verify_ancestry, found)
    charges = read_charges(found.meta)
    avoided = state.avoided
    for name, amount in charges.items():
        avoided[name] = avoided.get(name, ZERO) + amount
    if rt.mode == "hybrid" and charges:
        previous = read_charges(found.meta, "avoided")
        merged = {
            name: previous.get(name, ZERO) + charges.get(name, ZERO)
            for name in set(previous) | set(charges)
        }
        found = yield io(
            rt.store.update_meta, found.id, charges_meta(merged, "avoided", patch=True)
        )
    state.move(found)
    if on_delta is not None and isinstance(found.result, Mapping):
        for chunk in found.result.get("chunks") or ():
            yield Emit(on_delta, chunk)
    return found


def summary(kind: str, payload: Any, canonical: bytes) -> str:
    """A content-free description of a step for errors: kind, model or tool, payload digest."""
    digest = hashlib.sha256(canonical).hexdigest()
    if isinstance(payload, Mapping):
        if kind == "model_call" and isinstance(payload.get("model"), str):
            return f"model_call model={payload['model']} digest={digest}"
        if kind == "tool_call" and isinstance(payload.get("tool"), str):
            version = payload.get("version")
            tool = payload["tool"] + (f"@{version}" if isinstance(version, str) else "")
            return f"tool_call tool={tool} digest={digest}"
    return f"{kind} digest={digest}"


def diff_paths(left: Any, right: Any, limit: int = 3) -> list[str]:
    """Return up to ``limit`` JSON paths where two values differ (iterative)."""
    out: list[str] = []
    stack: list[tuple[str, Any, Any]] = [("$", left, right)]
    while stack and len(out) < limit:
        path, a, b = stack.pop()
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), reverse=True):
                if key not in a or key not in b:
                    out.append(f"{path}.{key}")
                else:
                    stack.append((f"{path}.{key}", a[key], b[key]))
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"{path} (length {len(b)} recorded, {len(a)} now)")
            for index in reversed(range(min(len(a), len(b)))):
                stack.append((f"{path}[{index}]", a[index], b[index]))
        elif type(a) is not type(b) or a != b:
            out.append(path)
    return out[:limit]


def _miss(state: CursorState, node: Node) -> Step:
    """Raise for a step replay cannot serve: its recorded refusal, or the nearest difference."""
    kind = node.kind.value
    canonical = node.canonical_payload or b""
    siblings: list[Node] = yield io(state.rt.store.children, node.parent)
    digest = hashlib.sha256(canonical).hexdigest()
    for sibling in siblings:
        if (
            sibling.kind is NodeKind.REFUSAL
            and isinstance(sibling.payload, Mapping)
            and sibling.payload.get("blocked_payload_digest") == digest
            and sibling.payload.get("blocked_kind") == kind
        ):
            state.move(sibling)
            reason = sibling.payload.get("reason")
            if reason == "policy":
                raise PolicyViolation(
                    f"replay: recorded policy refusal: {sibling.payload.get('detail')}",
                    sibling.id,
                    detail=str(sibling.payload.get("detail")),
                )
            raise BudgetExceeded(
                f"replay: recorded {reason} refusal on {sibling.payload.get('meter')}",
                sibling.id,
                meter=str(sibling.payload.get("meter")),
                reason=str(reason),
            )
    same = [s for s in siblings if s.kind is node.kind]
    detail = "no recorded sibling of the same kind"
    if same:
        best = min(
            same,
            key=lambda s: (len(diff_paths(node.payload, s.payload, 50)), s.attempt, s.id),
        )
        paths = diff_paths(node.payload, best.payload)
        if paths:
            detail = f"nearest recorded sibling {best.id[:12]} differs at {', '.join(paths)}"
        else:
            detail = (
                f"nearest recorded sibling {best.id[:12]} has the same payload with "
                f"attempt {best.attempt} (this call: attempt {node.attempt})"
            )
    shown = summary(kind, node.payload, canonical)
    raise MissingRecording(
        f"replay: no recording for {shown} under {node.parent}; {detail}", node.id, shown
    )
