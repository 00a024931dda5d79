"""Turn a Responses API ``Response`` into a neutral :class:`ProviderResponse`.

Works on SDK objects and on plain JSON dicts alike (batch result files are JSON), by reading
fields through :func:`field`. The stream mapper (``stream.py``) reuses these helpers on the
final response, so a streamed turn and a one-shot turn normalize identically.

Normalization:

- ``text``: every ``output_text`` (and ``refusal``) part of every ``message`` item, in order.
- ``reasoning``: every reasoning summary and reasoning text part, joined by a blank line.
- ``tool_calls``: one :class:`ToolCall` per ``function_call`` item, ``id`` = its ``call_id``,
  ``index`` = its position among the calls.
- ``usage``: input/output/total tokens, plus ``cached_tokens`` (a subset of the input) and
  ``reasoning_tokens`` (a subset of the output).
- ``finish_reason``: ``stop``, ``tool_calls``, ``refusal``, or for an ``incomplete`` response
  ``max_tokens`` (from ``max_output_tokens``, so truncation is reported) or the provider's
  reason (``content_filter``, ...). A ``failed`` response raises :class:`APIError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pollux.interaction.output import Usage
from pollux.interaction.tools import ToolCall
from pollux.providers.base import ProviderResponse

from .errors import stream_error

#: Separator between consecutive reasoning parts (summaries or reasoning text).
REASONING_SEPARATOR = "\n\n"

#: Responses ``incomplete_details.reason`` -> neutral finish reason.
INCOMPLETE_REASONS = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}


def field(obj: Any, key: str, default: Any = None) -> Any:
    """Read ``key`` from an SDK object or a JSON mapping."""
    if obj is None:
        return default
    if obj.__class__ is dict or isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def extract_usage(raw: Any) -> Usage | None:
    """Normalize a ``ResponseUsage`` (or its JSON); ``None`` when the response has none."""
    if raw is None:
        return None
    input_tokens = _int(field(raw, "input_tokens"))
    output_tokens = _int(field(raw, "output_tokens"))
    total = field(raw, "total_tokens")
    cached = field(field(raw, "input_tokens_details"), "cached_tokens")
    # Not on OpenAI's own API (its caching has no write charge); gateways that speak the
    # Responses wire may report it, and a reported count is never dropped.
    writes = field(field(raw, "input_tokens_details"), "cache_write_tokens")
    reasoning = field(field(raw, "output_tokens_details"), "reasoning_tokens")
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=_int(total) if total is not None else input_tokens + output_tokens,
        cached_tokens=cached if isinstance(cached, int) else None,
        cache_write_tokens=writes if isinstance(writes, int) and writes > 0 else None,
        reasoning_tokens=reasoning if isinstance(reasoning, int) else None,
    )


def reasoning_parts(item: Any) -> list[str]:
    """The text parts of one ``reasoning`` output item: summaries first, then content."""
    parts = [field(s, "text", "") or "" for s in field(item, "summary", None) or ()]
    parts.extend(field(c, "text", "") or "" for c in field(item, "content", None) or ())
    # Empty parts are skipped so the streamed timeline (which only sees non-empty deltas)
    # joins exactly the same parts.
    return [part for part in parts if part]


def finish_reason(response: Any, *, has_tool_calls: bool, refused: bool) -> str | None:
    """The neutral finish reason of a terminal response."""
    status = field(response, "status")
    if status == "incomplete":
        reason = field(field(response, "incomplete_details"), "reason")
        return INCOMPLETE_REASONS.get(reason, reason or "incomplete")
    if status in (None, "completed"):
        if has_tool_calls:
            return "tool_calls"
        return "refusal" if refused else "stop"
    return str(status)


def raise_if_failed(response: Any) -> None:
    """Raise the pollux error for a ``failed`` response."""
    if field(response, "status") != "failed":
        return
    error = field(response, "error")
    message = field(error, "message") or "the response failed"
    code = field(error, "code")
    raise stream_error(str(message), code=str(code) if code is not None else None, phase="generate")


def extract_response(response: Any, *, served_model: bool = False) -> ProviderResponse:
    """Normalize one Responses API response.

    Args:
        response: An ``openai.types.responses.Response`` or its JSON dict.
        served_model: Keep the model the response names as ``artifacts["model_version"]``
            (Azure OpenAI, where the configured model is a deployment and this is the model).

    Returns:
        The neutral response.

    Raises:
        APIError: The response has status ``failed``.
    """
    raise_if_failed(response)
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    annotations: list[Any] = []
    refusals: list[str] = []
    for item in field(response, "output", None) or ():
        kind = field(item, "type")
        if kind == "message":
            for part in field(item, "content", None) or ():
                part_type = field(part, "type")
                if part_type == "output_text":
                    texts.append(field(part, "text", "") or "")
                    annotations.extend(_jsonable(a) for a in field(part, "annotations", None) or ())
                elif part_type == "refusal":
                    refusal = field(part, "refusal", "") or ""
                    texts.append(refusal)
                    refusals.append(refusal)
        elif kind == "reasoning":
            reasoning.extend(reasoning_parts(item))
        elif kind == "function_call":
            calls.append(
                ToolCall.from_text(
                    id=str(field(item, "call_id", "") or ""),
                    name=str(field(item, "name", "") or ""),
                    arguments_text=field(item, "arguments", "") or "",
                    index=len(calls),
                )
            )
    artifacts: dict[str, Any] = {}
    if annotations:
        artifacts["annotations"] = annotations
    if refusals:
        artifacts["refusal"] = "".join(refusals)
    if served_model:
        model = field(response, "model")
        if isinstance(model, str) and model:
            artifacts["model_version"] = model
    return ProviderResponse(
        text="".join(texts),
        reasoning=REASONING_SEPARATOR.join(reasoning) if reasoning else None,
        tool_calls=tuple(calls),
        usage=extract_usage(field(response, "usage")),
        finish_reason=finish_reason(response, has_tool_calls=bool(calls), refused=bool(refusals)),
        response_id=field(response, "id"),
        artifacts=artifacts or None,
    )


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    return value


__all__ = [
    "INCOMPLETE_REASONS",
    "REASONING_SEPARATOR",
    "extract_response",
    "extract_usage",
    "field",
    "finish_reason",
    "raise_if_failed",
    "reasoning_parts",
]
