"""The one retry loop: full jitter, Retry-After honoured, a wall-clock deadline.

Providers never retry (SDK-internal retries are off), so the attempts a user configures in
:class:`~pollux.RetryPolicy` are the attempts that happen, and ``max_elapsed_s`` bounds them all.
Only errors that say so are retried: an :class:`~pollux.errors.APIError` with ``retryable=True``
whose category is not ``context_overflow`` or ``auth_refreshable``. Cancellation is never retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from pollux.errors import APIError, InternalError, PolluxError, RateLimitError
from pollux.retry import RetryPolicy

__all__ = ["Pacer", "is_retryable", "raise_stamped", "stamp", "with_retries"]

T = TypeVar("T")

_NEVER_RETRY = frozenset({"context_overflow", "auth_refreshable"})


class Pacer:
    """A cool-down shared by every call of one Session.

    When the provider answers one call with 429 and a ``Retry-After``, the other calls in flight
    would hit the same limit; the pacer holds every new attempt back until the pause the
    provider asked for is over, instead of letting each task discover the limit on its own.
    """

    __slots__ = ("_clock", "_sleep", "_until")

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._until = 0.0

    def note(self, exc: BaseException) -> None:
        """Record a rate limit's requested pause (other errors are ignored)."""
        if isinstance(exc, RateLimitError) and exc.retry_after_s:
            self._until = max(self._until, self._clock() + exc.retry_after_s)

    def pause_s(self) -> float:
        """Seconds left in the current cool-down (0 when there is none)."""
        return max(0.0, self._until - self._clock())

    async def wait(self, limit_s: float | None = None) -> None:
        """Sleep out the current cool-down, if any.

        Args:
            limit_s: The longest pause the caller accepts (``RetryPolicy.max_elapsed_s``). A
                longer one raises RateLimitError now instead of blocking the call silently,
                as the call that received the pause request did.
        """
        delay = self._until - self._clock()
        if delay <= 0:
            return
        if limit_s is not None and delay > limit_s:
            raise RateLimitError(
                f"rate limited: the provider asked this session to pause {delay:.1f} s more, "
                f"longer than RetryPolicy.max_elapsed_s={limit_s:g}",
                hint="Retry after the pause, raise RetryPolicy.max_elapsed_s (None waits as "
                "long as the provider asks), or lower Config.request_concurrency.",
                retryable=True,
                retry_after_s=delay,
                error_category="rate_limit",
            )
        await self._sleep(delay)


def is_retryable(exc: BaseException) -> bool:
    """True when retrying the same call may succeed."""
    return (
        isinstance(exc, APIError)
        and exc.retryable is True
        and exc.error_category not in _NEVER_RETRY
    )


def stamp(exc: BaseException, *, provider: str, phase: str, call_idx: int | None) -> PolluxError:
    """Attach attribution to an error (wrapping non-pollux exceptions as InternalError)."""
    if isinstance(exc, APIError):
        if exc.call_idx is None:
            exc.call_idx = call_idx
        if exc.provider is None:
            exc.provider = provider
        if exc.phase is None:
            exc.phase = phase
        return exc
    if isinstance(exc, PolluxError):
        return exc
    error = InternalError(
        f"{provider} {phase} raised {type(exc).__name__}: {exc}",
        hint="This is a pollux bug; please report it with the traceback.",
    )
    error.__cause__ = exc
    return error


def raise_stamped(
    exc: BaseException, *, provider: str, phase: str, call_idx: int | None
) -> NoReturn:
    """Raise ``exc`` with attribution (see :func:`stamp`), keeping its cause chain."""
    error = stamp(exc, provider=provider, phase=phase, call_idx=call_idx)
    if error is exc:
        raise exc
    raise error from exc


async def with_retries(
    attempt_fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Run ``attempt_fn`` until it succeeds, the error is final, or the policy is spent.

    The delay after attempt ``n`` is ``policy.next_delay(n, ...)``: full jitter over the
    exponential backoff, at least the provider's ``retry_after_s``, clipped to what is left of
    ``max_elapsed_s``. The last error is raised unchanged.
    """
    start = clock()
    attempt = 1
    while True:
        try:
            return await attempt_fn()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not is_retryable(exc):
                raise
            assert isinstance(exc, APIError)
            elapsed = clock() - start
            wait = exc.retry_after_s
            if (
                wait is not None
                and policy.max_elapsed_s is not None
                and elapsed + wait > policy.max_elapsed_s
            ):
                # The provider asked for a pause longer than the deadline allows: a retry
                # before then would only be refused again.
                raise
            delay = policy.next_delay(attempt, elapsed_s=elapsed, retry_after_s=wait)
            if delay is None:
                raise
        await sleep(delay)
        attempt += 1
