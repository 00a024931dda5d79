"""Deferred delivery for the mock provider: jobs on an in-memory, poll-driven timeline.

A mock job moves one step each time it is inspected, so code that polls can be exercised
offline, deterministically, and without sleeping:

====================  ==========================================================
``defer()``           the job is ``queued``
1st inspect           reports ``queued``, then the job starts ``running``
2nd inspect           reports ``running``, then the job is ``completed``
3rd inspect onwards   reports ``completed`` (every request succeeded)
``cancel_deferred()``  an active job turns ``cancelling``; the next inspect reports
                      ``cancelling``, then ``cancelled`` (no request ran)
====================  ==========================================================

``collect_deferred()`` only observes (it never moves the timeline). The answers are the mock's
usual deterministic answers, computed at submission. Jobs live in the memory of the process that
submitted them (the most recent :data:`MAX_JOBS`); a handle from another process is refused with
a clear error.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pollux.errors import APIError, ConfigurationError
from pollux.interaction.deferred import DeferredSnapshot
from pollux.providers._deferred import DeferredItem, DeferredJob, DeferredResults

if TYPE_CHECKING:
    from pollux.interaction.deferred import DeferredHandle
    from pollux.providers.base import ProviderRequest, ProviderResponse

__all__ = ["MAX_JOBS", "MockDeferredJobs"]

#: How many mock jobs a process remembers (oldest forgotten first).
MAX_JOBS = 1024

_NEXT = {"queued": "running", "running": "completed", "cancelling": "cancelled"}
_TERMINAL = ("completed", "cancelled")


@dataclass(slots=True)
class _Job:
    id: str
    model: str
    request_ids: tuple[str, ...]
    responses: tuple[ProviderResponse, ...]
    submitted_at: float
    status: str = "queued"
    completed_at: float | None = None


_JOBS: OrderedDict[str, _Job] = OrderedDict()


class MockDeferredJobs:
    """The mock provider's deferred backend (see the module docstring for the timeline).

    Args:
        name: The provider name the mock stands in for.
        model: The model name reported in handles.
        answer: Builds the mock's response for one validated request.
    """

    def __init__(
        self,
        name: str,
        model: str,
        answer: Callable[[ProviderRequest], ProviderResponse],
    ) -> None:
        self._name = name
        self._model = model
        self._answer = answer

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Answer every request now; the job becomes visible through the timeline."""
        responses = tuple(self._answer(request) for request in requests)
        job = _Job(
            id=f"mockbatch_{secrets.token_hex(8)}",
            model=self._model,
            request_ids=tuple(request_ids),
            responses=responses,
            submitted_at=time.time(),
        )
        _JOBS[job.id] = job
        while len(_JOBS) > MAX_JOBS:
            _JOBS.popitem(last=False)
        return DeferredJob(
            job_id=job.id, model=job.model, submitted_at=job.submitted_at, provider_state={}
        )

    def _job(self, handle: DeferredHandle) -> _Job:
        job = _JOBS.get(handle.job_id)
        if job is None:
            raise ConfigurationError(
                f"Unknown mock deferred job {handle.job_id!r}",
                hint="Mock jobs live in the memory of the process that submitted them; collect "
                "in the same process, or use a real provider (or the emulator) across processes.",
            )
        return job

    def _snapshot(self, handle: DeferredHandle, job: _Job) -> DeferredSnapshot:
        total = len(job.request_ids)
        succeeded = total if job.status == "completed" else 0
        failed = total if job.status == "cancelled" else 0
        return DeferredSnapshot(
            job_id=job.id,
            provider=self._name,
            model=job.model,
            status=job.status,  # type: ignore[arg-type]  # one of the mock's statuses
            provider_status=job.status,
            request_count=total,
            succeeded=succeeded,
            failed=failed,
            pending=total - succeeded - failed,
            submitted_at=handle.submitted_at,
            completed_at=job.completed_at,
        )

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """Report the job's state, then move it one step along the timeline."""
        job = self._job(handle)
        snapshot = self._snapshot(handle, job)
        following = _NEXT.get(job.status)
        if following is not None:
            job.status = following
            if following in _TERMINAL:
                job.completed_at = time.time()
        return snapshot

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The snapshot, plus every request's outcome once the job is terminal."""
        job = self._job(handle)
        snapshot = self._snapshot(handle, job)
        if job.status not in _TERMINAL:
            return DeferredResults(snapshot)
        if job.status == "completed":
            items = tuple(
                DeferredItem(
                    request_id=rid, status="succeeded", response=resp, provider_status="ok"
                )
                for rid, resp in zip(job.request_ids, job.responses, strict=True)
            )
        else:
            items = tuple(
                DeferredItem(
                    request_id=rid,
                    status="cancelled",
                    error=_cancelled(self._name, rid),
                    provider_status="cancelled",
                )
                for rid in job.request_ids
            )
        return DeferredResults(snapshot, items)

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """An active job turns ``cancelling``; a finished one is left alone."""
        job = self._job(handle)
        if job.status in ("queued", "running"):
            job.status = "cancelling"


def _cancelled(provider: str, request_id: str) -> APIError:
    return APIError(
        f"request {request_id} was cancelled before it ran",
        hint="Submit the prompt again with defer() (or run it with run()).",
        retryable=False,
        provider=provider,
        phase="batch_collect",
        error_category="cancelled",
    )


def _forget_all() -> None:
    """Drop every remembered job (tests)."""
    _JOBS.clear()
