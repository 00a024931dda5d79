""":class:`GeminiReply`: a :class:`Reply` with the outcomes only Gemini reports."""

from __future__ import annotations

from dataclasses import dataclass

from pollux.testing._emulator._script import Reply


@dataclass(frozen=True, slots=True)
class GeminiReply(Reply):
    """A scripted Gemini answer with a finish reason or a blocked prompt.

    Every :class:`Reply` field applies; other wires treat it as a plain :class:`Reply`.

    Args:
        finish_reason: The candidate's ``finishReason``, sent verbatim (``"SAFETY"``,
            ``"RECITATION"``, ``"MALFORMED_FUNCTION_CALL"``...). ``SAFETY``,
            ``PROHIBITED_CONTENT``, ``BLOCKLIST`` and ``SPII`` answers carry no content, as on
            the real API.
        block_reason: Block the prompt: no candidates, ``promptFeedback.blockReason`` set
            (``"SAFETY"``, ``"OTHER"``, ``"BLOCKLIST"``, ``"PROHIBITED_CONTENT"``).

    Example:
        >>> GeminiReply(finish_reason="SAFETY").finish_reason
        'SAFETY'
    """

    finish_reason: str | None = None
    block_reason: str | None = None


__all__ = ["GeminiReply"]
