"""Provider quotas: pace every call to a requests-per-window and tokens-per-window limit.

A provider account has one rate limit however many workers call it. A quota declared on
:class:`~pollux.Config` (``Config(quota=...)``) is consulted by every attempt of every call made
with that config (``run``, ``run_many``, ``interact``, ``stream``, and so the ``pollux`` command
and the pollard bridge): the attempt **waits** until the window has room, then dispatches. Its
worst case (the input estimate plus the output cap) is held while it is in flight and settled to
the tokens the provider reported when the answer arrives, so concurrent callers cannot all pass
one check. A 429 tells the quota to pause, which slows every caller sharing it, not only the one
that was told.

Two implementations ship:

* :class:`LocalQuota`: one process (any number of sessions and tasks in it), in memory.
* ``pollard.adapters.pollux.SharedQuota``: many processes and hosts, backed by a pollard store
  (SQLite for one machine, PostgreSQL or Redis for many), serving the attempts that wait in
  arrival order across all of them; see the guide "Many workers, one quota".

Anything with the :class:`CallQuota` methods works too.

Example:
    >>> import asyncio
    >>> from pollux import Config, LocalQuota, run_many
    >>> quota = LocalQuota(requests_per_minute=600, tokens_per_minute=200_000)
    >>> config = Config(provider="openai", model="gpt-5-nano", use_mock=True, quota=quota)
    >>> len(asyncio.run(run_many(["A?", "B?"], config=config)).answers)
    2
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .errors import APIError, ConfigurationError
from .interaction._json import describe

__all__ = [
    "DEFAULT_OUTPUT_TOKENS",
    "CallQuota",
    "LocalQuota",
    "QuotaPermit",
    "QuotaRequest",
    "key_id",
]

#: The output cap a quota reserves for a call that sets no ``max_tokens``.
DEFAULT_OUTPUT_TOKENS = 4096


def key_id(api_key: str | None) -> str | None:
    """A short, stable, non-reversible name for an API key (never the key itself).

    Quotas that are per API key use it as the window's name, so the key reaches no store.
    """
    if not api_key:
        return None
    return "key-" + hashlib.sha256(b"pollux/quota-key\n" + api_key.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class QuotaRequest:
    """What one attempt asks of a quota.

    Attributes:
        provider: The provider name (``"openai"``, ...).
        model: The model name (None where a local server picks it).
        key_id: :func:`key_id` of the API key the call uses (None without a key).
        tokens: The worst case to hold while the attempt is in flight: the input estimate plus
            the output cap (``max_tokens``, or the quota's default cap).
        deadline: The ``time.monotonic()`` instant by which the attempt must be dispatched
            (the call's ``RetryPolicy.max_elapsed_s``), or None to wait as long as needed.
        media_tokens: The part of ``tokens`` estimated from the bytes of images, PDFs, audio
            and video, which providers count far lower than four bytes per token (a 300 KB
            image is about 79,000 tokens by its bytes, at most a few thousand to a provider). A
            quota whose token limit is below ``tokens`` but not below ``tokens -
            media_tokens`` holds its whole limit instead of refusing the call: the attempt
            waits for an empty window and goes alone (see `fit_to_limit`).
    """

    provider: str
    model: str | None
    key_id: str | None
    tokens: int
    deadline: float | None = None
    media_tokens: int = 0


class QuotaPermit(Protocol):
    """An admitted attempt's hold on a quota.

    Attributes:
        waited_s: How long the attempt waited for room before it was admitted.
    """

    waited_s: float

    async def settle(self, tokens: int | None) -> None:
        """Replace the held worst case with the tokens the provider reported.

        Args:
            tokens: The attempt's input plus output tokens; None when unknown (the worst case
                stays counted for the rest of the window, which errs on the safe side).
        """
        ...


@runtime_checkable
class CallQuota(Protocol):
    """A rate limit every attempt waits for (see the module docs)."""

    async def acquire(self, request: QuotaRequest) -> QuotaPermit:
        """Wait until the window has room for ``request``, then hold it.

        Raises:
            pollux.RateLimitError: The room would come only after ``request.deadline``.
            pollux.APIError: The quota cannot be checked (a shared store unreachable).
        """
        ...

    async def pause(self, request: QuotaRequest, seconds: float) -> None:
        """Hold every caller back for ``seconds`` (the provider answered 429)."""
        ...


def check_limit(name: str, value: object, *, owner: str = "") -> int | None:
    """A quota limit (an integer >= 1, or None for no limit), or a ConfigurationError.

    Args:
        name: The parameter's name, for the message.
        value: The value given.
        owner: What the parameter belongs to, prefixed to the message (``"SharedQuota "``).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{owner}{name} must be an integer >= 1 or None, got {describe(value)}",
            hint=f"Pass the provider's limit, for example {name}=500, or None for no limit.",
        )
    return value


# The longest window, pause or lease a quota takes: a day (requests per day is the longest
# limit providers publish). Longer is a unit mistake (milliseconds for seconds), and would
# also overflow a Redis key's expiry.
MAX_SECONDS = 86_400.0


def check_window(value: object, name: str = "window_s") -> float:
    """A duration in seconds (a finite number > 0, at most a day), or a ConfigurationError.

    Args:
        value: The duration given.
        name: The parameter's name, for the message (``window_s``, ``poll_s``, ...).
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
        or value > MAX_SECONDS
    ):
        example = "window_s=60.0 for per-minute limits" if name == "window_s" else f"{name}=5.0"
        raise ConfigurationError(
            f"{name} must be a number of seconds > 0 and at most a day (86400), "
            f"got {describe(value)}",
            hint=f"Pass {example}.",
        )
    return float(value)


def check_output_tokens(value: object) -> int:
    """The default output cap (an integer >= 1), or a ConfigurationError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"default_output_tokens must be an integer >= 1, got {describe(value)}",
            hint="Pass the output cap to reserve when a call sets no max_tokens, e.g. 4096.",
        )
    return value


def too_large(request: QuotaRequest, limit: int, window_s: float) -> APIError:
    """The error of a call whose worst case alone exceeds the token limit (it can never fit)."""
    media = max(0, request.media_tokens)
    besides = " besides its media" if media else ""
    return APIError(
        f"quota: this call may use {request.tokens - media:,} tokens{besides}, more than the "
        f"quota's {limit:,} tokens per {window_s:g} s window, so it can never be admitted",
        hint="Set a smaller max_tokens on the call, or raise the quota's tokens limit to the "
        "provider's real one.",
        retryable=False,
        error_category="quota",
    )


def fit_to_limit(request: QuotaRequest, limit: int | None, window_s: float) -> QuotaRequest:
    """``request`` as a quota with token limit ``limit`` holds it.

    A worst case above the limit that only media bytes put there (``media_tokens``) holds the
    whole limit: the call waits for an empty window and goes alone, and its answer settles the
    hold to what the provider counted. One above the limit without them can never be admitted.

    Raises:
        APIError: The worst case less its media estimate exceeds ``limit`` (`too_large`).
    """
    if limit is None or request.tokens <= limit:
        return request
    media = max(0, request.media_tokens)
    if request.tokens - media > limit:
        raise too_large(request, limit, window_s)
    return dataclasses.replace(request, tokens=limit, media_tokens=media - (request.tokens - limit))


def past_deadline(wait_s: float | None) -> APIError:
    """The error of an attempt that would wait past its call's deadline.

    Args:
        wait_s: When the window has room again, if the quota knows (None for a shared window,
            where other workers' answers decide it).
    """
    from .errors import RateLimitError

    when = (
        f"has room again in {wait_s:.2f} s, after this call's deadline"
        if wait_s is not None
        else "had no room before this call's deadline"
    )
    return RateLimitError(
        f"quota: the window {when} (RetryPolicy.max_elapsed_s)",
        hint="Raise RetryPolicy.max_elapsed_s (None waits as long as the quota needs), lower "
        "request_concurrency, or run fewer workers on this quota.",
        retryable=False,
        retry_after_s=wait_s,
        error_category="rate_limit",
    )


class _Window:
    """One limit's sliding window: settled amounts (stamped when they settled) plus in-flight.

    An in-flight attempt counts from admission until it settles, and what it used then counts
    for one more window from that moment: the provider saw the request at some instant before
    its answer, so its own window forgets it no later than this one does, whatever the latency.
    """

    __slots__ = ("_entries", "_seconds", "_sum", "inflight", "limit")

    def __init__(self, limit: int, seconds: float) -> None:
        self.limit = limit
        self._seconds = seconds
        self._entries: collections.deque[tuple[float, float]] = collections.deque()
        self._sum = 0.0
        self.inflight = 0.0

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and entries[0][0] <= now - self._seconds:
            self._sum -= entries.popleft()[1]

    def wait_for(self, amount: float, now: float) -> float | None:
        """Seconds until ``amount`` fits (0: now; None: only when an in-flight one settles)."""
        self._expire(now)
        excess = self._sum + self.inflight + amount - self.limit
        if excess <= 0:
            return 0.0
        freed = 0.0
        for stamp, held in self._entries:
            freed += held
            if freed >= excess:
                return max(0.0, stamp + self._seconds - now)
        return None

    def settle(self, held: float, used: float, now: float) -> None:
        self.inflight = max(0.0, self.inflight - held)
        if used > 0:
            self._entries.append((now, used))
            self._sum += used


class _LocalPermit:
    __slots__ = ("_quota", "_tokens", "tokens_held", "waited_s")

    def __init__(self, quota: LocalQuota, tokens: int, waited_s: float) -> None:
        self._quota = quota
        self._tokens: int | None = tokens
        self.tokens_held = tokens  # after `fit_to_limit`: what the window counts for it
        self.waited_s = waited_s

    async def settle(self, tokens: int | None) -> None:
        held, self._tokens = self._tokens, None
        if held is not None:
            self._quota._settle(held, held if tokens is None else max(0, tokens))
            await self._quota._wake()


class LocalQuota:
    """A quota for one process: every Session and task using it shares one window.

    Args:
        requests_per_minute: The most attempts dispatched inside any window (None: no limit).
        tokens_per_minute: The most tokens inside any window (None: no limit). An attempt holds
            its worst case until it settles to the tokens the provider reported.
        window_s: The window length in seconds (60 for per-minute limits).
        default_output_tokens: The output cap held for a call that sets no ``max_tokens``.
        clock: Monotonic clock (tests pass a fake one).

    Raises:
        ConfigurationError: A limit that is not an integer >= 1, or a bad window.
    """

    def __init__(
        self,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        *,
        window_s: float = 60.0,
        default_output_tokens: int = DEFAULT_OUTPUT_TOKENS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.requests_per_minute = check_limit("requests_per_minute", requests_per_minute)
        self.tokens_per_minute = check_limit("tokens_per_minute", tokens_per_minute)
        self.window_s = check_window(window_s)
        self.default_output_tokens = check_output_tokens(default_output_tokens)
        self._clock = clock
        self._requests = (
            _Window(self.requests_per_minute, self.window_s) if self.requests_per_minute else None
        )
        self._tokens = (
            _Window(self.tokens_per_minute, self.window_s) if self.tokens_per_minute else None
        )
        self._paused_until = 0.0
        # Admission in arrival order, woken when an attempt settles. The condition belongs to
        # the loop that made it (a second asyncio.run gets a new one).
        self._cond: tuple[asyncio.AbstractEventLoop, asyncio.Condition] | None = None

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._cond is None or self._cond[0] is not loop:
            self._cond = (loop, asyncio.Condition())
        return self._cond[1]

    def _wait_s(self, tokens: int, now: float) -> float | None:
        waits: list[float | None] = [max(0.0, self._paused_until - now)]
        if self._requests is not None:
            waits.append(self._requests.wait_for(1, now))
        if self._tokens is not None:
            waits.append(self._tokens.wait_for(tokens, now))
        if any(wait is None for wait in waits):
            return None
        return max(wait for wait in waits if wait is not None)

    async def acquire(self, request: QuotaRequest) -> QuotaPermit:
        """Wait for room, then hold one request and ``request.tokens`` (see `CallQuota`)."""
        if self._tokens is not None:
            request = fit_to_limit(request, self._tokens.limit, self.window_s)
        cond = self._condition()
        start = self._clock()
        waited = False
        async with cond:
            while True:
                now = self._clock()
                wait = self._wait_s(request.tokens, now)
                if wait is not None and wait <= 0:
                    break
                left = None if request.deadline is None else request.deadline - now
                if left is not None and (wait is None or wait > left):
                    if wait is not None or left <= 0:
                        raise past_deadline(wait)
                    wait = left
                waited = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(cond.wait(), timeout=wait)
            if self._requests is not None:
                self._requests.inflight += 1
            if self._tokens is not None:
                self._tokens.inflight += request.tokens
        waited_s = max(0.0, self._clock() - start) if waited else 0.0
        return _LocalPermit(self, request.tokens, waited_s)

    def _settle(self, held: int, used: int) -> None:
        now = self._clock()
        if self._requests is not None:
            self._requests.settle(1, 1, now)
        if self._tokens is not None:
            self._tokens.settle(held, used, now)

    async def _wake(self) -> None:
        cond = self._cond
        if cond is not None and cond[0] is asyncio.get_running_loop():
            async with cond[1]:
                cond[1].notify_all()

    @property
    def in_flight(self) -> tuple[int, int]:
        """``(requests, tokens)`` admitted and not yet settled (0 once every call returned)."""
        return (
            round(self._requests.inflight) if self._requests is not None else 0,
            round(self._tokens.inflight) if self._tokens is not None else 0,
        )

    async def pause(self, request: QuotaRequest, seconds: float) -> None:
        """Hold every caller back for ``seconds`` (a 429's requested pause)."""
        if math.isfinite(seconds) and seconds > 0:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    def __repr__(self) -> str:
        return (
            f"LocalQuota(requests_per_minute={self.requests_per_minute}, "
            f"tokens_per_minute={self.tokens_per_minute}, window_s={self.window_s:g})"
        )
