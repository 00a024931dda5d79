"""The retry policy: a pure description of how often and how long to retry.

The retry loop itself belongs to the engine; this module only answers "how long should
the engine wait before attempt N+1, if at all".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

from .errors import ConfigurationError
from .interaction._json import describe, is_finite_number

__all__ = ["RetryPolicy"]


class _Uniform(Protocol):
    def uniform(self, a: float, b: float, /) -> float: ...


def _is_number(value: object) -> bool:
    # Finite as a float: a huge JSON integer (10**400) is rejected here, not by an
    # OverflowError later in the retry loop.
    return is_finite_number(value)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retry policy with exponential backoff and optional full jitter.

    Args:
        max_attempts: Total attempts including the first call (``2`` = one retry).
        initial_delay_s: The backoff before the first retry, in seconds.
        backoff_multiplier: Factor applied to the backoff after each retry.
        max_delay_s: Upper bound of the exponential backoff, in seconds.
        jitter: Full jitter: wait a uniformly random time in ``[0, backoff]``.
        max_elapsed_s: Wall-clock deadline across all attempts; ``None`` disables it. The
            engine also cancels a model call's attempt still running at the deadline (the
            error then has ``error_category="deadline"``).

    Raises:
        ConfigurationError: A field is out of range (also a ``ValueError``).

    Example:
        >>> policy = RetryPolicy(max_attempts=4, jitter=False)
        >>> [policy.delay_for(n) for n in (1, 2, 3)]
        [0.5, 1.0, 2.0]
    """

    max_attempts: int = 2
    initial_delay_s: float = 0.5
    backoff_multiplier: float = 2.0
    max_delay_s: float = 5.0
    jitter: bool = True
    max_elapsed_s: float | None = 15.0

    def __post_init__(self) -> None:
        """Validate invariants so retry behaviour stays predictable."""
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise ConfigurationError(
                f"RetryPolicy.max_attempts must be an integer >= 1, got "
                f"{describe(self.max_attempts)}",
                hint="Use max_attempts=1 to disable retries, 2 for one retry.",
            )
        for name in ("initial_delay_s", "max_delay_s"):
            value = getattr(self, name)
            if not _is_number(value) or not value >= 0:
                raise ConfigurationError(
                    f"RetryPolicy.{name} must be a finite number >= 0, got {describe(value)}",
                    hint=f"Pass {name} in seconds, for example {name}=0.5.",
                )
        if not _is_number(self.backoff_multiplier) or not self.backoff_multiplier > 0:
            raise ConfigurationError(
                "RetryPolicy.backoff_multiplier must be a finite number > 0, "
                f"got {describe(self.backoff_multiplier)}",
                hint="Use 2.0 to double the delay after each retry, 1.0 for a constant delay.",
            )
        if not isinstance(self.jitter, bool):
            raise ConfigurationError(
                f"RetryPolicy.jitter must be a bool, got {describe(self.jitter)}",
                hint="Pass jitter=True (full jitter) or jitter=False.",
            )
        if self.max_elapsed_s is not None and (
            not _is_number(self.max_elapsed_s) or not self.max_elapsed_s >= 0
        ):
            raise ConfigurationError(
                "RetryPolicy.max_elapsed_s must be a finite number >= 0 or None, got "
                f"{describe(self.max_elapsed_s)}",
                hint="Pass a deadline in seconds, or None to disable the deadline.",
            )

    def backoff_s(self, attempt: int) -> float:
        """Return the deterministic backoff after failed attempt ``attempt`` (1-based).

        The value is ``initial_delay_s * backoff_multiplier ** (attempt - 1)``, capped at
        ``max_delay_s``.
        """
        if attempt < 1:
            raise ConfigurationError(
                f"attempt must be >= 1, got {attempt}",
                hint="Attempts are numbered from 1 (the first call).",
            )
        try:
            base = self.initial_delay_s * self.backoff_multiplier ** (attempt - 1)
        except OverflowError:
            base = math.inf
        return float(min(base, self.max_delay_s))

    def delay_for(
        self,
        attempt: int,
        *,
        retry_after_s: float | None = None,
        rng: _Uniform | None = None,
    ) -> float:
        """Return how long to wait after failed attempt ``attempt`` (1-based).

        With ``jitter`` the backoff is drawn uniformly from ``[0, backoff]`` ("full
        jitter"). A provider's ``retry_after_s`` wins when it is longer.

        Args:
            attempt: The number of the attempt that just failed (1 = the first call).
            retry_after_s: The delay the provider asked for, if any.
            rng: Source of randomness with a ``uniform(a, b)`` method (defaults to the
                ``random`` module); pass ``random.Random(seed)`` for reproducible delays.
        """
        delay = self.backoff_s(attempt)
        if self.jitter and delay > 0:
            delay = (rng or random).uniform(0.0, delay)
        if retry_after_s is not None and retry_after_s > delay:
            delay = float(retry_after_s)
        return delay

    def next_delay(
        self,
        attempt: int,
        *,
        elapsed_s: float = 0.0,
        retry_after_s: float | None = None,
        rng: _Uniform | None = None,
    ) -> float | None:
        """Return the wait before the next attempt, or ``None`` when retrying must stop.

        Retrying stops when ``attempt`` reached ``max_attempts`` or the ``max_elapsed_s``
        deadline is spent. The delay is clipped to the time left before the deadline.

        Args:
            attempt: The number of the attempt that just failed (1 = the first call).
            elapsed_s: Seconds since the first attempt started.
            retry_after_s: The delay the provider asked for, if any.
            rng: Source of randomness, as for :meth:`delay_for`.
        """
        if attempt >= self.max_attempts:
            return None
        delay = self.delay_for(attempt, retry_after_s=retry_after_s, rng=rng)
        if self.max_elapsed_s is None:
            return delay
        remaining = self.max_elapsed_s - elapsed_s
        if remaining <= 0:
            return None
        return min(delay, remaining)
