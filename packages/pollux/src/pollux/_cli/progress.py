"""Progress on stderr: a live rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .records import Record

if TYPE_CHECKING:
    from pollux import DeferredSnapshot
    from pollux.quota import CallQuota, QuotaPermit, QuotaRequest

__all__ = [
    "FanoutProgress",
    "JobProgress",
    "QuotaWatch",
    "fanout_progress",
    "job_progress",
    "quota_waited",
]

#: A quota admission shorter than this is not shown as a wait: a shared quota's store round
#: trip takes milliseconds, and a display that flickered on each would say nothing.
SHOW_WAIT_S = 0.25
#: Plain progress (a pipe, a log) says so once a wait lasts this long, then at most every
#: `ANNOUNCE_EVERY_S` while calls still wait: a log must not go silent for a whole window.
ANNOUNCE_AFTER_S = 2.0
ANNOUNCE_EVERY_S = 10.0


class QuotaWatch:
    """The command's quota, watched: which attempts are waiting for room, and since when.

    It wraps the quota the ``--quota-*`` options made (every call of the command goes through
    it) and forwards everything; the live display reads `waiting` from its refresh thread, and
    plain progress sets `on_long_wait` to be told of a wait that lasts.
    """

    def __init__(self, quota: CallQuota) -> None:
        self._quota = quota
        self._pending: dict[int, float] = {}  # attempt -> time.monotonic() it began to wait
        self._next = 0
        self._announced = -math.inf  # when on_long_wait was last called
        self.waits = 0  # admissions that waited
        self.waited_s = 0.0  # their waits, summed
        #: Called with `waiting`'s figures once a wait passes `ANNOUNCE_AFTER_S`, then at most
        #: every `ANNOUNCE_EVERY_S` while attempts wait.
        self.on_long_wait: Callable[[int, float], None] | None = None

    async def acquire(self, request: QuotaRequest) -> QuotaPermit:
        """Wait for the wrapped quota, noting the wait while it lasts."""
        token = self._next
        self._next += 1
        self._pending[token] = time.monotonic()
        announcer = None
        if self.on_long_wait is not None:
            announcer = asyncio.ensure_future(self._announce(token))
        try:
            permit = await self._quota.acquire(request)
        finally:
            del self._pending[token]
            if announcer is not None:
                announcer.cancel()
        waited = getattr(permit, "waited_s", 0.0)
        if isinstance(waited, (int, float)) and math.isfinite(waited) and waited > 0:
            self.waits += 1
            self.waited_s += float(waited)
        return permit

    async def _announce(self, token: int) -> None:
        """Tell `on_long_wait` while attempt ``token`` waits (one telling for all waiters)."""
        await asyncio.sleep(ANNOUNCE_AFTER_S)
        while token in self._pending:
            now = time.monotonic()
            if now - self._announced >= ANNOUNCE_EVERY_S and self.on_long_wait is not None:
                self._announced = now
                self.on_long_wait(*self.waiting())
            await asyncio.sleep(ANNOUNCE_EVERY_S)

    async def pause(self, request: QuotaRequest, seconds: float) -> None:
        """Forwarded: a 429 pauses the wrapped quota."""
        await self._quota.pause(request, seconds)

    def waiting(self) -> tuple[int, float]:
        """(attempts waiting for room longer than `SHOW_WAIT_S`, the longest wait in seconds)."""
        now = time.monotonic()
        # One C-level copy: the event loop's thread adds and removes entries meanwhile.
        waits = [now - began for began in tuple(self._pending.values())]
        shown = [w for w in waits if w >= SHOW_WAIT_S]
        return len(shown), max(shown, default=0.0)

    def __getattr__(self, name: str) -> Any:
        # The quota's own settings (``default_output_tokens``, ``window_s``, ...) read through;
        # a private name is never forwarded (and cannot recurse before ``_quota`` is set).
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._quota, name)

    def __repr__(self) -> str:
        return repr(self._quota)


def quota_waited(record: Record) -> float:
    """How long the record's call waited for its quota, from its Output (0 without one)."""
    if record.output is None:
        return 0.0
    quota = record.output.diagnostics.raw.get("quota")
    waited = quota.get("waited_s") if isinstance(quota, dict) else None
    return float(waited) if isinstance(waited, (int, float)) and waited > 0 else 0.0


def _waiting_text(watch: QuotaWatch | None) -> str:
    """``waiting for quota 3.2s`` (with how many calls wait, when several), or nothing."""
    if watch is None:
        return ""
    count, longest = watch.waiting()
    if not count:
        return ""
    calls = f" ({count} calls)" if count > 1 else ""
    return f"waiting for quota {longest:.1f}s{calls}"


def _is_terminal() -> bool:
    return sys.stderr.isatty()


def _line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class FanoutProgress(Protocol):
    """What ``pollux many`` reports while prompts complete."""

    def done(self, record: Record) -> None:
        """One prompt finished (answered, failed or refused)."""

    def close(self) -> None:
        """The fan-out ended or was interrupted."""


class JobProgress(Protocol):
    """What ``pollux collect --wait`` reports at each poll."""

    def update(self, snapshot: DeferredSnapshot) -> None:
        """One poll's snapshot."""

    def close(self) -> None:
        """Polling ended."""


class _PlainFanout:
    """One line per finished prompt, for logs and pipes."""

    def __init__(self, total: int, skipped: int, quota: QuotaWatch | None = None) -> None:
        self.total, self.finished, self.failed, self.tokens = total, skipped, 0, 0
        self.started = time.monotonic()
        self._quota = quota
        if quota is not None:
            quota.on_long_wait = self._waiting
        note = f" ({skipped} already answered)" if skipped else ""
        _line(f"pollux: {total - skipped} of {total} prompts to run{note}")

    def done(self, record: Record) -> None:
        self.finished += 1
        self.tokens += record.tokens
        width = len(str(self.total))
        text = f"[{self.finished:>{width}}/{self.total}] prompt {record.index}: {record.status}"
        if record.status == "ok":
            text += f", {record.tokens} tokens"
        elif record.error is not None:
            text += f": {record.error.get('message', '')}"
        waited = quota_waited(record)
        if waited >= SHOW_WAIT_S:
            text += f" (waited {waited:.1f}s for quota)"
        _line(text)

    def _waiting(self, count: int, longest: float) -> None:
        calls = f"{count} calls wait" if count > 1 else "1 call waits"
        _line(f"pollux: waiting for quota: {calls}, the longest for {longest:.1f}s")

    def close(self) -> None:
        quota = self._quota
        if quota is not None:
            quota.on_long_wait = None
        if quota is not None and quota.waits:
            _line(f"pollux: {quota.waits} call(s) waited for quota, {quota.waited_s:.1f}s in all")


class _RichFanout:
    """A live bar: done of total, failed, tokens, rate and time remaining."""

    def __init__(self, total: int, skipped: int, quota: QuotaWatch | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            Task,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class RateColumn(ProgressColumn):
            def render(self, task: Task) -> Text:
                speed = task.speed
                return Text("-- /s" if speed is None else f"{speed:.1f}/s")

        class QuotaColumn(ProgressColumn):
            # Rendered on every refresh (10 a second), so a wait shows while it lasts.
            def render(self, task: Task) -> Text:
                return Text(_waiting_text(quota), style="yellow")

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TextColumn("{task.fields[tokens]} tokens"),
            RateColumn(),
            TimeRemainingColumn(),
            QuotaColumn(),
            console=Console(stderr=True),
            # Records go to the real stdout; rich must not reroute it into the bar's console.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._progress.start()
        self._failed = 0
        self._tokens = 0
        self._task = self._progress.add_task(
            "prompts", total=total, completed=skipped, failed=0, tokens=0
        )

    def done(self, record: Record) -> None:
        if record.status != "ok":
            self._failed += 1
        self._tokens += record.tokens
        self._progress.update(
            self._task, advance=1, failed=self._failed, tokens=f"{self._tokens:,}"
        )

    def close(self) -> None:
        self._progress.stop()


def fanout_progress(
    total: int, skipped: int, *, records_on_terminal: bool, quota: QuotaWatch | None = None
) -> FanoutProgress:
    """The progress display of a fan-out over ``total`` prompts, ``skipped`` of them done.

    Records printed to the same terminal would tear a live bar apart, so then it is plain lines.
    With ``quota`` the live bar shows a wait for it while one lasts (``waiting for quota
    3.2s``); plain lines say how long each prompt waited, and the total at the end.
    """
    if _is_terminal() and not records_on_terminal:
        return _RichFanout(total, skipped, quota)
    return _PlainFanout(total, skipped, quota)


def _counts(snapshot: DeferredSnapshot) -> str:
    return (
        f"status={snapshot.status} succeeded={snapshot.succeeded} failed={snapshot.failed} "
        f"pending={snapshot.pending}"
    )


class _PlainJob:
    def __init__(self) -> None:
        self._last: Any = None

    def update(self, snapshot: DeferredSnapshot) -> None:
        key = (snapshot.status, snapshot.succeeded, snapshot.failed, snapshot.pending)
        if key != self._last:  # one line per change, not per poll
            self._last = key
            _line(f"pollux: job {snapshot.job_id}: {_counts(snapshot)}")

    def close(self) -> None:
        return None


class _RichJob:
    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            console=Console(stderr=True),
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._progress.start()
        self._task: Any = None

    def update(self, snapshot: DeferredSnapshot) -> None:
        finished = snapshot.succeeded + snapshot.failed
        if self._task is None:
            self._task = self._progress.add_task(
                f"job {snapshot.job_id}", total=snapshot.request_count, counts=""
            )
        self._progress.update(self._task, completed=finished, counts=_counts(snapshot))

    def close(self) -> None:
        self._progress.stop()


def job_progress() -> JobProgress:
    """The progress display of ``collect --wait``."""
    return _RichJob() if _is_terminal() else _PlainJob()
