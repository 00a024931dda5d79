"""Turn a ``GenerateContentResponse`` into a neutral :class:`ProviderResponse`.

Works on SDK objects and on JSON dicts alike (batch results are camelCase JSON), reading fields
through :func:`field`. The stream mapper reuses these helpers, so a streamed turn and a one-shot
turn normalize identically.

Normalization:

- ``text``: the non-thought text parts of the first candidate, joined with nothing;
  ``reasoning``: its thought parts, joined the same way.
- ``tool_calls``: one :class:`ToolCall` per ``function_call`` part; a call without an id (Gemini
  2.x sends none) gets ``call_<index>``; its thought signature rides in
  ``ToolCall.provider_state["thought_signature"]`` (base64).
- ``usage``: ``prompt_token_count`` (+ tool-use prompt tokens) as input, candidates plus
  thoughts as output, ``cached_content_token_count`` as ``cached_tokens`` and
  ``thoughts_token_count`` as ``reasoning_tokens``.
- ``finish_reason``: ``stop`` (``tool_calls`` when the model called tools), ``max_tokens``, or
  Google's reason in lower case (``safety``, ``recitation``, ``prohibited_content``, ...), which
  ``completion_status`` maps to ``truncated`` / ``cutoff``. A prompt blocked before generation
  (``prompt_feedback.block_reason``) finishes ``safety`` or the block reason.
  ``MALFORMED_FUNCTION_CALL`` raises :class:`~pollux.errors.ToolCallParseError`.
- ``provider_state["gemini_content"]``: the model turn as JSON (text, function calls and
  signed parts, signatures base64) for the continuation transcript.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pollux.errors import ToolCallParseError
from pollux.interaction.output import Usage
from pollux.interaction.tools import ToolCall
from pollux.providers.base import ProviderResponse

__all__ = [
    "extract_response",
    "extract_usage",
    "field",
    "finish_reason",
    "merge_parts",
    "model_content",
    "part_json",
    "raise_if_malformed_call",
    "tool_call_from_part",
]

#: Google block reasons that are not themselves cutoff reasons pollux knows.
_BLOCK_REASONS = {"other": "content_filter", "jailbreak": "content_filter"}


# Every request and response renames the same few keys: remember them.
@functools.lru_cache(maxsize=1024)
def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word.title() for word in rest)


def field(obj: Any, key: str, default: Any = None) -> Any:
    """Read snake_case ``key`` from an SDK object or a (snake or camel case) JSON mapping."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        if key in obj:
            return obj[key]
        return obj.get(_camel(key), default)
    value = getattr(obj, key, default)
    return default if value is None else value


def _enum(value: Any) -> str | None:
    if value is None:
        return None
    raw = getattr(value, "value", value)
    return str(raw)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def extract_usage(raw: Any) -> Usage | None:
    """Normalize ``usage_metadata``; ``None`` when the response has none."""
    if raw is None:
        return None
    prompt = _int(field(raw, "prompt_token_count")) + _int(
        field(raw, "tool_use_prompt_token_count")
    )
    candidates = _int(field(raw, "candidates_token_count"))
    thoughts = field(raw, "thoughts_token_count")
    cached = field(raw, "cached_content_token_count")
    output = candidates + _int(thoughts)
    total = field(raw, "total_token_count")
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=_int(total) if isinstance(total, int) else prompt + output,
        reasoning_tokens=thoughts if isinstance(thoughts, int) and thoughts > 0 else None,
        cached_tokens=cached if isinstance(cached, int) and cached > 0 else None,
    )


def _signature(part: Any) -> str | None:
    raw = field(part, "thought_signature")
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray)):
        return base64.b64encode(bytes(raw)).decode("ascii")
    return str(raw)


def part_json(part: Any) -> dict[str, Any] | None:
    """One model part as transcript JSON (``None`` for parts not worth replaying).

    Text, function calls and any part carrying a thought signature are kept; unsigned thought
    summaries are dropped (the model does not need its own summaries back).
    """
    signature = _signature(part)
    call = field(part, "function_call")
    thought = bool(field(part, "thought", False))
    result: dict[str, Any]
    if call is not None:
        args = field(call, "args")
        result = {"function_call": {"name": field(call, "name") or "", "args": dict(args or {})}}
        call_id = field(call, "id")
        if call_id:
            result["function_call"]["id"] = call_id
    else:
        text = field(part, "text")
        if text is None and signature is None:
            return None
        if thought and signature is None:
            return None
        result = {"text": text or ""}
        if thought:
            result["thought"] = True
    if signature is not None:
        result["thought_signature"] = signature
    return result


def merge_parts(parts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Merge runs of plain text parts (a stream sends text in pieces) into one part each.

    A signature stays with the text it arrived with; a second signature starts a new part.
    """
    merged: list[dict[str, Any]] = []
    for part in parts:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and "text" in part
            and "text" in previous
            and bool(part.get("thought")) == bool(previous.get("thought"))
            and not ("thought_signature" in part and "thought_signature" in previous)
        ):
            previous["text"] += part["text"]
            if "thought_signature" in part:
                previous["thought_signature"] = part["thought_signature"]
            continue
        merged.append(dict(part))
    return merged


def tool_call_from_part(part: Any, index: int, *, call_id: str | None = None) -> ToolCall:
    """The neutral tool call of one ``function_call`` part."""
    call = field(part, "function_call")
    args = field(call, "args")
    signature = _signature(part)
    return ToolCall.from_text(
        id=str(call_id or field(call, "id") or f"call_{index}"),
        name=str(field(call, "name") or ""),
        arguments_text=json.dumps(dict(args or {}), ensure_ascii=False, separators=(",", ":")),
        index=index,
        provider_state={"thought_signature": signature} if signature else None,
    )


def finish_reason(response: Any, *, has_tool_calls: bool) -> str | None:
    """The neutral finish reason of a complete response."""
    candidates = field(response, "candidates") or ()
    if not candidates:
        feedback = field(response, "prompt_feedback")
        block = _enum(field(feedback, "block_reason"))
        if block and block != "BLOCKED_REASON_UNSPECIFIED":
            lowered = block.lower()
            return _BLOCK_REASONS.get(lowered, lowered)
        return None
    reason = _enum(field(candidates[0], "finish_reason"))
    if reason is None or reason in ("STOP", "FINISH_REASON_UNSPECIFIED"):
        if has_tool_calls:
            return "tool_calls"
        return "stop" if reason is not None else None
    if reason == "MAX_TOKENS":
        return "max_tokens"
    return reason.lower()


def raise_if_malformed_call(reason: str | None, message: Any) -> None:
    """Gemini's ``MALFORMED_FUNCTION_CALL``: the model's tool call did not parse.

    Raises:
        ToolCallParseError: Always, when ``reason`` says so (a per-prompt failure in
            ``run_many``, raised by ``interact``), never a silent empty answer.
    """
    if reason != "malformed_function_call":
        return
    detail = f": {message}" if message else ""
    raise ToolCallParseError(
        f"gemini produced a malformed function call{detail}",
        hint="The model's tool call did not parse; retry, simplify the tool schema, or use "
        "a model better at tool calling.",
    )


def model_content(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The transcript entry for the model's turn."""
    return {"role": "model", "parts": merge_parts(parts)}


def extract_response(response: Any) -> ProviderResponse:
    """Normalize one ``generate_content`` response (SDK object or JSON dict)."""
    candidates = field(response, "candidates") or ()
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    replay: list[dict[str, Any]] = []
    artifacts: dict[str, Any] = {}
    if candidates:
        candidate = candidates[0]
        for part in field(field(candidate, "content"), "parts") or ():
            if field(part, "function_call") is not None:
                call = tool_call_from_part(part, len(calls))
                calls.append(call)
                entry = part_json(part)
                if entry is not None:
                    entry["function_call"]["id"] = call.id
                    replay.append(entry)
                continue
            text = field(part, "text")
            if text:
                (thoughts if field(part, "thought", False) else texts).append(text)
            entry = part_json(part)
            if entry is not None:
                replay.append(entry)
        for name in ("grounding_metadata", "url_context_metadata", "citation_metadata"):
            value = _jsonable(field(candidate, name))
            if value:
                artifacts[name] = value
        message = field(candidate, "finish_message")
        if message:
            artifacts["finish_message"] = message
    feedback = _jsonable(field(response, "prompt_feedback"))
    if feedback:
        artifacts["prompt_feedback"] = feedback
    version = field(response, "model_version")
    if version:
        artifacts["model_version"] = version
    reason = finish_reason(response, has_tool_calls=bool(calls))
    raise_if_malformed_call(reason, artifacts.get("finish_message"))
    return ProviderResponse(
        text="".join(texts),
        reasoning="".join(thoughts) or None,
        tool_calls=tuple(calls),
        usage=extract_usage(field(response, "usage_metadata")),
        finish_reason=reason,
        response_id=field(response, "response_id"),
        provider_state={"gemini_content": model_content(replay)} if replay else None,
        artifacts=artifacts or None,
    )


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _jsonable(value: Any) -> Any:
    """SDK objects and raw JSON alike as snake_case JSON (stream and one-shot agree)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {_snake(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value
