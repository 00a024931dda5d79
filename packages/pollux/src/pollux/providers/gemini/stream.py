"""Map ``streamGenerateContent`` chunks (JSON or SDK objects) to neutral stream chunks.

Every Gemini stream chunk is itself a small ``GenerateContentResponse``: text and thought parts
are deltas, a ``function_call`` part arrives whole, ``usage_metadata`` is cumulative (repeated on
every chunk: a ``usage`` chunk is sent only when it changed) and the last chunk carries the
``finish_reason``. The mapper keeps the stream equal to the one-shot result by
construction: it reuses :mod:`.extract`'s helpers (same call ids, same signatures, same replay
parts merged the same way) and sends the finish reason, the replay state and the artifacts in
one terminal chunk from :meth:`GeminiStreamMapper.finish`. A stream that ends without a finish
reason was cut: :class:`APIError` (retryable, ``stream_cut``).
"""

from __future__ import annotations

from typing import Any

from pollux.errors import APIError
from pollux.interaction.output import Usage
from pollux.interaction.tools import ToolCallDelta
from pollux.providers.base import TOOL_CALL_STATES, StreamChunk

from .errors import PROVIDER
from .extract import (
    _jsonable,
    extract_usage,
    field,
    finish_reason,
    model_content,
    part_json,
    raise_if_malformed_call,
    tool_call_from_part,
)

__all__ = ["GeminiStreamMapper"]

# The keys of a chunk (and its candidate) that carries nothing but text, usage and ids.
_PLAIN_CHUNK = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId"})
_PLAIN_CANDIDATE = frozenset({"content", "index"})
# What _plain_text returns for a chunk it does not handle (None means "handled, nothing to send").
_NOT_PLAIN = StreamChunk()


class GeminiStreamMapper:
    """Stateful translation of one stream's chunks (one mapper per stream)."""

    #: Gemini has no terminal event: a stream ends when its body does (see :meth:`finish`).
    done = False

    def __init__(self) -> None:
        """Start with nothing seen."""
        self._calls = 0
        self._replay: list[dict[str, Any]] = []
        self._last: Any = None
        self._reason_seen = False
        self._response_id: str | None = None
        self._artifacts: dict[str, Any] = {}
        self._call_states: dict[str, Any] = {}
        self._raw_usage: Any = None
        self._usage: Usage | None = None

    def feed(self, chunk: Any) -> StreamChunk | None:
        """Translate one chunk (SDK object or JSON dict); ``None`` when it carries nothing."""
        if chunk.__class__ is dict and self._response_id is not None:
            plain = self._plain_text(chunk)
            if plain is not _NOT_PLAIN:
                return plain
        self._last = chunk
        response_id = field(chunk, "response_id")
        new_id = response_id if response_id and self._response_id is None else None
        if response_id and self._response_id is None:
            self._response_id = response_id
        texts: list[str] = []
        thoughts: list[str] = []
        deltas: list[ToolCallDelta] = []
        candidates = field(chunk, "candidates") or ()
        if candidates:
            candidate = candidates[0]
            if field(candidate, "finish_reason") is not None:
                self._reason_seen = True
            for name in ("grounding_metadata", "url_context_metadata", "citation_metadata"):
                value = _jsonable(field(candidate, name))
                if value:
                    self._artifacts[name] = value
            for part in field(field(candidate, "content"), "parts") or ():
                entry = part_json(part)
                if field(part, "function_call") is not None:
                    call = tool_call_from_part(part, self._calls)
                    deltas.append(
                        ToolCallDelta(
                            index=self._calls,
                            id=call.id,
                            name=call.name,
                            arguments=call.arguments_text,
                        )
                    )
                    if call.provider_state is not None:
                        self._call_states[str(self._calls)] = call.provider_state
                    self._calls += 1
                    if entry is not None:
                        entry["function_call"]["id"] = call.id
                else:
                    text = field(part, "text")
                    if text:
                        (thoughts if field(part, "thought", False) else texts).append(text)
                if entry is not None:
                    self._replay.append(entry)
        elif field(field(chunk, "prompt_feedback"), "block_reason") is not None:
            self._reason_seen = True
        usage = self._new_usage(field(chunk, "usage_metadata"))
        if not (texts or thoughts or deltas or usage or new_id):
            return None
        return StreamChunk(
            text="".join(texts),
            reasoning="".join(thoughts),
            tool_call_deltas=tuple(deltas),
            usage=usage,
            response_id=new_id,
        )

    def _new_usage(self, raw: Any) -> Usage | None:
        """The chunk's cumulative usage when it changed (None when absent or repeated).

        Gemini repeats the usage so far on every chunk; a ``usage`` event that repeats the
        previous one carries nothing, so only changes are sent (the last always is).
        """
        if raw is None or raw == self._raw_usage:
            return None
        self._raw_usage = raw
        usage = extract_usage(raw)
        if usage == self._usage:
            return None
        self._usage = usage
        return usage

    def _plain_text(self, chunk: dict[str, Any]) -> StreamChunk | None:
        """The REST JSON chunk of most of a stream, mapped directly.

        Plain text parts of one candidate, no finish reason or metadata yet, the response id
        already seen: what :meth:`feed` would make of it (None when it carries nothing), with a
        fraction of the lookups. Any other chunk: ``_NOT_PLAIN``, for the full path.
        """
        candidates = chunk.get("candidates")
        if candidates.__class__ is not list or len(candidates) != 1:
            return _NOT_PLAIN
        candidate = candidates[0]
        if candidate.__class__ is not dict or not _PLAIN_CANDIDATE.issuperset(candidate):
            return _NOT_PLAIN
        content = candidate.get("content")
        parts = content.get("parts") if content.__class__ is dict else None
        if parts.__class__ is not list or not _PLAIN_CHUNK.issuperset(chunk):
            return _NOT_PLAIN
        for part in parts:
            if (
                part.__class__ is not dict
                or len(part) != 1
                or part.get("text").__class__ is not str
            ):
                return _NOT_PLAIN
        self._last = chunk
        usage = self._new_usage(chunk.get("usageMetadata"))
        # Each part is {"text": ...}, the replay entry part_json makes of it (merge_parts
        # copies before merging, so the parsed dicts serve as they are).
        self._replay.extend(parts)
        text = parts[0]["text"] if len(parts) == 1 else "".join(p["text"] for p in parts)
        if not (text or usage):
            return None
        return StreamChunk(text=text, usage=usage)

    def finish(self) -> StreamChunk:
        """The terminal chunk once the source is exhausted; a stream cut short raises."""
        if self._last is None or not self._reason_seen:
            raise APIError(
                "Gemini stream ended before the response finished",
                hint="The connection was cut mid-stream; retry the interaction.",
                retryable=True,
                provider=PROVIDER,
                phase="stream",
                error_category="stream_cut",
            )
        artifacts = dict(self._artifacts)
        feedback = _jsonable(field(self._last, "prompt_feedback"))
        if feedback:
            artifacts["prompt_feedback"] = feedback
        version = field(self._last, "model_version")
        if version:
            artifacts["model_version"] = version
        reason = finish_reason(self._last, has_tool_calls=self._calls > 0)
        candidates = field(self._last, "candidates") or ()
        message = field(candidates[0], "finish_message") if candidates else None
        raise_if_malformed_call(reason, message)
        state: dict[str, Any] = {}
        if self._replay:
            state["gemini_content"] = model_content(self._replay)
        if self._call_states:
            state[TOOL_CALL_STATES] = dict(self._call_states)
        return StreamChunk(
            finish_reason=reason,
            provider_state=state or None,
            artifacts=artifacts or None,
        )
