"""Scripting: queued replies and faults per route, and installed handlers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._faults import Fault
from ._log import RecordedRequest, selector_matches


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the emulated model makes.

    Args:
        name: The function name.
        arguments: The arguments, as a mapping (JSON-encoded on the wire) or a raw string, which
            is sent verbatim (so a test can send arguments that are not valid JSON).
        call_id: The call id; generated deterministically when omitted.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None

    def arguments_json(self) -> str:
        """The arguments as the string the wire carries."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"))


_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class Reply:
    """What the emulated model answers to one generation request.

    Anything left unset comes from the deterministic default model.

    Args:
        text: The answer text.
        tool_calls: Function calls the model makes instead of (or besides) answering.
        reasoning: Reasoning text (a summary on the Responses API, ``reasoning_content`` on Chat
            Completions).
        structured: A JSON value sent as the answer text (for structured output tests).
        truncated: Report the answer as cut off by the output-token limit.
        input_tokens: Override the counted input tokens.
        output_tokens: Override the counted output tokens.
        cached_tokens: Override the prefix-cache hit count.
        reasoning_tokens: Override the reasoning token count.
        cache_write_tokens: Prompt tokens to report as written to a cache, where the wire has
            such a count (Chat Completions' ``prompt_tokens_details.cache_write_tokens``, as
            OpenRouter reports for Anthropic and Gemini models; Anthropic's
            ``cache_creation_input_tokens`` is set with ``AnthropicReply``).

    Example:
        >>> Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})]).tool_calls[0].name
        'get_weather'
    """

    text: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    reasoning: str | None = None
    structured: Any = _UNSET
    truncated: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise TypeError(f"Reply.tool_calls takes ToolCall objects, got {call!r}")

    @property
    def has_structured(self) -> bool:
        """Whether ``structured`` was given."""
        return self.structured is not _UNSET


Scripted = Reply | Fault
Handler = Callable[[RecordedRequest], Reply | Fault | None]


class Scripts:
    """Queued items and handlers, matched against route names by selector."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[tuple[str, Scripted]] = []
        self._handlers: list[tuple[str, Handler]] = []

    def add(self, selector: str, items: Sequence[Scripted]) -> None:
        for item in items:
            if not isinstance(item, (Reply, Fault)):
                raise TypeError(f"script items are Reply or Fault objects, got {item!r}")
        with self._lock:
            self._queue.extend((selector, item) for item in items)

    def on(self, selector: str, handler: Handler | None) -> None:
        with self._lock:
            self._handlers = [(s, h) for s, h in self._handlers if s != selector]
            if handler is not None:
                self._handlers.insert(0, (selector, handler))

    def pending(self, selector: str | None = None) -> list[tuple[str, Scripted]]:
        with self._lock:
            return [
                (s, item)
                for s, item in self._queue
                if selector is None or selector_matches(selector, s) or s == selector
            ]

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._handlers.clear()

    def take(self, route: str, generates: bool) -> Scripted | None:
        """The first queued item for ``route`` (a Reply only on generation routes), removed."""
        if not self._queue:
            return None
        with self._lock:
            for index, (selector, item) in enumerate(self._queue):
                if selector_matches(selector, route) and (generates or isinstance(item, Fault)):
                    del self._queue[index]
                    return item
        return None

    def handler_for(self, route: str) -> Handler | None:
        if not self._handlers:
            return None
        with self._lock:
            for selector, handler in self._handlers:
                if selector_matches(selector, route):
                    return handler
        return None
