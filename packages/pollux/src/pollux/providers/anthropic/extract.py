"""Turn a Messages API ``Message`` into a neutral :class:`ProviderResponse`.

Works on SDK objects and plain JSON dicts alike (batch results, tests) by reading fields through
:func:`field`. The stream mapper reuses :func:`extract_usage`, :func:`finish_reason` and
:func:`wire_block`, so a streamed turn and a one-shot turn normalize identically.

Normalization:

- ``text``: every ``text`` block, in order; ``reasoning``: every ``thinking`` block's text,
  joined by a blank line.
- ``tool_calls``: one :class:`ToolCall` per ``tool_use`` block (``arguments_text`` is the JSON of
  its ``input``).
- ``provider_state["anthropic_content"]``: the assistant's content blocks as the wire needs them
  back, signed ``thinking`` (text and ``signature``) and ``redacted_thinking`` (``data``) blocks
  untouched, so a continuation replays them verbatim.
- ``usage``: Anthropic reports ``input_tokens`` *without* the cache; pollux's ``input_tokens``
  adds ``cache_read_input_tokens`` and ``cache_creation_input_tokens``, and keeps them visible as
  ``cached_tokens`` (reads) and ``cache_write_tokens`` (writes), the writes split by TTL class
  from ``cache_creation`` (``ephemeral_5m_input_tokens`` -> ``cache_write_5m_tokens``,
  ``ephemeral_1h_input_tokens`` -> ``cache_write_1h_tokens``). ``reasoning_tokens`` comes from
  ``output_tokens_details.thinking_tokens`` when reported.
- ``finish_reason``: ``end_turn``/``stop_sequence`` -> ``stop``, ``tool_use`` -> ``tool_calls``;
  ``max_tokens``, ``refusal``, ``pause_turn`` and ``model_context_window_exceeded`` are kept
  (so ``completion_status`` is ``truncated`` or ``cutoff``). The raw ``stop_reason`` and
  ``stop_sequence`` go to ``artifacts``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pollux.interaction.output import Usage
from pollux.interaction.tools import ToolCall
from pollux.providers.base import ProviderResponse

__all__ = [
    "REASONING_SEPARATOR",
    "STOP_REASONS",
    "arguments_text",
    "extract_response",
    "extract_usage",
    "field",
    "finish_reason",
    "wire_block",
]

#: Separator between consecutive thinking blocks in ``Output.reasoning``.
REASONING_SEPARATOR = "\n\n"

#: Anthropic ``stop_reason`` -> neutral finish reason (others are kept as they are).
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls"}


def field(obj: Any, key: str, default: Any = None) -> Any:
    """Read ``key`` from an SDK object or a JSON mapping."""
    if obj is None:
        return default
    if obj.__class__ is dict or isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def extract_usage(raw: Any) -> Usage | None:
    """Normalize Anthropic usage (``Usage`` or ``MessageDeltaUsage``, or its JSON)."""
    if raw is None:
        return None
    uncached = _count(field(raw, "input_tokens"))
    reads = field(raw, "cache_read_input_tokens")
    writes = field(raw, "cache_creation_input_tokens")
    output = _count(field(raw, "output_tokens"))
    thinking = field(field(raw, "output_tokens_details"), "thinking_tokens")
    input_tokens = uncached + _count(reads) + _count(writes)
    split = field(raw, "cache_creation")
    short = field(split, "ephemeral_5m_input_tokens")
    long = field(split, "ephemeral_1h_input_tokens")
    short = short if isinstance(short, int) and not isinstance(short, bool) else None
    long = long if isinstance(long, int) and not isinstance(long, bool) else None
    if isinstance(writes, int) and (short or 0) + (long or 0) > writes:
        short = long = None  # an inconsistent split is not trusted; the total still is
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        total_tokens=input_tokens + output,
        reasoning_tokens=thinking if isinstance(thinking, int) else None,
        cached_tokens=reads if isinstance(reads, int) else None,
        cache_write_tokens=writes if isinstance(writes, int) else None,
        cache_write_5m_tokens=short if isinstance(writes, int) else None,
        cache_write_1h_tokens=long if isinstance(writes, int) else None,
    )


def finish_reason(stop_reason: Any) -> str | None:
    """The neutral finish reason for an Anthropic ``stop_reason``."""
    if stop_reason is None:
        return None
    reason = str(stop_reason)
    return STOP_REASONS.get(reason, reason)


def _dump(block: Any) -> dict[str, Any]:
    if isinstance(block, Mapping):
        return {str(k): v for k, v in block.items() if v is not None}
    dump = getattr(block, "model_dump", None)
    if callable(dump):
        data: dict[str, Any] = dump(mode="json", exclude_none=True)
        return data
    return {"type": str(field(block, "type", "unknown"))}


def wire_block(block: Any) -> dict[str, Any]:
    """One assistant content block as the API takes it back in a later request."""
    kind = field(block, "type")
    if kind == "text":
        return {"type": "text", "text": field(block, "text", "") or ""}
    if kind == "thinking":
        return {
            "type": "thinking",
            "thinking": field(block, "thinking", "") or "",
            "signature": field(block, "signature", "") or "",
        }
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": field(block, "data", "") or ""}
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": field(block, "id", "") or "",
            "name": field(block, "name", "") or "",
            "input": _plain(field(block, "input", None)),
        }
    # Server tools (web search, code execution, ...): replayed as the API sent them.
    return _dump(block)


def _plain(value: Any) -> Any:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    return value


def arguments_text(value: Any) -> str:
    """The ``ToolCall.arguments_text`` for a parsed ``tool_use`` input."""
    # The default separators are what the streamed input_json fragments concatenate to.
    return json.dumps(_plain(value), ensure_ascii=False)


def extract_response(message: Any) -> ProviderResponse:
    """Normalize one Messages API response.

    Args:
        message: An ``anthropic.types.Message`` or its JSON dict.

    Returns:
        The neutral response.
    """
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    citations: list[Any] = []
    blocks: list[dict[str, Any]] = []
    for block in field(message, "content", None) or ():
        kind = field(block, "type")
        blocks.append(wire_block(block))
        if kind == "text":
            texts.append(field(block, "text", "") or "")
            citations.extend(_dump(c) for c in field(block, "citations", None) or ())
        elif kind == "thinking":
            text = field(block, "thinking", "") or ""
            if text:
                reasoning.append(text)
        elif kind == "tool_use":
            calls.append(
                ToolCall.from_text(
                    id=str(field(block, "id", "") or ""),
                    name=str(field(block, "name", "") or ""),
                    arguments_text=arguments_text(field(block, "input", None)),
                    index=len(calls),
                )
            )
    stop_reason = field(message, "stop_reason")
    artifacts: dict[str, Any] = {"stop_reason": stop_reason}
    stop_sequence = field(message, "stop_sequence")
    if stop_sequence is not None:
        artifacts["stop_sequence"] = stop_sequence
    if citations:
        artifacts["citations"] = citations
    return ProviderResponse(
        text="".join(texts),
        reasoning=REASONING_SEPARATOR.join(reasoning) if reasoning else None,
        tool_calls=tuple(calls),
        usage=extract_usage(field(message, "usage")),
        finish_reason=finish_reason(stop_reason),
        response_id=field(message, "id"),
        provider_state={"anthropic_content": blocks},
        artifacts=artifacts,
    )
