"""The one retry loop: full jitter, Retry-After honoured, a wall-clock deadline.

Providers never retry (SDK-internal retries are off), so the attempts a user configures in
:class:`~pollux.RetryPolicy` are the attempts that happen, and ``max_elapsed_s`` bounds them all.
Only errors that say so are retried: an :class:`~pollux.errors.APIError` with ``retryable=True``
whose category is not ``context_overflow`` or ``auth_refreshable``. Cancellation is never retried.

Two limits bound a model call, and the error says which one fired: ``Config.request_timeout_s``
bounds one attempt (the provider raises ``error_category="timeout"``, retryable), and
``RetryPolicy.max_elapsed_s`` bounds the whole call, including an attempt still running when the
deadline passes (:func:`with_retries` with ``deadline_for=...`` cancels it and raises
``error_category="deadline"``, not retryable).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from pollux._scrub import scrub_causes
from pollux._transport import _timeout, deadline_scope
from pollux.errors import APIError, InternalError, PolluxError, RateLimitError
from pollux.retry import RetryPolicy

__all__ = ["Pacer", "deadline_error", "is_retryable", "raise_stamped", "stamp", "with_retries"]

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
    """Attach attribution to an error (wrapping non-pollux exceptions as InternalError).

    The exceptions chained under it (an SDK's own, quoting the server's body) are scrubbed of
    secrets too, so a printed traceback shows no key.
    """
    scrub_causes(exc)
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
    scrub_causes(error)
    return error


def raise_stamped(
    exc: BaseException, *, provider: str, phase: str, call_idx: int | None
) -> NoReturn:
    """Raise ``exc`` with attribution (see :func:`stamp`), keeping its cause chain."""
    error = stamp(exc, provider=provider, phase=phase, call_idx=call_idx)
    if error is exc:
        raise exc
    raise error from exc


def deadline_error(what: str, policy: RetryPolicy, attempt: int) -> APIError:
    """The error of a call whose ``RetryPolicy.max_elapsed_s`` passed while an attempt ran."""
    limit = policy.max_elapsed_s
    return APIError(
        f"{what} failed: no answer within RetryPolicy.max_elapsed_s={limit:g} (the overall "
        f"deadline across attempts; attempt {attempt} was still running and was cancelled)",
        hint="Raise RetryPolicy.max_elapsed_s for slow models or long answers, or pass "
        "max_elapsed_s=None to bound each attempt by Config.request_timeout_s only.",
        retryable=False,
        error_category="deadline",
    )


async def with_retries(
    attempt_fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    deadline_for: str | None = None,
) -> T:
    """Run ``attempt_fn`` until it succeeds, the error is final, or the policy is spent.

    The delay after attempt ``n`` is ``policy.next_delay(n, ...)``: full jitter over the
    exponential backoff, at least the provider's ``retry_after_s``, clipped to what is left of
    ``max_elapsed_s``. A retry that could only start at the deadline is not made. The last
    error is raised unchanged.

    Args:
        attempt_fn: One attempt.
        policy: The retry policy.
        clock: Monotonic clock (tests pass a fake one).
        sleep: Sleep function (tests pass a fake one).
        deadline_for: When set (``"openai generate"``), ``max_elapsed_s`` also bounds the
            attempt that is running: it is cancelled at the deadline and
            :func:`deadline_error` is raised, naming this call. Model calls set it; uploads,
            whose duration grows with the file, do not.
    """
    start = clock()
    limit = policy.max_elapsed_s if deadline_for is not None else None
    attempt = 1
    while True:
        try:
            if limit is None:
                return await attempt_fn()
            try:
                async with _timeout(max(0.0, limit - (clock() - start))) as deadline:
                    # The attempt's requests need no timer of their own that would fire later.
                    when = getattr(deadline, "when", None)
                    with deadline_scope(when() if when is not None else None):
                        return await attempt_fn()
            except TimeoutError:
                # Providers turn their own timeouts into APIError, so a bare TimeoutError
                # here is the deadline's cancellation.
                assert deadline_for is not None
                raise deadline_error(deadline_for, policy, attempt) from None
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
            if limit is not None and elapsed + delay >= limit:
                # The retry would start with no time left: the deadline error would hide the
                # real failure.
                raise
        await sleep(delay)
        attempt += 1
