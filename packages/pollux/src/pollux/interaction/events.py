"""Event: one step in the timeline of a streamed interaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from pollux.errors import ConfigurationError

from ._json import check_fields, describe, get_opt_str, get_str, require_mapping
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


_DELTA_TYPES = frozenset({"text_delta", "reasoning_delta"})


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
        """Validate the event type and the type of each facet."""
        if (
            self.text.__class__ is str
            and self.delta is None
            and self.tool_call is None
            and self.usage is None
            and self.finish_reason is None
            and self.output is None
            and self.type in _DELTA_TYPES
        ):
            # A text or reasoning delta, most of a stream's events: nothing else to check, and
            # the full checks below cost as much per event as the rest of pollux's stream work.
            return
        if self.type not in EVENT_TYPES:
            raise ConfigurationError(
                f"Unknown event type: {describe(self.type)}",
                hint="Use one of: " + ", ".join(EVENT_TYPES) + ".",
            )
        hint = "Set only the facet that matches the event type, with its pollux value type."
        check_fields(self, {"text": "str", "finish_reason": "str?"}, hint=hint)
        facets: tuple[tuple[str, object, type], ...] = (
            ("delta", self.delta, ToolCallDelta),
            ("tool_call", self.tool_call, ToolCall),
            ("usage", self.usage, Usage),
            ("output", self.output, Output),
        )
        for name, value, expected in facets:
            if value is not None and not isinstance(value, expected):
                raise ConfigurationError(
                    f"Event.{name} must be a {expected.__name__} or None, got "
                    f"{type(value).__name__}",
                    hint=hint,
                )

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dict (unset facets omitted)."""
        payload: dict[str, Any] = {"type": self.type}
        if self.text:
            payload["text"] = self.text
        if self.delta is not None:
            payload["delta"] = self.delta.to_jsonable()
        if self.tool_call is not None:
            payload["tool_call"] = self.tool_call.to_jsonable()
        if self.usage is not None:
            payload["usage"] = self.usage.to_jsonable()
        if self.finish_reason is not None:
            payload["finish_reason"] = self.finish_reason
        if self.output is not None:
            payload["output"] = self.output.to_jsonable()
        return payload

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any]) -> Event:
        """Rebuild an event from :meth:`to_jsonable` output (for recorded streams).

        Raises:
            ConfigurationError: The data is not a serialized event.
        """
        data = require_mapping(data, "Event")
        delta, tool_call, usage, output = (
            data.get(key) for key in ("delta", "tool_call", "usage", "output")
        )
        return cls(
            type=cast(EventType, get_str(data, "type", "Event")),
            text=get_str(data, "text", "Event", default=""),
            delta=None if delta is None else ToolCallDelta.from_jsonable(delta),
            tool_call=None if tool_call is None else ToolCall.from_jsonable(tool_call),
            usage=None if usage is None else Usage.from_dict(usage),
            finish_reason=get_opt_str(data, "finish_reason", "Event"),
            output=None if output is None else Output.from_jsonable(output),
        )
