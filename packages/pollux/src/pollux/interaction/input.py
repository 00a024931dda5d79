"""Input: one model turn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pollux.errors import ConfigurationError

from .continuation import Continuation
from .messages import Message
from .tools import ToolResult

__all__ = ["Input"]


@dataclass(frozen=True, slots=True)
class Input:
    """One model turn: user content plus optional prior state and tool results.

    ``history`` and ``tool_results`` accept any ordered sequence and are frozen to tuples.
    Content is text; media belongs on the :class:`Environment` as sources.

    Args:
        content: The user's message for this turn.
        history: Portable prior turns (application-authored). Exclusive with ``continuation``.
        continuation: The previous output's :attr:`Output.continuation`.
        tool_results: Results for the tool calls of the previous turn.

    Raises:
        ConfigurationError: Both ``history`` and ``continuation``, neither content nor tool
            results, or a field of the wrong type.

    Example:
        >>> Input("Summarize the document.").content
        'Summarize the document.'
    """

    content: str | None = None
    history: Sequence[Message] | None = None
    continuation: Continuation | None = None
    tool_results: Sequence[ToolResult] = ()

    def __post_init__(self) -> None:
        """Freeze sequences to tuples and validate that the turn is well formed."""
        if self.content is not None and not isinstance(self.content, str):
            raise ConfigurationError(
                f"Input content must be text, got {type(self.content).__name__}",
                hint="Put media on the Environment as Source values.",
            )
        if self.history is not None:
            history = _tuple_of(self.history, Message, "history", "Pass a list of Message values.")
            object.__setattr__(self, "history", history)
        if self.continuation is not None and not isinstance(self.continuation, Continuation):
            raise ConfigurationError(
                f"continuation must be a Continuation, got {type(self.continuation).__name__}",
                hint="Pass output.continuation, or Continuation.from_jsonable(saved).",
            )
        results = _tuple_of(
            self.tool_results,
            ToolResult,
            "tool_results",
            "Pass a list of ToolResult values, one per tool call.",
        )
        object.__setattr__(self, "tool_results", results)

        if self.history is not None and self.continuation is not None:
            raise ConfigurationError(
                "history and continuation are mutually exclusive",
                hint="Use exactly one prior-turn state source per interaction.",
            )
        has_content = bool(self.content and self.content.strip())
        if not has_content and not results:
            raise ConfigurationError(
                "Input has no user content and no tool results",
                hint="Provide content for a new turn, or tool_results to continue from prior "
                "tool calls.",
            )


def _tuple_of(value: object, kind: type, what: str, hint: str) -> tuple[object, ...]:
    if type(value) is tuple:
        # The common case (the empty default of every prompt of a fan-out) skips the ABC check.
        items: tuple[object, ...] = value
    elif isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigurationError(
            f"{what} must be a sequence, got {type(value).__name__}", hint=hint
        )
    else:
        items = tuple(value)
    for item in items:
        if not isinstance(item, kind):
            raise ConfigurationError(
                f"{what} must contain {kind.__name__} values, got {type(item).__name__}",
                hint=hint,
            )
    return items
