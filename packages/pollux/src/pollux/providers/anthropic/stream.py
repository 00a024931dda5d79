"""Map Messages API stream events onto neutral :class:`StreamChunk` values.

Event by event (what the timeline shows):

- ``message_start``: the response id and the first usage (input and cache counts) -> ``usage``.
- ``content_block_start``: a ``tool_use`` block opens a tool call slot -> ``tool_call_delta``
  with its id and name; other blocks open a slot for the final content.
- ``content_block_delta``: ``text_delta`` -> ``text_delta``; ``thinking_delta`` ->
  ``reasoning_delta``; ``input_json_delta`` -> ``tool_call_delta`` with the argument fragment;
  ``signature_delta`` and ``citations_delta`` are kept for the final content.
- ``content_block_stop``: the block is complete; a tool call that streamed no arguments gets
  ``{}`` (what a one-shot response reports for an empty input).
- ``message_delta``: the stop reason and the final usage (cumulative) -> ``usage``.
- ``message_stop``: the end; the last chunk carries the assistant content blocks (signed
  thinking included) as ``provider_state`` and the complete tool calls (arguments formatted as
  the one-shot path formats them), exactly what :func:`.extract.extract_response` reports, so
  ``done.output`` equals what ``interact`` returns.
- ``error`` (``overloaded_error`` mid-stream, ...) raises :class:`~pollux.errors.APIError`; a
  stream that ends without ``message_stop`` raises too. Neither produces a ``done``.
"""

from __future__ import annotations

import json
from typing import Any

from pollux.errors import APIError
from pollux.interaction.tools import ToolCall, ToolCallDelta
from pollux.providers.base import StreamChunk

from .errors import PROVIDER, event_error
from .extract import (
    REASONING_SEPARATOR,
    arguments_text,
    extract_usage,
    field,
    finish_reason,
    wire_block,
)

__all__ = ["MessagesStreamMapper"]


class MessagesStreamMapper:
    """Folds one message's stream events into chunks; see the module docstring."""

    def __init__(self) -> None:
        self.done = False
        self._blocks: dict[int, dict[str, Any]] = {}
        self._tool_slots: dict[int, int] = {}
        self._tool_args: dict[int, bool] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._thinking_started: set[int] = set()
        self._citations: list[Any] = []
        # (block index, field) -> the fragments streamed so far, joined into the block when it
        # stops (appending to a string would copy the whole text on every delta).
        self._pieces: dict[tuple[int, str], list[str]] = {}

    def _merge_usage(self, raw: Any) -> None:
        if raw is None:
            return
        for key in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ):
            value = field(raw, key)
            if isinstance(value, int):
                self._usage[key] = value
        split = field(raw, "cache_creation")
        if split is not None:
            ttl = {
                key: value
                for key in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")
                if isinstance(value := field(split, key), int)
            }
            if ttl:
                self._usage["cache_creation"] = ttl
        details = field(raw, "output_tokens_details")
        thinking = field(details, "thinking_tokens")
        if isinstance(thinking, int):
            self._usage["output_tokens_details"] = {"thinking_tokens": thinking}

    def feed(self, event: Any) -> StreamChunk | None:
        """Map one event; ``None`` when it carries nothing for the timeline."""
        kind = field(event, "type")
        if kind == "content_block_delta":
            return self._delta(field(event, "index", 0), field(event, "delta"))
        if kind == "message_start":
            message = field(event, "message")
            self._merge_usage(field(message, "usage"))
            return StreamChunk(
                response_id=field(message, "id"),
                usage=extract_usage(self._usage),
            )
        if kind == "content_block_start":
            return self._start(field(event, "index", 0), field(event, "content_block"))
        if kind == "content_block_stop":
            return self._stop(field(event, "index", 0))
        if kind == "message_delta":
            delta = field(event, "delta")
            self._stop_reason = field(delta, "stop_reason") or self._stop_reason
            self._stop_sequence = field(delta, "stop_sequence") or self._stop_sequence
            self._merge_usage(field(event, "usage"))
            return StreamChunk(
                usage=extract_usage(self._usage),
                finish_reason=finish_reason(self._stop_reason),
            )
        if kind == "message_stop":
            self.done = True
            return self._final()
        if kind == "error":
            error = field(event, "error")
            raise event_error(
                str(field(error, "type") or "error"),
                str(field(error, "message") or "the stream reported an error"),
            )
        return None  # ping, and event types this version does not know

    def _start(self, index: int, block: Any) -> StreamChunk | None:
        block_type = field(block, "type")
        self._blocks[index] = wire_block(block)
        if str(block_type).endswith("tool_use"):
            # tool_use and server tools (server_tool_use, mcp_tool_use): the input streams as
            # JSON fragments; the start event's input is an empty placeholder.
            self._blocks[index]["input"] = ""
        if block_type == "tool_use":
            slot = len(self._tool_slots)
            self._tool_slots[index] = slot
            self._tool_args[index] = False
            return StreamChunk(
                tool_call_deltas=(
                    ToolCallDelta(
                        index=slot,
                        id=str(field(block, "id", "") or ""),
                        name=str(field(block, "name", "") or ""),
                    ),
                )
            )
        if block_type == "thinking":
            text = field(block, "thinking", "") or ""
            if text:
                return self._reasoning(index, text)
        if block_type == "text":
            text = field(block, "text", "") or ""
            if text:
                return StreamChunk(text=text)
        return None

    def _reasoning(self, index: int, text: str) -> StreamChunk:
        # The one-shot path joins the thinking blocks with a blank line; so does the stream.
        prefix = ""
        if index not in self._thinking_started:
            if self._thinking_started:
                prefix = REASONING_SEPARATOR
            self._thinking_started.add(index)
        return StreamChunk(reasoning=prefix + text)

    def _delta(self, index: int, delta: Any) -> StreamChunk | None:
        delta_type = field(delta, "type")
        block = self._blocks.get(index)
        if block is None:
            raise _protocol_error(f"a delta for block {index}, which never started")
        if delta_type == "text_delta":
            text = field(delta, "text", "") or ""
            self._piece(index, "text", block).append(text)
            return StreamChunk(text=text) if text else None
        if delta_type == "thinking_delta":
            text = field(delta, "thinking", "") or ""
            self._piece(index, "thinking", block).append(text)
            return self._reasoning(index, text) if text else None
        if delta_type == "signature_delta":
            block["signature"] = block.get("signature", "") + (field(delta, "signature", "") or "")
            return None
        if delta_type == "input_json_delta":
            fragment = field(delta, "partial_json", "") or ""
            self._piece(index, "input", block).append(fragment)
            slot = self._tool_slots.get(index)
            if slot is None or not fragment:
                return None
            self._tool_args[index] = True
            return StreamChunk(tool_call_deltas=(ToolCallDelta(index=slot, arguments=fragment),))
        if delta_type == "citations_delta":
            citation = field(delta, "citation")
            if citation is not None:
                dump = getattr(citation, "model_dump", None)
                self._citations.append(dump(mode="json") if callable(dump) else citation)
            return None
        return None

    def _piece(self, index: int, name: str, block: dict[str, Any]) -> list[str]:
        pieces = self._pieces.get((index, name))
        if pieces is None:
            current = block.get(name)
            pieces = self._pieces[(index, name)] = [current if isinstance(current, str) else ""]
        return pieces

    def _settle(self, index: int) -> None:
        """Join the streamed fragments of block ``index`` into its fields."""
        block = self._blocks[index]
        for name in ("text", "thinking", "input"):
            pieces = self._pieces.pop((index, name), None)
            if pieces is not None:
                block[name] = "".join(pieces)

    def _stop(self, index: int) -> StreamChunk | None:
        block = self._blocks.get(index)
        if block is None:
            raise _protocol_error(f"the end of block {index}, which never started")
        self._settle(index)
        if isinstance(block.get("input"), str):
            block["input"] = _parse_input(block["input"])
        if block.get("type") == "tool_use":
            slot = self._tool_slots[index]
            if not self._tool_args.get(index):
                return StreamChunk(tool_call_deltas=(ToolCallDelta(index=slot, arguments="{}"),))
        return None

    def _final(self) -> StreamChunk:
        for index in {index for index, _ in self._pieces}:
            self._settle(index)  # a block whose content_block_stop never came
        blocks = [self._blocks[index] for index in sorted(self._blocks)]
        artifacts: dict[str, Any] = {"stop_reason": self._stop_reason}
        if self._stop_sequence is not None:
            artifacts["stop_sequence"] = self._stop_sequence
        if self._citations:
            artifacts["citations"] = self._citations
        calls = tuple(
            ToolCall.from_text(
                id=str(block.get("id", "")),
                name=str(block.get("name", "")),
                arguments_text=block["input"]
                if isinstance(block["input"], str)
                else arguments_text(block["input"]),
                index=slot,
            )
            for slot, block in enumerate(b for b in blocks if b.get("type") == "tool_use")
        )
        return StreamChunk(
            provider_state={"anthropic_content": blocks}, artifacts=artifacts, tool_calls=calls
        )

    def finish(self) -> None:
        """Raise when the stream ended without ``message_stop`` (it was cut)."""
        if not self.done:
            raise APIError(
                "anthropic stream ended before message_stop",
                hint="The connection broke mid-answer; call again (streams are not resumed).",
                retryable=True,
                provider=PROVIDER,
                phase="stream",
                error_category="network",
            )


def _parse_input(raw: str) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        # Kept as text: the ToolCall reports the parse error, and the replay shows what came.
        return raw


def _protocol_error(what: str) -> APIError:
    return APIError(
        f"anthropic stream sent {what}",
        hint="The event stream is out of order (often a proxy); call again.",
        retryable=True,
        provider=PROVIDER,
        phase="stream",
        error_category="malformed_response",
    )
