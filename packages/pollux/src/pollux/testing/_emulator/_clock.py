"""The emulator's virtual clock: it only moves when a test says so."""

from __future__ import annotations

import threading

DEFAULT_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z, so timestamps are reproducible


class VirtualClock:
    """Seconds since the epoch, frozen until :meth:`advance` moves them forward.

    Batch jobs, file expiry and prompt-cache lifetimes read this clock, so a test can move a batch
    through its whole life in microseconds instead of sleeping.
    """

    __slots__ = ("_lock", "_now")

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """The current virtual time."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward and return the new time.

        Raises:
            ValueError: ``seconds`` is negative (time never runs backwards).
        """
        if seconds < 0:
            raise ValueError(f"the emulator clock only moves forward; got {seconds!r} seconds")
        with self._lock:
            self._now += float(seconds)
            return self._now
