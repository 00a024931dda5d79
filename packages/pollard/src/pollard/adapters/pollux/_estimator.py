"""`PolluxTokenEstimator`: input tokens of a bridge payload, for a token budget's precheck."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["PolluxTokenEstimator"]


class PolluxTokenEstimator:
    """Estimates the input tokens of a bridge payload, for ``TokenMeter(estimator=...)``.

    It counts the characters of the instructions, the prompt, the portable history and the tool
    results plus the bytes of the sources, at ``chars_per_token`` characters per token (the
    common rule of thumb for English text). It does not see a continuation's earlier turns (the
    payload holds only their digest), images or provider-added text, so it is an approximation.
    Given to a meter it makes the budget a hard cap: each call holds this estimate plus its
    ``max_tokens`` (or the meter's ``reserved_output_tokens``, a default cap) until it settles.

    Args:
        chars_per_token: Characters (or source bytes) per token.

    Example:
        >>> from pollard.meters import TokenMeter
        >>> meter = TokenMeter(PolluxTokenEstimator(), reserved_output_tokens=256)
    """

    def __init__(self, chars_per_token: float = 4.0) -> None:
        if isinstance(chars_per_token, bool) or not (
            isinstance(chars_per_token, (int, float)) and chars_per_token > 0
        ):
            raise ValueError("chars_per_token must be a number > 0")
        self.chars_per_token = float(chars_per_token)

    def estimate_input_tokens(self, payload: Any) -> int:
        """Return the estimated input tokens of a payload built by this module (0 otherwise)."""
        if not isinstance(payload, Mapping):
            return 0
        env = payload.get("environment")
        turn = payload.get("input")
        env = env if isinstance(env, Mapping) else {}
        turn = turn if isinstance(turn, Mapping) else {}
        chars = 0
        for text in (env.get("instructions"), turn.get("content")):
            if isinstance(text, str):
                chars += len(text)
        for source in env.get("sources") or ():
            size = source.get("bytes") if isinstance(source, Mapping) else None
            if isinstance(size, int) and not isinstance(size, bool):
                chars += size
        for key in ("history", "tool_results"):
            value = turn.get(key)
            if value:
                chars += len(json.dumps(value, ensure_ascii=False))
        return math.ceil(chars / self.chars_per_token)

    def __repr__(self) -> str:
        return f"PolluxTokenEstimator(chars_per_token={self.chars_per_token})"
