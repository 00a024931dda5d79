"""`PolluxTokenEstimator`: input tokens of a bridge payload, for a token budget's precheck."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from typing import Any

from pollux import Source
from pollux.media_tokens import image_tokens, source_tokens

__all__ = ["PolluxTokenEstimator", "remember_media", "sources_tokens"]

# What this process read of a media source's content (an image's size, a clip's duration, as
# the tokens its provider and model charge for it), by the content hash a payload names it by:
# a payload records a source's type and bytes, not its pixels or seconds, and must not (it is
# the call's identity). A payload estimated in a process that did not build it (a replayed or
# imported one) finds nothing here and is counted by the rules that need no content.
_KNOWN: dict[tuple[str, str, str | None], int | None] = {}  # None: nothing read (bytes count)
_KNOWN_LOCK = threading.Lock()
_KNOWN_MAX = 4096


def remember_media(source: Source, identity_hash: str, provider: str, model: str | None) -> None:
    """Remember what a media source costs on ``provider``'s ``model``, by its payload hash."""
    key = (identity_hash, provider, model)
    if key in _KNOWN:
        return
    tokens = source_tokens(source, provider, model)
    with _KNOWN_LOCK:
        if len(_KNOWN) >= _KNOWN_MAX:
            _KNOWN.clear()  # a bound, not an LRU: the next payloads read their sources again
        _KNOWN[key] = tokens


def sources_tokens(payload: Mapping[str, Any], chars_per_token: float) -> int:
    """The input tokens of a bridge payload's sources.

    A media source this process read when it built the payload counts what its provider and
    model charge for its pixels or seconds (`pollux.media_tokens.source_tokens`); another image
    the most one image costs there; any other source its bytes at ``chars_per_token``.
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
    model = model if isinstance(model, str) else None
    chars = tokens = 0
    for source in sources:
        if not isinstance(source, Mapping):
            continue
        known = _KNOWN.get((str(source.get("hash")), provider, model))
        if known is not None:
            tokens += known
            continue
        mime = source.get("mime_type")
        if isinstance(mime, str) and mime.lower().startswith("image/") and "+xml" not in mime:
            tokens += image_tokens(provider, model)
            continue
        size = source.get("bytes")
        if isinstance(size, int) and not isinstance(size, bool):
            chars += max(0, size)
    return tokens + math.ceil(chars / chars_per_token)


class PolluxTokenEstimator:
    """Estimates the input tokens of a bridge payload, for ``TokenMeter(estimator=...)``.

    It counts the characters of the instructions, the prompt, the portable history and the tool
    results plus the bytes of text sources and documents, at ``chars_per_token`` characters per
    token (the common rule of thumb for English text), and media by what the call's provider and
    model charge for its pixels or seconds (`pollux.media_tokens`), read when the bridge built
    the payload in this process; an image it did not read counts the most one image costs
    there, other media its bytes. It does not see a continuation's earlier turns (the payload
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
