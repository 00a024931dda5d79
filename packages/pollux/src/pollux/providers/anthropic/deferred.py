"""Deferred delivery for ``provider="anthropic"``: the Message Batches API.

Submission:

- Checks first, before any I/O: at most :data:`MAX_REQUESTS` requests and :data:`MAX_BYTES` of
  request JSON per batch (Anthropic's limits); a larger job is refused with a hint to split it.
- Sources are prepared once for the whole job: text inlined, files uploaded to the Files API
  (streamed from disk). These uploads belong to the job, not to a Session: they must outlive it,
  since the batch reads them later. They are listed in ``provider_state["owned_file_ids"]``
  and deleted as soon as an inspect, collect or cancel sees the job ended, in any process.
- One ``{"custom_id": "pollux-000000", "params": ...}`` per prompt, whose params are exactly what
  the realtime path sends to ``messages.create`` (``compile``), without cache breakpoints
  (there is no first call to warm a batch's cache with).
- If anything fails, everything uploaded so far is deleted before the error propagates.

Status normalization (:func:`normalize_status`): ``in_progress`` -> running (Anthropic has no
queued state); ``canceling`` -> cancelling; ``ended`` -> from the request counts: all succeeded
-> completed; some succeeded -> partial; none: all canceled -> cancelled, all expired ->
expired, otherwise failed. Requests still counted as processing when the batch ended are folded
into the failed count.

Collection streams the results endpoint (JSONL, one line at a time, never the whole file):
``succeeded`` -> the extracted message; ``errored`` -> failed with the API's error; ``canceled``
-> cancelled; ``expired`` -> expired. Prompt order comes from the ``custom_id``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pollux.errors import APIError, ConfigurationError, PolluxError
from pollux.interaction.deferred import DeferredSnapshot
from pollux.providers._batch_jobs import (
    BatchJobs,
    count,
    handle_snapshot,
    iso_time,
    require_requests,
)
from pollux.providers._deferred import DeferredItem, DeferredJob, DeferredResults
from pollux.providers._errors import api_error
from pollux.providers.base import PreparedSources

from .compile import AnthropicCall
from .errors import PROVIDER, wrap_anthropic_error
from .extract import extract_response, field
from .uploads import UploadRegistry, delete_files

if TYPE_CHECKING:
    from pollux.interaction.deferred import DeferredHandle, DeferredStatus
    from pollux.providers.base import ProviderRequest


__all__ = [
    "MAX_BYTES",
    "MAX_REQUESTS",
    "MessageBatches",
    "item_from_result",
    "normalize_status",
    "snapshot_from_batch",
]

#: Anthropic's limits for one Message Batch.
MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def _time(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return iso_time(value)


def normalize_status(
    raw: str,
    *,
    request_count: int,
    succeeded: int,
    errored: int,
    canceled: int,
    expired: int,
) -> tuple[DeferredStatus, int, int, int]:
    """Map a batch's processing status and counts to ``(status, succeeded, failed, pending)``."""
    succeeded = min(succeeded, request_count)
    failed = min(errored + canceled + expired, request_count - succeeded)
    pending = request_count - succeeded - failed
    status: DeferredStatus
    if raw == "ended":
        failed, pending = failed + pending, 0
        if succeeded == request_count:
            status = "completed"
        elif succeeded > 0:
            status = "partial"
        elif canceled == request_count:
            status = "cancelled"
        elif expired == request_count:
            status = "expired"
        else:
            status = "failed"
    elif raw == "canceling":
        status = "cancelling"
    else:
        status = "running"
    return status, succeeded, failed, pending


def snapshot_from_batch(handle: DeferredHandle, batch: Any) -> DeferredSnapshot:
    """Normalize a ``MessageBatch`` (SDK object or JSON dict) for ``handle``."""
    raw = str(field(batch, "processing_status") or "in_progress")
    counts = field(batch, "request_counts")
    normalized = normalize_status(
        raw,
        request_count=handle.request_count,
        succeeded=count(field(counts, "succeeded")),
        errored=count(field(counts, "errored")),
        canceled=count(field(counts, "canceled")),
        expired=count(field(counts, "expired")),
    )
    return handle_snapshot(
        handle,
        normalized,
        provider_status=raw,
        completed_at=_time(field(batch, "ended_at")),
        expires_at=_time(field(batch, "expires_at")),
    )


def _item_error(message: str, *, category: str) -> APIError:
    return APIError(
        f"anthropic batch request {category}: {message}",
        hint="Submit the prompt again with defer() (or run it with run()).",
        retryable=False,
        provider=PROVIDER,
        phase="batch_collect",
        error_category=category,
    )


def item_from_result(line: Any) -> DeferredItem:
    """One line of the results endpoint as a :class:`DeferredItem`.

    Raises:
        APIError: The line has no ``custom_id`` (not a batch result).
    """
    request_id = field(line, "custom_id")
    if not isinstance(request_id, str):
        raise APIError(
            "anthropic batch result without a custom_id",
            hint="The results are malformed; collect again, or report it to Anthropic.",
            retryable=False,
            provider=PROVIDER,
            phase="batch_collect",
            error_category="malformed_response",
        )
    result = field(line, "result")
    kind = str(field(result, "type") or "errored")
    if kind == "succeeded":
        return DeferredItem(
            request_id,
            "succeeded",
            response=extract_response(field(result, "message")),
            provider_status="succeeded",
        )
    if kind == "canceled":
        return DeferredItem(
            request_id,
            "cancelled",
            error=_item_error("the batch was cancelled before it ran", category="cancelled"),
            provider_status="canceled",
        )
    if kind == "expired":
        return DeferredItem(
            request_id,
            "expired",
            error=_item_error("the batch expired before it ran", category="expired"),
            provider_status="expired",
        )
    inner = field(field(result, "error"), "error")
    error_type = str(field(inner, "type") or "api_error")
    message = str(field(inner, "message") or "the request failed")
    error = api_error(
        provider=PROVIDER,
        phase="batch_collect",
        status_code=_ERROR_STATUS.get(error_type),
        message=message,
    )
    resubmit = "Submit the prompt again with defer(), or run it with run()."
    error.hint = resubmit if error.retryable else f"{error.hint} Then: {resubmit}"
    return DeferredItem(request_id, "failed", error=error, provider_status=error_type)


class MessageBatches(BatchJobs[AnthropicCall]):
    """The Message Batches backend of one :class:`~pollux.providers.anthropic.AnthropicProvider`.

    Args:
        client: Returns the provider's ``AsyncAnthropic`` client (built lazily).
        compile_request: The provider's realtime ``compile``.
        model: The configured model.
        timeout_s: The request timeout, quoted in error hints.
    """

    def _wrap(self, exc: Exception, phase: str) -> PolluxError:
        return wrap_anthropic_error(exc, phase=phase, timeout_s=self._timeout_s)

    def _snapshot(self, handle: DeferredHandle, batch: Any) -> DeferredSnapshot:
        return snapshot_from_batch(handle, batch)

    async def _fetch(self, client: Any, job_id: str) -> Any:
        return await client.messages.batches.retrieve(job_id)

    async def _cancel(self, client: Any, job_id: str) -> Any:
        return await client.messages.batches.cancel(job_id)

    async def _delete_files(self, client: Any, file_ids: Sequence[str]) -> object:
        return await delete_files(client, file_ids)

    # -------------------------------------------------------------------- submit

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Upload the sources, then create the batch (all or nothing)."""
        require_requests(requests)
        if len(requests) > MAX_REQUESTS:
            raise ConfigurationError(
                f"An Anthropic Message Batch takes at most {MAX_REQUESTS:,} requests, got "
                f"{len(requests):,}",
                hint="Split the prompts over several defer() calls.",
            )
        client = self._client()
        sources = requests[0].sources.sources
        # The job owns its uploads (they must outlive this Session); not the Session registry.
        uploads = UploadRegistry(lambda: client, timeout_s=self._timeout_s)
        try:
            blocks = await uploads.blocks(sources)
            parts = PreparedSources(sources=tuple(sources), parts=blocks)
            entries, betas = self._entries(requests, request_ids, parts)
            headers = {"anthropic-beta": ",".join(betas)} if betas else None
            try:
                batch = await client.messages.batches.create(
                    requests=entries, extra_headers=headers
                )
            except Exception as exc:
                raise self._wrap(exc, "batch_submit") from exc
        except BaseException:
            # Nobody else knows these ids: delete them before the error propagates.
            await asyncio.shield(delete_files(client, uploads.file_ids))
            raise
        submitted = _time(field(batch, "created_at"))
        return DeferredJob(
            job_id=str(field(batch, "id")),
            model=str(requests[0].model or self._model),
            submitted_at=submitted if submitted is not None else time.time(),
            provider_state={"owned_file_ids": uploads.file_ids, "betas": list(betas)},
        )

    def _entries(
        self,
        requests: Sequence[ProviderRequest],
        request_ids: Sequence[str],
        parts: PreparedSources,
    ) -> tuple[list[dict[str, Any]], list[str]]:
        entries: list[dict[str, Any]] = []
        betas: list[str] = []
        size = 0
        for request_id, request in zip(request_ids, requests, strict=True):
            call = self._compile(replace(request, sources=parts, cache="none", stream=False))
            params = {k: v for k, v in call.kwargs.items() if k != "stream"}
            entry = {"custom_id": request_id, "params": params}
            size += len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
            if size > MAX_BYTES:
                raise ConfigurationError(
                    f"The batch would exceed Anthropic's {MAX_BYTES // (1024 * 1024)} MB limit "
                    f"at request {request_id}",
                    hint="Split the prompts over several defer() calls, or use fewer or smaller "
                    "text sources (file sources are uploaded once and only referenced).",
                )
            betas.extend(beta for beta in call.betas if beta not in betas)
            entries.append(entry)
        return entries, betas

    # ------------------------------------------------------------------- lifecycle

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The snapshot and, for an ended batch, every request's outcome."""
        batch = await self._retrieve(handle, "batch_collect")
        snapshot = snapshot_from_batch(handle, batch)
        if not snapshot.is_terminal:
            return DeferredResults(snapshot)
        items: list[DeferredItem] = []
        try:
            results = await self._client().messages.batches.results(handle.job_id)
            async for line in results:
                items.append(item_from_result(line))
        except PolluxError:
            raise
        except Exception as exc:
            raise self._wrap(exc, "batch_collect") from exc
        await self._cleanup(handle)
        return DeferredResults(snapshot, tuple(items))
