"""``POST /v1/messages`` (plain and SSE) and ``POST /v1/messages/count_tokens``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pollux.testing._emulator._core import Call, Core
from pollux.testing._emulator._http import Outcome, StreamResponse, json_response, sse_event
from pollux.testing._emulator._model import (
    ModelOutput,
    PrefixCache,
    chunk_text,
    count_tokens,
    generate,
    truncate_tokens,
)
from pollux.testing._emulator._script import Reply

from .compile import Compiled, compile_body
from .errors import ERROR_TYPES, invalid, require_headers
from .reply import AnthropicReply
from .signing import redacted_data, sign_thinking
from .state import AnthropicState

__all__ = ["betas", "build", "count_tokens_route", "create", "message_body", "parse_body"]


class _NoAutomaticCache(PrefixCache):
    """Anthropic caches only what ``cache_control`` marks; the wire does its own accounting."""

    def lookup_and_store(self, model: str, tokens: list[str]) -> int:
        return 0


def parse_body(call: Call) -> dict[str, Any]:
    """The JSON object body, or the API's 400."""
    require_headers(call)
    data = call.request.json
    if not isinstance(data, dict):
        raise invalid("The request body is not valid JSON. Send a JSON object.")
    return data


@dataclass(slots=True)
class Built:
    """A finished message, with what its stream needs."""

    body: dict[str, Any]
    out: ModelOutput


def _tool_input(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return dict(arguments)
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def betas(call: Call) -> frozenset[str]:
    """The request's ``anthropic-beta`` values."""
    header = call.request.headers.get("anthropic-beta", "")
    return frozenset(b.strip() for b in header.split(",") if b.strip())


def build(
    core: Core,
    state: AnthropicState,
    body: Mapping[str, Any],
    reply: Reply | None,
    request_betas: frozenset[str] = frozenset(),
) -> Built:
    """Answer a create body (also used for batch requests)."""
    compiled = compile_body(core, state, body, betas=request_betas)
    request = compiled.request
    extra = reply if isinstance(reply, AnthropicReply) else None
    out = generate(request, reply, _NoAutomaticCache(core.clock), lambda: core.new_id("toolu_"))
    forced = request.tool_choice == "required" or request.tool_choice.startswith("function:")
    unscripted = reply is None or (
        reply.text is None and not reply.tool_calls and not reply.has_structured
    )
    if forced and unscripted and not out.tool_calls and not out.truncated:
        # A forced tool choice calls a tool even right after tool results, unlike "auto".
        out = generate(
            replace(request, tool_results=[]),
            reply,
            _NoAutomaticCache(core.clock),
            lambda: core.new_id("toolu_"),
        )
    if compiled.disable_parallel:
        out.tool_calls = out.tool_calls[:1]
    stop_reason = "tool_use" if out.tool_calls else "end_turn"
    stop_sequence: str | None = None
    if out.truncated:
        stop_reason = "max_tokens"
    elif not out.tool_calls:
        hits = [(out.text.find(s), s) for s in compiled.stop_sequences if s in out.text]
        if hits:
            position, stop_sequence = min(hits)
            out.text = out.text[:position]
            stop_reason = "stop_sequence"
    if extra is not None and extra.stop_reason is not None:
        stop_reason = extra.stop_reason
        if stop_reason == "stop_sequence":
            stop_sequence = extra.stop_sequence or (
                compiled.stop_sequences[0] if compiled.stop_sequences else None
            )
    if reply is None or reply.output_tokens is None:
        visible = count_tokens(out.text) + sum(
            count_tokens(c.name) + count_tokens(c.arguments_json()) for c in out.tool_calls
        )
        out.output_tokens = max(1, visible + out.reasoning_tokens)
        limit = request.max_output_tokens
        if limit is not None and out.output_tokens > limit:
            out.text = truncate_tokens(out.text, max(0, limit - out.reasoning_tokens))
            out.output_tokens = limit
    content: list[dict[str, Any]] = []
    if out.reasoning is not None:
        shown = "" if compiled.display == "omitted" else out.reasoning
        content.append({"type": "thinking", "thinking": shown, "signature": sign_thinking(shown)})
    for text in extra.redacted_thinking if extra is not None else ():
        content.append({"type": "redacted_thinking", "data": redacted_data(text)})
    if out.text or not out.tool_calls:
        content.append({"type": "text", "text": out.text, "citations": None})
    for call in out.tool_calls:
        content.append(
            {
                "type": "tool_use",
                "id": call.call_id,
                "name": call.name,
                "input": _tool_input(call.arguments),
                "_raw": call.arguments_json(),
            }
        )
    message: dict[str, Any] = {
        "id": core.new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "stop_details": (
            {"type": "refusal", "category": None, "explanation": None}
            if stop_reason == "refusal"
            else None
        ),
        "usage": _usage(core, state, compiled, out, reply, extra),
    }
    return Built(message, out)


def _usage(
    core: Core,
    state: AnthropicState,
    compiled: Compiled,
    out: ModelOutput,
    reply: Reply | None,
    extra: AnthropicReply | None,
) -> dict[str, Any]:
    model = compiled.request.model
    cache = state.cache.account(model, compiled.blocks, core.cache.minimum(model))
    write_5m, write_1h = cache.write_5m, cache.write_1h
    if extra is not None and extra.cache_write_tokens is not None:
        write_5m, write_1h = extra.cache_write_tokens, 0
    read = cache.read if reply is None or reply.cached_tokens is None else reply.cached_tokens
    input_tokens = cache.input_tokens
    if reply is not None and reply.input_tokens is not None:
        input_tokens = reply.input_tokens
    usage: dict[str, Any] = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_read_input_tokens": read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": write_5m,
            "ephemeral_1h_input_tokens": write_1h,
        },
        "output_tokens": out.output_tokens,
        "service_tier": "standard",
        "server_tool_use": None,
    }
    if out.reasoning_tokens:
        usage["output_tokens_details"] = {"thinking_tokens": out.reasoning_tokens}
    return usage


def message_body(
    core: Core,
    state: AnthropicState,
    body: Mapping[str, Any],
    reply: Reply | None,
    request_betas: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The non-streamed Message for a create body."""
    return _public(build(core, state, body, reply, request_betas).body)


def _public(message: dict[str, Any]) -> dict[str, Any]:
    content = [{k: v for k, v in b.items() if k != "_raw"} for b in message["content"]]
    return {**message, "content": content}


def create(call: Call) -> Outcome:
    """``POST /v1/messages``."""
    body = parse_body(call)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid("stream: Input should be a valid boolean")
    built = build(call.core, call.state, body, call.reply, betas(call))
    if not stream:
        return json_response(_public(built.body))
    return _stream(built.body)


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    return sse_event({"type": kind, **payload}, kind)


def _stream(message: dict[str, Any]) -> StreamResponse:
    usage = message["usage"]
    start_usage = {**usage, "output_tokens": 1}
    start_usage.pop("output_tokens_details", None)
    shell = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
        "usage": start_usage,
    }
    events = [_event("message_start", {"message": shell})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "thinking":
            head: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "text":
            head = {"type": "text", "text": "", "citations": None}
        elif kind == "tool_use":
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        else:
            head = dict(block)
        events.append(_event("content_block_start", {"index": index, "content_block": head}))
        if index == 0:
            events.append(_event("ping", {}))

        def delta(payload: dict[str, Any], index: int = index) -> None:
            events.append(_event("content_block_delta", {"index": index, "delta": payload}))

        if kind == "thinking":
            for piece in chunk_text(block["thinking"]):
                delta({"type": "thinking_delta", "thinking": piece})
            delta({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            for piece in chunk_text(block["text"]):
                delta({"type": "text_delta", "text": piece})
        elif kind == "tool_use":
            for piece in chunk_text(block["_raw"], 16):
                delta({"type": "input_json_delta", "partial_json": piece})
        events.append(_event("content_block_stop", {"index": index}))
    final_usage = {
        key: usage[key]
        for key in (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "output_tokens",
            "server_tool_use",
            "output_tokens_details",
        )
        if key in usage
    }
    events.append(
        _event(
            "message_delta",
            {
                "delta": {
                    "stop_reason": message["stop_reason"],
                    "stop_sequence": message["stop_sequence"],
                    "stop_details": message["stop_details"],
                },
                "usage": final_usage,
            },
        )
    )
    events.append(_event("message_stop", {}))
    return StreamResponse(
        events,
        error_event=_error_event,
        malformed_event=b'event: content_block_delta\ndata: {"malformed": \n\n',
    )


def _error_event(message: str, code: str, sequence: int) -> bytes:
    # StreamError's default code is OpenAI's "server_error"; Anthropic streams say overloaded.
    kind = code if code in ERROR_TYPES else "overloaded_error"
    if message == "The server had an error while processing your request." and kind == (
        "overloaded_error"
    ):
        message = "Overloaded"
    return _event("error", {"error": {"type": kind, "message": message}})


def count_tokens_route(call: Call) -> Outcome:
    """``POST /v1/messages/count_tokens``: every input token (cached or not)."""
    body = parse_body(call)
    compiled = compile_body(call.core, call.state, body, counting=True, betas=betas(call))
    return json_response({"input_tokens": compiled.total_tokens})
