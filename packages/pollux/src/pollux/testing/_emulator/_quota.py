"""Provider rate limits: requests and tokens per window, answered with each provider's 429.

A real account has a requests-per-minute and a tokens-per-minute limit; a request over either is
answered with HTTP 429 and the headers that provider sends (OpenAI's and OpenRouter's
``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``, Gemini's ``RESOURCE_EXHAUSTED`` with a
``RetryInfo`` delay), all with ``retry-after``. Windows run on the wall clock (a rate limit is
about real time, unlike batch jobs on the virtual clock).

A request's tokens are counted the way providers count them against the limit before they know
the answer: the text it sends at four characters per token plus the output cap it asks for
(``max_tokens``, ``max_output_tokens``, ``max_completion_tokens`` or
``generationConfig.maxOutputTokens``); once answered, it counts the input and output tokens its
answer reports (a streamed answer keeps its estimate).
"""

from __future__ import annotations

import collections
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ._core import ApiError

__all__ = ["EmulatorQuota", "QuotaMeter", "rate_limit_error", "reported_tokens", "request_tokens"]

_MAX_WINDOW_S = 86_400.0  # as `pollux.quota.MAX_SECONDS`: no provider's window is longer


@dataclass(frozen=True, slots=True)
class EmulatorQuota:
    """A rate limit the emulator enforces on one wire's generate routes.

    Args:
        requests: The most requests inside any window (None: no limit).
        tokens: The most tokens inside any window (None: no limit).
        window_s: The window length in seconds (at most a day).

    Example:
        >>> EmulatorQuota(requests=60, tokens=100_000).window_s
        60.0
    """

    requests: int | None = None
    tokens: int | None = None
    window_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("requests", "tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"EmulatorQuota.{name} must be an integer or None")
            if value is not None and value < 1:
                raise ValueError(f"EmulatorQuota.{name} must be >= 1, got {value}")
        window = self.window_s
        if isinstance(window, bool) or not isinstance(window, (int, float)):
            raise ValueError("EmulatorQuota.window_s must be a number of seconds")
        if not (math.isfinite(window) and window > 0):
            raise ValueError(f"EmulatorQuota.window_s must be > 0, got {window!r}")
        if window > _MAX_WINDOW_S:  # a reset time past year 9999 cannot be written as a date
            raise ValueError(
                f"EmulatorQuota.window_s must be at most a day (86400), got {window!r}"
            )
        object.__setattr__(self, "window_s", float(window))

    def to_dict(self) -> dict[str, Any]:
        """The quota as JSON data (for an emulator in a child process)."""
        return {"requests": self.requests, "tokens": self.tokens, "window_s": self.window_s}


_CAP_KEYS = ("max_tokens", "max_output_tokens", "max_completion_tokens")
# Strings that name things rather than say them: not counted as prompt text.
_NAMING_KEYS = frozenset({"model", "role", "type", "id", "call_id", "tool_call_id", "mime_type"})


def _text_chars(value: Any, key: str = "") -> int:
    if isinstance(value, str):
        return 0 if key in _NAMING_KEYS else len(value)
    if isinstance(value, Mapping):
        return sum(_text_chars(item, str(name)) for name, item in value.items())
    if isinstance(value, list):
        return sum(_text_chars(item, key) for item in value)
    return 0


def request_tokens(body: bytes, parsed: Any) -> int:
    """The tokens a request counts against a limit before its answer is known.

    The text it sends at four characters per token (the estimate providers document for their
    limiters) plus the output cap it asks for; a body that is not JSON counts its bytes.
    """
    cap = 0
    if isinstance(parsed, Mapping):
        for key in _CAP_KEYS:
            value = parsed.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                cap = max(cap, value)
        generation = parsed.get("generationConfig") or parsed.get("generation_config")
        if isinstance(generation, Mapping):
            value = generation.get("maxOutputTokens", generation.get("max_output_tokens"))
            if isinstance(value, int) and not isinstance(value, bool):
                cap = max(cap, value)
        chars = _text_chars(parsed)
    else:
        chars = len(body)
    return math.ceil(chars / 4) + cap


def reported_tokens(body: bytes) -> int | None:
    """The input plus output tokens a JSON answer reports in its usage (None: not reported)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, Mapping):
        return None
    usage = data.get("usage")
    if isinstance(usage, Mapping):
        pairs = (("input_tokens", "output_tokens"), ("prompt_tokens", "completion_tokens"))
        for first, second in pairs:
            a, b = usage.get(first), usage.get(second)
            if isinstance(a, int) and isinstance(b, int):
                return a + b
    meta = data.get("usageMetadata")
    if isinstance(meta, Mapping):
        counts = [
            meta.get(key)
            for key in ("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount")
        ]
        return sum(c for c in counts if isinstance(c, int)) or None
    return None


class QuotaMeter:
    """One wire's sliding windows, and the 429 it answers when a request does not fit.

    A request counts its estimate (:func:`request_tokens`) while it is answered, then what its
    answer reports in its usage (a streamed answer keeps its estimate), stamped at its arrival.
    """

    def __init__(self, quota: EmulatorQuota, clock: Callable[[], float] = time.monotonic) -> None:
        self.quota = quota
        self._clock = clock
        self._events: collections.deque[list[float]] = collections.deque()
        self._tokens = 0.0
        self.admitted = 0
        self.refused = 0
        # Every request checked: [monotonic arrival, tokens counted (settled), admitted].
        self.log: list[list[Any]] = []

    def _expire(self, now: float) -> None:
        events = self._events
        while events and events[0][0] <= now - self.quota.window_s:
            self._tokens -= events.popleft()[1]

    def _reset_s(self, now: float, need_requests: int, need_tokens: float) -> float:
        # When enough of the window has expired for the request to fit.
        freed_tokens = 0.0
        for freed_requests, (stamp, tokens) in enumerate(self._events, start=1):
            freed_tokens += tokens
            if freed_requests >= need_requests and freed_tokens >= need_tokens:
                return max(0.001, stamp + self.quota.window_s - now)
        return self.quota.window_s

    def admit(self, tokens: int) -> tuple[list[float] | None, dict[str, Any] | None]:
        """Count the request: ``(its entry, None)``, or ``(None, the refusal's figures)``."""
        now = self._clock()
        self._expire(now)
        quota = self.quota
        over_requests = len(self._events) + 1 - quota.requests if quota.requests is not None else 0
        over_tokens = self._tokens + tokens - quota.tokens if quota.tokens is not None else 0
        if over_requests <= 0 and over_tokens <= 0:
            entry = [now, float(tokens)]
            self._events.append(entry)
            self._tokens += tokens
            self.admitted += 1
            self.log.append([now, entry, True])
            return entry, None
        self.refused += 1
        self.log.append([now, [now, float(tokens)], False])
        reset = self._reset_s(now, max(0, over_requests), max(0, over_tokens))
        return None, {
            "limit_requests": quota.requests,
            "remaining_requests": None
            if quota.requests is None
            else max(0, quota.requests - len(self._events)),
            "limit_tokens": quota.tokens,
            "remaining_tokens": None
            if quota.tokens is None
            else max(0, int(quota.tokens - self._tokens)),
            "reset_s": reset,
            "which": "requests" if over_requests > 0 else "tokens",
        }

    def settle(self, entry: list[float], tokens: int) -> None:
        """The answer reported ``tokens``: count those instead of the estimate."""
        if any(event is entry for event in self._events):
            self._tokens += tokens - entry[1]
        entry[1] = float(tokens)


def _duration(seconds: float) -> str:
    # OpenAI spells resets as Go durations: "1s", "6m0s", "20ms".
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    minutes, secs = divmod(whole, 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def rate_limit_error(wire: str, figures: Mapping[str, Any]) -> ApiError:
    """The 429 ``wire`` answers with, carrying that provider's rate-limit headers."""
    reset = float(figures["reset_s"])
    retry_after = str(max(1, math.ceil(reset)))
    which = figures["which"]
    headers: dict[str, str] = {"retry-after": retry_after}
    if wire == "anthropic":
        at = datetime.fromtimestamp(time.time() + reset, tz=timezone.utc)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        for kind in ("requests", "tokens"):
            if figures[f"limit_{kind}"] is not None:
                headers[f"anthropic-ratelimit-{kind}-limit"] = str(figures[f"limit_{kind}"])
                headers[f"anthropic-ratelimit-{kind}-remaining"] = str(figures[f"remaining_{kind}"])
                headers[f"anthropic-ratelimit-{kind}-reset"] = stamp
        return ApiError(
            429,
            f"This request would exceed the rate limit for your organization of "
            f"{figures[f'limit_{which}']} {which} per minute.",
            error_type="rate_limit_error",
            headers=headers,
        )
    if wire == "gemini":
        from .wires._gemini_common import TYPE_PREFIX, GoogleError

        details: list[dict[str, Any]] = [
            {
                "@type": TYPE_PREFIX + "QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": f"generativelanguage.googleapis.com/generate_content_"
                        f"{'requests' if which == 'requests' else 'input_token_count'}",
                        "quotaId": f"GenerateContent{which.title()}PerMinutePerProject",
                        "quotaValue": str(figures[f"limit_{which}"]),
                    }
                ],
            },
            {"@type": TYPE_PREFIX + "RetryInfo", "retryDelay": f"{math.ceil(reset)}s"},
        ]
        return GoogleError(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            details=details,
            headers=headers,
        )
    for kind in ("requests", "tokens"):
        if figures[f"limit_{kind}"] is not None:
            headers[f"x-ratelimit-limit-{kind}"] = str(figures[f"limit_{kind}"])
            headers[f"x-ratelimit-remaining-{kind}"] = str(figures[f"remaining_{kind}"])
            headers[f"x-ratelimit-reset-{kind}"] = _duration(reset)
    return ApiError(
        429,
        f"Rate limit reached for {which} per min: Limit {figures[f'limit_{which}']}. "
        f"Please try again in {_duration(reset)}.",
        error_type=which,
        code="rate_limit_exceeded",
        headers=headers,
    )
