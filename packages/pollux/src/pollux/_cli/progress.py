"""Progress on stderr: a live rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Protocol

from .records import Record

if TYPE_CHECKING:
    from pollux import DeferredSnapshot

__all__ = ["FanoutProgress", "JobProgress", "fanout_progress", "job_progress"]


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

    def __init__(self, total: int, skipped: int) -> None:
        self.total, self.finished, self.failed, self.tokens = total, skipped, 0, 0
        self.started = time.monotonic()
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
        _line(text)

    def close(self) -> None:
        return None


class _RichFanout:
    """A live bar: done of total, failed, tokens, rate and time remaining."""

    def __init__(self, total: int, skipped: int) -> None:
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

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TextColumn("{task.fields[tokens]} tokens"),
            RateColumn(),
            TimeRemainingColumn(),
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


def fanout_progress(total: int, skipped: int, *, records_on_terminal: bool) -> FanoutProgress:
    """The progress display of a fan-out over ``total`` prompts, ``skipped`` of them done.

    Records printed to the same terminal would tear a live bar apart, so then it is plain lines.
    """
    if _is_terminal() and not records_on_terminal:
        return _RichFanout(total, skipped)
    return _PlainFanout(total, skipped)


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
