"""Map Responses API streaming events to neutral :class:`StreamChunk` values.

The engine turns chunks into the seed's timeline (``text_delta``, ``reasoning_delta``,
``tool_call_delta``, ``tool_call``, ``usage``, ``finish``, ``done``) and assembles ``done.output``
through the same path as ``interact``. This mapper keeps the two equal by construction: deltas
concatenate to exactly what :func:`extract_response` reads from the final response (text parts
joined with nothing, reasoning parts joined with a blank line, tool calls indexed by their
position among the calls), and the terminal chunk carries usage, finish reason, response id and
artifacts computed by the very functions ``extract`` uses.

Event map:

- ``response.created`` -> ``response_id``
- ``response.output_text.delta`` / ``response.refusal.delta`` -> ``text``
- ``response.reasoning_summary_text.delta`` / ``response.reasoning_text.delta`` -> ``reasoning``
- ``response.output_item.added`` (function_call) -> tool-call delta with ``id`` and ``name``
- ``response.function_call_arguments.delta`` -> tool-call delta with argument text
- ``response.output_item.done`` (function_call) -> any argument text the deltas missed
- ``response.completed`` / ``response.incomplete`` -> usage, finish reason, artifacts, and any
  text, reasoning or tool call the deltas missed (so a server that skips deltas still assembles
  to the one-shot result)
- ``response.failed`` / ``error`` -> raise :class:`APIError`
- a stream that ends before a terminal event -> raise :class:`APIError` (retryable, ``stream_cut``)
"""

from __future__ import annotations

from typing import Any

from pollux.errors import APIError
from pollux.interaction.tools import ToolCall, ToolCallDelta
from pollux.providers.base import StreamChunk

from .errors import PROVIDER, stream_error
from .extract import REASONING_SEPARATOR, extract_response, field

_TERMINAL = ("response.completed", "response.incomplete")


class ResponsesStreamMapper:
    """Stateful translation of one response's events into chunks (one mapper per stream)."""

    def __init__(self, *, served_model: bool = False) -> None:
        """Start with no parts seen.

        Args:
            served_model: Keep the model the final response names (see `extract_response`).
        """
        self._served_model = served_model
        self.response_id: str | None = None
        self.done = False
        self._reasoning_part: tuple[Any, ...] | None = None
        self._reasoning_started = False
        # output_index -> (slot index among calls, arguments seen so far)
        self._calls: dict[int, list[Any]] = {}
        self._text: list[str] = []
        self._reasoning_text: list[str] = []

    def feed(self, event: Any) -> StreamChunk | None:
        """Translate one SDK event (or its JSON dict); ``None`` when it carries nothing."""
        kind = field(event, "type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            delta = field(event, "delta", "") or ""
            if not delta:
                return None
            self._text.append(delta)
            return StreamChunk(text=delta)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return self._reasoning(event, kind)
        if kind == "response.output_item.added":
            return self._call_added(event)
        if kind == "response.function_call_arguments.delta":
            return self._call_arguments(event)
        if kind == "response.output_item.done":
            return self._call_done(event)
        if kind == "response.created":
            self.response_id = field(field(event, "response"), "id")
            return StreamChunk(response_id=self.response_id) if self.response_id else None
        if kind in _TERMINAL:
            return self._terminal(field(event, "response"))
        if kind == "response.failed":
            response = field(event, "response")
            error = field(response, "error")
            code = field(error, "code")
            raise stream_error(
                str(field(error, "message") or "the response failed"),
                code=str(code) if code is not None else None,
            )
        if kind == "error":
            code = field(event, "code")
            raise stream_error(
                str(field(event, "message") or "stream error"),
                code=str(code) if code is not None else None,
            )
        return None

    def finish(self) -> None:
        """Call when the event source is exhausted; a stream cut short raises."""
        if not self.done:
            raise APIError(
                "OpenAI stream ended before the response completed",
                hint="The connection was cut mid-stream; retry the interaction.",
                retryable=True,
                provider=PROVIDER,
                phase="stream",
                error_category="stream_cut",
            )

    def _reasoning(self, event: Any, kind: str) -> StreamChunk | None:
        delta = field(event, "delta", "") or ""
        if not delta:
            return None
        sub = field(event, "summary_index") if "summary" in kind else field(event, "content_index")
        part = (field(event, "output_index"), kind, sub)
        prefix = ""
        if part != self._reasoning_part:
            if self._reasoning_started:
                prefix = REASONING_SEPARATOR
            self._reasoning_part = part
            self._reasoning_started = True
        self._reasoning_text.append(prefix + delta)
        return StreamChunk(reasoning=prefix + delta)

    def _call_added(self, event: Any) -> StreamChunk | None:
        item = field(event, "item")
        if field(item, "type") != "function_call":
            return None
        slot = len(self._calls)
        arguments = field(item, "arguments", "") or ""
        self._calls[field(event, "output_index")] = [slot, arguments]
        return StreamChunk(
            tool_call_deltas=(
                ToolCallDelta(
                    index=slot,
                    id=field(item, "call_id"),
                    name=field(item, "name"),
                    arguments=arguments,
                ),
            )
        )

    def _call_arguments(self, event: Any) -> StreamChunk | None:
        state = self._calls.get(field(event, "output_index"))
        delta = field(event, "delta", "") or ""
        if state is None or not delta:
            return None
        state[1] += delta
        return StreamChunk(tool_call_deltas=(ToolCallDelta(index=state[0], arguments=delta),))

    def _call_done(self, event: Any) -> StreamChunk | None:
        item = field(event, "item")
        if field(item, "type") != "function_call":
            return None
        state = self._calls.get(field(event, "output_index"))
        if state is None:
            added = self._call_added(event)
            return added
        final = field(item, "arguments", "") or ""
        seen: str = state[1]
        if final.startswith(seen) and len(final) > len(seen):
            state[1] = final
            return StreamChunk(
                tool_call_deltas=(ToolCallDelta(index=state[0], arguments=final[len(seen) :]),)
            )
        return None

    def _terminal(self, response: Any) -> StreamChunk:
        self.done = True
        final = extract_response(response, served_model=self._served_model)
        # Reconcile with the final response: whatever it holds beyond what the deltas carried
        # (a server that skips some delta events) is sent now, so the assembled stream still
        # equals the one-shot extraction.
        return StreamChunk(
            text=_remainder(final.text, "".join(self._text)),
            reasoning=_remainder(final.reasoning or "", "".join(self._reasoning_text)),
            tool_call_deltas=self._missing_calls(final.tool_calls),
            usage=final.usage,
            finish_reason=final.finish_reason,
            response_id=final.response_id or self.response_id,
            artifacts=final.artifacts,
        )

    def _missing_calls(self, calls: tuple[ToolCall, ...]) -> tuple[ToolCallDelta, ...]:
        seen = {state[0]: state[1] for state in self._calls.values()}
        deltas: list[ToolCallDelta] = []
        for index, call in enumerate(calls):
            if index not in seen:
                deltas.append(
                    ToolCallDelta(
                        index=index, id=call.id, name=call.name, arguments=call.arguments_text
                    )
                )
            else:
                rest = _remainder(call.arguments_text, seen[index])
                if rest:
                    deltas.append(ToolCallDelta(index=index, arguments=rest))
        return tuple(deltas)


def _remainder(final: str, streamed: str) -> str:
    """The tail of ``final`` that ``streamed`` lacks ('' when they differ otherwise)."""
    if len(final) > len(streamed) and final.startswith(streamed):
        return final[len(streamed) :]
    return ""


__all__ = ["ResponsesStreamMapper"]
