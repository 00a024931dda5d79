"""The batch-job lifecycle the OpenAI Batch API and Anthropic Message Batches backends share.

Both backends keep one provider-side batch per job, list the files the job uploaded in
``provider_state["owned_file_ids"]`` and delete them once an inspect, collect or cancel sees the
job ended (once per job and process). :class:`BatchJobs` holds that lifecycle: retrieving and
normalizing the batch, the cleanup, ``inspect_deferred`` and ``cancel_deferred``. A subclass
states its wire: how to fetch, cancel and normalize a batch, how to delete files and how to wrap
SDK errors; submission and collection stay in the provider's ``deferred`` module.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pollux.errors import APIError, ConfigurationError
from pollux.interaction.deferred import DeferredSnapshot

if TYPE_CHECKING:
    from pollux.errors import PolluxError
    from pollux.interaction.deferred import DeferredHandle, DeferredStatus
    from pollux.providers.base import ProviderRequest

__all__ = [
    "BatchJobs",
    "count",
    "handle_snapshot",
    "iso_time",
    "require_requests",
    "result_line",
]

_Compiled = TypeVar("_Compiled")


def count(value: Any) -> int:
    """A request count from the wire: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def handle_snapshot(
    handle: DeferredHandle,
    counts: tuple[DeferredStatus, int, int, int],
    *,
    provider_status: str,
    completed_at: float | None,
    expires_at: float | None,
) -> DeferredSnapshot:
    """The snapshot of ``handle``'s job, as a backend normalized it.

    Args:
        handle: The job's handle (id, provider, model, request count, submission time).
        counts: ``(status, succeeded, failed, pending)``, as ``normalize_status`` returns them.
        provider_status: The provider's raw status.
        completed_at: When the job ended, if it has.
        expires_at: When the provider expires the job, if known.
    """
    status, succeeded, failed, pending = counts
    return DeferredSnapshot(
        job_id=handle.job_id,
        provider=handle.provider,
        model=handle.model,
        status=status,
        provider_status=provider_status,
        request_count=handle.request_count,
        succeeded=succeeded,
        failed=failed,
        pending=pending,
        submitted_at=handle.submitted_at,
        completed_at=completed_at,
        expires_at=expires_at,
    )


def iso_time(value: Any) -> float | None:
    """A ``datetime`` or ISO 8601 string (``Z`` allowed) as epoch seconds; None otherwise."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def result_line(
    text: str,
    *,
    provider: str,
    message: str,
    hint: str = "Collect again; if it persists, the file is damaged.",
) -> Any:
    """One line of a batch result file, parsed as JSON.

    Args:
        text: The line.
        provider: The provider named in the error.
        message: The error's message, naming the file.
        hint: The error's hint.

    Raises:
        APIError: The line is not JSON (retryable: a read may have been cut short).
    """
    try:
        return json.loads(text)
    except ValueError as exc:
        raise APIError(
            message,
            hint=hint,
            retryable=True,
            provider=provider,
            phase="batch_collect",
            error_category="malformed_response",
        ) from exc


def require_requests(requests: Sequence[ProviderRequest]) -> None:
    """Refuse an empty job before any I/O.

    Raises:
        ConfigurationError: ``requests`` is empty.
    """
    if not requests:
        raise ConfigurationError(
            "defer() requires at least one prompt",
            hint="Pass one or more prompts to submit for deferred collection.",
        )


class BatchJobs(ABC, Generic[_Compiled]):
    """The shared lifecycle of a batch backend (see the module docstring).

    Args:
        client: Returns the provider's SDK client (built lazily).
        compile_request: The provider's realtime ``compile``.
        model: The configured model.
        timeout_s: The request timeout, quoted in error hints.
    """

    def __init__(
        self,
        client: Callable[[], Any],
        compile_request: Callable[[ProviderRequest], _Compiled],
        *,
        model: str,
        timeout_s: float,
    ) -> None:
        self._client = client
        self._compile = compile_request
        self._model = model
        self._timeout_s = timeout_s
        # Jobs whose owned files this provider already deleted (no repeated DELETEs).
        self._cleaned: set[str] = set()

    # ---------------------------------------------------------------- the wire

    @abstractmethod
    def _wrap(self, exc: Exception, phase: str) -> PolluxError:
        """The provider's pollux error for an SDK exception in ``phase``."""

    @abstractmethod
    def _snapshot(self, handle: DeferredHandle, batch: Any) -> DeferredSnapshot:
        """The normalized snapshot of a retrieved (or cancelled) batch."""

    @abstractmethod
    async def _fetch(self, client: Any, job_id: str) -> Any:
        """Retrieve the batch (SDK exceptions propagate; the caller wraps them)."""

    @abstractmethod
    async def _cancel(self, client: Any, job_id: str) -> Any:
        """Ask the provider to cancel the batch; return the batch it answers with."""

    @abstractmethod
    async def _delete_files(self, client: Any, file_ids: Sequence[str]) -> object:
        """Delete uploaded files, best effort (never raises for a file that is gone)."""

    # ---------------------------------------------------------------- lifecycle

    async def _retrieve(self, handle: DeferredHandle, phase: str) -> Any:
        try:
            return await self._fetch(self._client(), handle.job_id)
        except Exception as exc:
            raise self._wrap(exc, phase) from exc

    async def _cleanup(self, handle: DeferredHandle) -> None:
        # Best effort: a file that is already gone (deleted elsewhere, expired) is fine.
        if handle.job_id in self._cleaned:
            return
        state = handle.provider_state or {}
        owned = [str(i) for i in state.get("owned_file_ids") or () if isinstance(i, str)]
        await self._delete_files(self._client(), owned)
        self._cleaned.add(handle.job_id)

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """Retrieve and normalize the batch; release the job's uploads once it ended."""
        batch = await self._retrieve(handle, "batch_status")
        snapshot = self._snapshot(handle, batch)
        if snapshot.is_terminal:
            await self._cleanup(handle)
        return snapshot

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """Ask the provider to cancel; a batch that already ended is left alone."""
        client = self._client()
        try:
            batch = await self._cancel(client, handle.job_id)
        except Exception as exc:
            error = self._wrap(exc, "batch_cancel")
            if not (isinstance(error, APIError) and error.status_code in (400, 409)):
                raise error from exc
            # Refused: usually the batch ended in the meantime. Anything else is re-raised.
            batch = await self._retrieve(handle, "batch_cancel")
            if not self._snapshot(handle, batch).is_terminal:
                raise error from exc
        if self._snapshot(handle, batch).is_terminal:
            await self._cleanup(handle)
