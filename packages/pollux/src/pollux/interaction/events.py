"""Event: one step in the timeline of a streamed interaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pollux.errors import ConfigurationError

from .output import Output, Usage
from .tools import ToolCall, ToolCallDelta

__all__ = ["EVENT_TYPES", "Event", "EventType"]

EventType = Literal[
    "start",
    "text_delta",
    "reasoning_delta",
    "tool_call_delta",
    "tool_call",
    "usage",
    "finish",
    "done",
]
"""The kinds of :class:`Event`, in timeline order."""

EVENT_TYPES: tuple[str, ...] = (
    "start",
    "text_delta",
    "reasoning_delta",
    "tool_call_delta",
    "tool_call",
    "usage",
    "finish",
    "done",
)


@dataclass(frozen=True, slots=True)
class Event:
    """One event in the timeline of a streamed interaction.

    Only the facet relevant to ``type`` is set: ``text`` for ``text_delta`` /
    ``reasoning_delta``, ``delta`` for ``tool_call_delta``, ``tool_call`` for ``tool_call``,
    ``usage`` for ``usage`` (cumulative), ``finish_reason`` for ``finish``, and ``output``
    for ``done``. The timeline is ``start``, deltas, assembled ``tool_call`` events,
    ``finish``, then ``done``.

    Example:
        >>> Event(type="text_delta", text="Hel").text
        'Hel'
    """

    type: EventType
    text: str = ""
    delta: ToolCallDelta | None = None
    tool_call: ToolCall | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    output: Output | None = None

    def __post_init__(self) -> None:
        """Validate the event type."""
        if self.type not in EVENT_TYPES:
            raise ConfigurationError(
                f"Unknown event type: {self.type!r}",
                hint="Use one of: " + ", ".join(EVENT_TYPES) + ".",
            )
