"""``AnthropicReply``: a :class:`Reply` with the Messages API's own knobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pollux.testing._emulator._script import Reply

__all__ = ["STOP_REASONS", "AnthropicReply"]

STOP_REASONS = (
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
)


@dataclass(frozen=True, slots=True)
class AnthropicReply(Reply):
    """A scripted answer for the ``"anthropic"`` wire, with what only the Messages API has.

    Every :class:`Reply` field works as there; anything left unset comes from the default model.

    Args:
        stop_reason: Force the ``stop_reason`` (``"refusal"``, ``"pause_turn"``,
            ``"stop_sequence"``, ...); by default it follows from the answer.
        stop_sequence: The stop sequence reported with ``stop_reason="stop_sequence"`` (the
            request's first one when omitted).
        redacted_thinking: Texts sent as ``redacted_thinking`` blocks (opaque ``data``), after
            the thinking block.
        cache_write_tokens: Override ``cache_creation_input_tokens`` (``cached_tokens``
            overrides ``cache_read_input_tokens``).

    Example:
        >>> AnthropicReply("No.", stop_reason="refusal").stop_reason
        'refusal'
    """

    stop_reason: str | None = None
    stop_sequence: str | None = None
    redacted_thinking: Sequence[str] = ()
    cache_write_tokens: int | None = None

    def __post_init__(self) -> None:
        Reply.__post_init__(self)
        object.__setattr__(self, "redacted_thinking", tuple(self.redacted_thinking))
        if self.stop_reason is not None and self.stop_reason not in STOP_REASONS:
            raise ValueError(
                f"unknown stop_reason {self.stop_reason!r}; use one of {', '.join(STOP_REASONS)}"
            )
