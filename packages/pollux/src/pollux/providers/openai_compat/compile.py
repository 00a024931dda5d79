"""Chat Completions request compilation, shared by local servers and OpenRouter.

Transcript layout for every turn::

    system     Environment.instructions                        (when set)
    user       [sources..., first prompt]                      (sources appear exactly once)
    assistant / tool / user ...                                (replayed history or continuation)
    tool       one message per ToolResult of this turn
    user       Input.content of this turn                      (when set)

Sources are attached to the first user message of the transcript, so a long tool loop never
repeats them (the original re-sent them, plus a "sources only" message, on every turn).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError
from pollux.providers._schema import strict_schema

if TYPE_CHECKING:
    from pollux.interaction.messages import Message
    from pollux.interaction.tools import ToolDeclaration
    from pollux.providers.base import ProviderRequest
    from pollux.source import Source

__all__ = [
    "TEXT_LIKE_MIME",
    "SharedSources",
    "build_payload",
    "check_provider_options",
    "history_messages",
    "is_text_like",
    "pollux_keys",
    "shared_sources",
    "source_part",
    "strict_schema",
]

TEXT_LIKE_MIME = frozenset(
    {
        "application/json",
        "application/jsonl",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/javascript",
        "application/x-tex",
        "application/x-bibtex",
        "application/toml",
    }
)
_AUDIO_FORMATS = {
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/flac": "flac",
    "audio/ogg": "ogg",
    "audio/webm": "webm",
    "audio/mp4": "m4a",
}
#: Payload keys pollux writes itself; provider_options may not override them.
RESERVED_KEYS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "response_format",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "max_tokens",
        "seed",
        "reasoning",
    }
)
ERROR_PREFIX = "ERROR: "


def is_text_like(mime: str) -> bool:
    """True for MIME types sent as inline text."""
    return mime.startswith("text/") or mime in TEXT_LIKE_MIME or mime.endswith(("+json", "+xml"))


def audio_format(mime: str) -> str | None:
    """The Chat Completions ``input_audio.format`` for an audio MIME type, if supported."""
    return _AUDIO_FORMATS.get(mime)


def source_part(source: Source, *, allow_pdf: bool = False) -> dict[str, Any]:
    """One source as a Chat Completions content part (validate first: this assumes support)."""
    mime = source.mime_type
    remote = source._remote_uri
    if remote is not None:
        if mime.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": remote}}
        if allow_pdf and mime == "application/pdf":
            name = remote.rsplit("/", 1)[-1] or "document.pdf"
            return {"type": "file", "file": {"filename": name, "file_data": remote}}
        raise ConfigurationError(  # pragma: no cover - validate() rejects this first
            f"Remote source {remote} ({mime}) is not supported here",
            hint="Download it and pass Source.from_file(...).",
        )
    if is_text_like(mime):
        try:
            text = source._read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigurationError(
                f"Source {source.identifier!r} is declared {mime} but is not UTF-8 text",
                hint="Pass the right mime_type, or convert the file to UTF-8.",
            ) from exc
        return {"type": "text", "text": text}
    data = base64.b64encode(source._read_bytes()).decode("ascii")
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
    fmt = audio_format(mime)
    if fmt is not None:
        return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    if allow_pdf and mime == "application/pdf":
        name = source.identifier.rsplit("/", 1)[-1] or "document.pdf"
        return {
            "type": "file",
            "file": {"filename": name, "file_data": f"data:{mime};base64,{data}"},
        }
    raise ConfigurationError(  # pragma: no cover - validate() rejects this first
        f"Source {source.identifier!r} ({mime}) is not supported here",
        hint="Send text, images or audio.",
    )


def _tool_payload(tool: ToolDeclaration) -> dict[str, Any]:
    parameters = tool.parameters or {"type": "object", "properties": {}}
    # One strict rule for every provider (pollux.providers._schema): optional stays optional
    # (required and nullable), and a schema strict mode cannot express goes out non-strict.
    strict = strict_schema(parameters) if tool.strict else None
    function: dict[str, Any] = {
        "name": tool.name,
        "parameters": strict if strict is not None else dict(parameters),
    }
    if tool.description:
        function["description"] = tool.description
    if strict is not None:
        function["strict"] = True
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def history_messages(history: Sequence[Message]) -> list[dict[str, Any]]:
    """Portable :class:`~pollux.interaction.messages.Message` values as wire messages."""
    out: list[dict[str, Any]] = []
    for message in history:
        wire: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text},
                }
                for call in message.tool_calls
            ]
            if not message.content:
                wire["content"] = None
        if message.tool_call_id is not None:
            wire["tool_call_id"] = message.tool_call_id
        out.append(wire)
    return out


def turn_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    """This turn's new messages (tool results, then the user's content), without sources."""
    out: list[dict[str, Any]] = []
    for result in request.input.tool_results:
        content = f"{ERROR_PREFIX}{result.content}" if result.is_error else result.content
        out.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
    if request.input.content:
        out.append({"role": "user", "content": request.input.content})
    return out


def prior_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    """The replayed transcript before this turn (continuation state or portable history)."""
    if request.continuation_state is not None:
        messages = request.continuation_state.get("messages", [])
        return [dict(m) for m in messages]
    if request.input.history:
        return history_messages(request.input.history)
    return []


@dataclass(frozen=True, slots=True)
class SharedSources:
    """The call's source parts, JSON-encoded once (see :func:`shared_sources`).

    A fan-out sends the same sources with every prompt. Encoding a 20 KB text or a 1 MB data URL
    per request costs more than everything else the client does, so it is encoded once and
    spliced into each request body. All-text sources travel as one string (``escaped`` is its
    JSON-escaped form, without quotes); mixed media travel as content parts (``escaped`` is the
    JSON array elements, without brackets).
    """

    parts: tuple[dict[str, Any], ...]
    all_text: bool
    escaped: bytes


# A marker no real prompt contains (NUL bytes plus a per-process random token); it stands in
# for the shared sources while the small rest of the payload is encoded, then is replaced.
_MARKER = f"\x00pollux-sources-{uuid.uuid4().hex}\x00"
_MARKER_JSON = json.dumps(_MARKER)[1:-1].encode("ascii")
_MARKER_ELEMENT = b'"' + _MARKER_JSON + b'"'


def shared_sources(parts: Sequence[dict[str, Any]]) -> tuple[Any, ...]:
    """Wrap the call's source parts in one :class:`SharedSources` (none: an empty tuple)."""
    if not parts:
        return ()
    if all(p.get("type") == "text" for p in parts):
        text = "\n\n".join(p["text"] for p in parts)
        escaped = json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8")
        return (SharedSources(parts=tuple(parts), all_text=True, escaped=escaped),)
    array = json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))
    return (SharedSources(parts=tuple(parts), all_text=False, escaped=array[1:-1].encode()),)


def _with_sources(messages: list[dict[str, Any]], parts: Sequence[Any]) -> list[dict[str, Any]]:
    """Attach source parts to the first user message (or add one when there is none)."""
    if not parts:
        return messages
    for position, message in enumerate(messages):
        if message.get("role") == "user":
            text = message.get("content") or ""
            out = list(messages)
            out[position] = {**message, "content": _source_content(parts, text)}
            return out
    return [{"role": "user", "content": _source_content(parts, "")}, *messages]


def _source_content(parts: Sequence[Any], text: str) -> Any:
    if len(parts) == 1 and isinstance(parts[0], SharedSources):
        if parts[0].all_text:
            return f"{_MARKER}\n\n{text}" if text else _MARKER
        return [_MARKER, {"type": "text", "text": text}] if text else [_MARKER]
    merged = [*parts, {"type": "text", "text": text}] if text else list(parts)
    return _flatten(merged)


def _flatten(parts: list[dict[str, Any]]) -> Any:
    # All-text content goes as one string: every OpenAI-compatible server accepts that, while
    # some older local servers reject content arrays.
    if all(part.get("type") == "text" for part in parts):
        return "\n\n".join(part["text"] for part in parts)
    return parts


def pollux_keys(request: ProviderRequest, extra: Mapping[str, Any] | None = None) -> set[str]:
    """The payload keys pollux itself writes for ``request`` (what provider_options may not set)."""
    req = request.requirements
    keys = {"messages"}
    if request.model:
        keys.add("model")
    if request.tools:
        keys.add("tools")
    if req.tool_choice is not None:
        keys.add("tool_choice")
    if req.output_schema is not None:
        keys.add("response_format")
    for name in ("temperature", "top_p", "max_tokens", "seed"):
        if getattr(req, name) is not None:
            keys.add(name)
    if request.stream:
        keys.update(("stream", "stream_options"))
    if extra:
        keys.update(extra)
    return keys


def check_provider_options(options: Mapping[str, Any], keys: set[str], provider: str) -> None:
    """Refuse provider_options that would overwrite what pollux sets from named arguments."""
    clash = sorted(set(options) & RESERVED_KEYS & keys)
    if clash:
        raise ConfigurationError(
            f"provider_options[{provider!r}] sets {', '.join(clash)}, which pollux "
            "already sets from the call's arguments",
            hint="Use the named arguments (output=, max_tokens=, tools=, ...) instead.",
        )


def build_payload(
    request: ProviderRequest,
    *,
    provider: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Chat Completions JSON payload for one validated request."""
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    transcript = prior_messages(request) + turn_messages(request)
    messages.extend(_with_sources(transcript, request.sources.parts))

    payload: dict[str, Any] = {}
    if request.model:
        payload["model"] = request.model
    payload["messages"] = messages
    req = request.requirements
    if request.tools:
        payload["tools"] = [_tool_payload(tool) for tool in request.tools]
    if req.tool_choice is not None:
        payload["tool_choice"] = _tool_choice(req.tool_choice)
    schema = req.output_schema_json()
    if schema is not None:
        strict = strict_schema(schema)
        payload["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": "pollux_structured_output",
                "schema": strict if strict is not None else dict(schema),
                "strict": strict is not None,
            },
        }
    if req.temperature is not None:
        payload["temperature"] = req.temperature
    if req.top_p is not None:
        payload["top_p"] = req.top_p
    if req.max_tokens is not None:
        payload["max_tokens"] = req.max_tokens
    if req.seed is not None:
        payload["seed"] = req.seed
    if extra:
        payload.update(extra)
    if request.stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    options = req.provider_options_for(provider)
    if options:
        check_provider_options(options, set(payload), provider)
        payload.update(options)
    return payload


def encode(payload: Mapping[str, Any], parts: Sequence[Any] = ()) -> bytes:
    """Compact UTF-8 JSON, as sent on the wire (shared text spliced in once, if any)."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(parts) == 1 and isinstance(parts[0], SharedSources):
        shared = parts[0]
        marker = _MARKER_JSON if shared.all_text else _MARKER_ELEMENT
        body = body.replace(marker, shared.escaped, 1)
    return body
