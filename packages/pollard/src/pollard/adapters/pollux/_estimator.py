"""`PolluxTokenEstimator`: input tokens of a bridge payload, for a token budget's precheck."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pollux.image_tokens import image_tokens

__all__ = ["PolluxTokenEstimator", "sources_tokens"]


def sources_tokens(payload: Mapping[str, Any], chars_per_token: float) -> int:
    """The input tokens of a bridge payload's sources.

    An image counts the most one image costs on the payload's provider and model
    (`pollux.image_tokens`: the payload records a source's type and bytes, not its size in
    pixels); any other source its bytes at ``chars_per_token``.
    """
    env = payload.get("environment")
    sources = env.get("sources") if isinstance(env, Mapping) else None
    if not sources:
        return 0
    extra = payload.get("_pollard")
    model = extra.get("pricing_model") if isinstance(extra, Mapping) else None
    model = model if isinstance(model, str) else payload.get("model")
    provider = payload.get("provider")
    provider = provider if isinstance(provider, str) else ""
    chars = tokens = 0
    for source in sources:
        if not isinstance(source, Mapping):
            continue
        mime = source.get("mime_type")
        if isinstance(mime, str) and mime.lower().startswith("image/"):
            tokens += image_tokens(provider, model if isinstance(model, str) else None)
            continue
        size = source.get("bytes")
        if isinstance(size, int) and not isinstance(size, bool):
            chars += max(0, size)
    return tokens + math.ceil(chars / chars_per_token)


class PolluxTokenEstimator:
    """Estimates the input tokens of a bridge payload, for ``TokenMeter(estimator=...)``.

    It counts the characters of the instructions, the prompt, the portable history and the tool
    results plus the bytes of the sources other than images, at ``chars_per_token`` characters
    per token (the common rule of thumb for English text), and each image at the most one image
    costs on the call's provider and model (`pollux.image_tokens`: a provider counts an image
    by its pixels, not its bytes). It does not see a continuation's earlier turns (the payload
    holds only their digest) or provider-added text, so it is an approximation.
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
        for key in ("history", "tool_results"):
            value = turn.get(key)
            if value:
                chars += len(json.dumps(value, ensure_ascii=False))
        return math.ceil(chars / self.chars_per_token) + sources_tokens(
            payload, self.chars_per_token
        )

    def __repr__(self) -> str:
        return f"PolluxTokenEstimator(chars_per_token={self.chars_per_token})"
