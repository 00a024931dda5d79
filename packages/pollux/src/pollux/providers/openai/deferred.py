"""Deferred delivery for ``provider="openai"``: the Batch API over the Files API.

Submission:

- Checks first, before any I/O: at most :data:`MAX_REQUESTS` requests per job.
- Sources are prepared once for the whole job (text inlined, files uploaded with
  ``purpose="user_data"`` and a :data:`FILE_TTL_S` expiry that outlives the 24 hour window).
- One JSONL line per prompt, ``{"custom_id", "method": "POST", "url": "/v1/responses",
  "body"}``, whose body is exactly what the realtime path sends to ``responses.create``
  (``compile``). The file is written to a temporary file off the event loop and streamed to
  ``files.create(purpose="batch")``, never built in memory; over :data:`MAX_INPUT_BYTES` it is
  refused before the upload.
- ``batches.create(endpoint="/v1/responses", completion_window="24h")`` with
  ``output_expires_after`` (:data:`OUTPUT_TTL_S`), so result files do not pile up forever.
- If anything fails, everything uploaded so far is deleted before the error propagates.

``provider_state`` holds ``owned_file_ids`` (the source uploads and the input file) and
``input_file_id``. They are deleted as soon as an inspect, collect or cancel sees the job in a
terminal state. Result files stay until their expiry, so collecting twice works.

Status normalization (:func:`normalize_status`): ``validating`` -> queued; ``in_progress``,
``finalizing`` -> running; ``cancelling``; ``completed`` -> completed, partial or failed by the
request counts; ``cancelled``/``expired`` -> partial when some requests succeeded, else
themselves; ``failed``; anything unknown -> running. For terminal jobs the pending count is
folded into the failed count.

Collection reads the output file, then the error file, line by line (``status_code == 200`` ->
succeeded; ``batch_expired`` -> expired; ``batch_cancelled`` -> cancelled; anything else ->
failed with the provider's message), and fills in the requests of a batch that failed validation
with the validation errors.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

from pollux.errors import APIError, ConfigurationError, PolluxError
from pollux.interaction.deferred import DeferredSnapshot
from pollux.providers._batch_jobs import (
    BatchJobs,
    count,
    handle_snapshot,
    require_requests,
    result_line,
)
from pollux.providers._deferred import DeferredItem, DeferredJob, DeferredResults, request_ids
from pollux.providers._errors import api_error, body_message
from pollux.providers.base import PreparedSources

from .errors import PROVIDER, wrap_openai_error
from .extract import extract_response, field
from .uploads import delete_files, prepare_parts

if TYPE_CHECKING:
    from pollux.interaction.deferred import DeferredHandle, DeferredStatus
    from pollux.providers.base import ProviderRequest

__all__ = [
    "ENDPOINT",
    "FILE_TTL_S",
    "MAX_INPUT_BYTES",
    "MAX_REQUESTS",
    "OUTPUT_TTL_S",
    "OpenAIBatches",
    "item_from_line",
    "normalize_status",
    "snapshot_from_batch",
]

ENDPOINT = "/v1/responses"
#: OpenAI's limits for one batch input file.
MAX_REQUESTS = 50_000
MAX_INPUT_BYTES = 200 * 1024 * 1024
#: Expiry of the job's uploads: the 24 hour completion window plus a day of margin.
FILE_TTL_S = 48 * 3600
#: Expiry of the result files OpenAI writes (the longest it allows: 30 days).
OUTPUT_TTL_S = 30 * 24 * 3600

_TERMINAL_RAW = ("completed", "failed", "expired", "cancelled")
_TIMESTAMP = {
    "completed": "completed_at",
    "failed": "failed_at",
    "expired": "expired_at",
    "cancelled": "cancelled_at",
}


def normalize_status(
    raw: str, *, request_count: int, succeeded: int, failed: int
) -> tuple[DeferredStatus, int, int, int]:
    """Map a batch status and its request counts to ``(status, succeeded, failed, pending)``."""
    succeeded = min(succeeded, request_count)
    failed = min(failed, request_count - succeeded)
    pending = request_count - succeeded - failed
    if raw in _TERMINAL_RAW:
        # Requests that never ran count as failed once the job is over.
        failed, pending = failed + pending, 0
    status: DeferredStatus
    if raw == "validating":
        status = "queued"
    elif raw in ("in_progress", "finalizing"):
        status = "running"
    elif raw == "cancelling":
        status = "cancelling"
    elif raw == "completed":
        status = "completed" if failed == 0 else ("failed" if succeeded == 0 else "partial")
    elif raw in ("cancelled", "expired"):
        status = "partial" if succeeded > 0 else ("cancelled" if raw == "cancelled" else "expired")
    elif raw == "failed":
        status = "failed"
    else:
        status = "running"
    return status, succeeded, failed, pending


def _opt_time(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def snapshot_from_batch(handle: DeferredHandle, batch: Any) -> DeferredSnapshot:
    """Normalize a ``Batch`` (SDK object or JSON dict) for ``handle``."""
    raw = str(field(batch, "status") or "unknown")
    counts = field(batch, "request_counts")
    normalized = normalize_status(
        raw,
        request_count=handle.request_count,
        succeeded=count(field(counts, "completed")),
        failed=count(field(counts, "failed")),
    )
    stamp = _TIMESTAMP.get(raw)
    return handle_snapshot(
        handle,
        normalized,
        provider_status=raw,
        completed_at=_opt_time(field(batch, stamp)) if stamp else None,
        expires_at=_opt_time(field(batch, "expires_at")),
    )


def _item_error(message: str, *, category: str) -> APIError:
    return APIError(
        f"openai batch request {category}: {message}",
        hint="Submit the prompt again with defer() (or run it with run()).",
        retryable=False,
        provider=PROVIDER,
        phase="batch_collect",
        error_category=category,
    )


def item_from_line(line: Mapping[str, Any], *, served_model: bool = False) -> DeferredItem:
    """One line of a batch output or error file as a :class:`DeferredItem`.

    ``served_model`` keeps the model each answer names (see `extract_response`).

    Raises:
        APIError: The line has no ``custom_id`` (the file is not a batch result file).
    """
    request_id = line.get("custom_id")
    if not isinstance(request_id, str):
        raise APIError(
            "openai batch result line without a custom_id",
            hint="The result file is malformed; collect again, or report it to OpenAI.",
            retryable=False,
            provider=PROVIDER,
            phase="batch_collect",
            error_category="malformed_response",
        )
    response = line.get("response")
    if isinstance(response, Mapping) and response.get("status_code") is not None:
        code = response.get("status_code")
        body = response.get("body")
        if code == 200:
            try:
                extracted = extract_response(body, served_model=served_model)
            except PolluxError as exc:
                error = (
                    exc if isinstance(exc, APIError) else _item_error(str(exc), category="failed")
                )
                error.phase = "batch_collect"
                return DeferredItem(request_id, "failed", error=error, provider_status="200")
            return DeferredItem(request_id, "succeeded", response=extracted, provider_status="200")
        status_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        error = api_error(
            provider=PROVIDER,
            phase="batch_collect",
            status_code=status_code,
            message=body_message(body) or f"HTTP {code}",
        )
        # The realtime hint ("retry later", "raise RetryPolicy limits") does not apply to a
        # request that already ran inside a batch: say how to get its answer instead.
        resubmit = "Submit the prompt again with defer(), or run it with run()."
        error.hint = resubmit if error.retryable else f"{error.hint} Then: {resubmit}"
        return DeferredItem(request_id, "failed", error=error, provider_status=str(code))
    error_body = line.get("error")
    code = field(error_body, "code")
    message = str(field(error_body, "message") or "the request did not run")
    if code == "batch_expired":
        return DeferredItem(
            request_id,
            "expired",
            error=_item_error(message, category="expired"),
            provider_status="batch_expired",
        )
    if code == "batch_cancelled":
        return DeferredItem(
            request_id,
            "cancelled",
            error=_item_error(message, category="cancelled"),
            provider_status="batch_cancelled",
        )
    return DeferredItem(
        request_id,
        "failed",
        error=_item_error(message, category=str(code) if code else "failed"),
        provider_status=str(code) if code else None,
    )


def _validation_message(batch: Any) -> str:
    errors = field(field(batch, "errors"), "data") or ()
    messages = []
    for error in list(errors)[:3]:
        line = field(error, "line")
        where = f" (line {line})" if line is not None else ""
        messages.append(f"{field(error, 'message') or field(error, 'code')}{where}")
    return "; ".join(messages) or "the batch failed"


def _write_jsonl(
    handle: IO[bytes],
    requests: Sequence[ProviderRequest],
    ids: Sequence[str],
    compile_request: Callable[[ProviderRequest], Mapping[str, Any]],
    url: str = ENDPOINT,
) -> int:
    for request_id, request in zip(ids, requests, strict=True):
        line = {
            "custom_id": request_id,
            "method": "POST",
            "url": url,
            "body": compile_request(request),
        }
        handle.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        handle.write(b"\n")
    return handle.tell()


class OpenAIBatches(BatchJobs[Mapping[str, Any]]):
    """The Batch API backend of one :class:`~pollux.providers.openai.OpenAIProvider`.

    Args:
        client: Returns the provider's ``AsyncOpenAI`` client (built lazily).
        compile_request: The provider's realtime ``compile``.
        model: The configured model.
        timeout_s: The request timeout, quoted in error hints.

    A service that serves the same Batch API (Azure OpenAI's global batch) subclasses it with
    its own name, endpoint, expiries and error mapping (the class attributes and ``_wrap``).
    """

    #: How limits and errors name the service.
    SERVICE = "OpenAI"
    #: The ``url`` of every input line and the batch's ``endpoint``.
    URL = ENDPOINT
    #: Expiry of the job's source uploads and of its input file.
    SOURCE_TTL_S = FILE_TTL_S
    INPUT_TTL_S = FILE_TTL_S
    #: Expiry of the result files the service writes.
    RESULT_TTL_S = OUTPUT_TTL_S
    #: Keep the model each answer names (``artifacts["model_version"]``; Azure's deployments).
    SERVED_MODEL = False

    def _wrap(self, exc: Exception, phase: str) -> PolluxError:
        return wrap_openai_error(exc, phase=phase, timeout_s=self._timeout_s)

    def _snapshot(self, handle: DeferredHandle, batch: Any) -> DeferredSnapshot:
        return snapshot_from_batch(handle, batch)

    async def _fetch(self, client: Any, job_id: str) -> Any:
        return await client.batches.retrieve(job_id)

    async def _cancel(self, client: Any, job_id: str) -> Any:
        return await client.batches.cancel(job_id)

    async def _delete_files(self, client: Any, file_ids: Sequence[str]) -> object:
        return await delete_files(client, file_ids)

    # -------------------------------------------------------------------- submit

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Upload sources and the JSONL input, then create the batch (all or nothing)."""
        if len(requests) > MAX_REQUESTS:
            raise ConfigurationError(
                f"An {self.SERVICE} batch takes at most {MAX_REQUESTS:,} requests, "
                f"got {len(requests):,}",
                hint="Split the prompts over several defer() calls.",
            )
        require_requests(requests)
        client = self._client()
        sources = requests[0].sources.sources
        prepared = await prepare_parts(
            client, sources, timeout_s=self._timeout_s, ttl_s=self.SOURCE_TTL_S
        )
        owned = list(prepared.owned)
        parts = PreparedSources(sources=tuple(sources), parts=prepared.parts, owned=prepared.owned)
        bound = [replace(request, sources=parts) for request in requests]
        try:
            input_file_id = await self._upload_input(client, bound, request_ids)
            owned.append(input_file_id)
            schema = any(r.requirements.output_schema is not None for r in requests)
            try:
                batch = await client.batches.create(
                    input_file_id=input_file_id,
                    endpoint=self.URL,
                    completion_window="24h",
                    metadata={
                        "pollux_request_count": str(len(requests)),
                        "pollux_has_response_schema": "1" if schema else "0",
                    },
                    output_expires_after={"anchor": "created_at", "seconds": self.RESULT_TTL_S},
                )
            except Exception as exc:
                raise self._wrap(exc, "batch_submit") from exc
        except BaseException:
            # Nobody else knows these ids: delete them before the error propagates.
            await asyncio.shield(delete_files(client, owned))
            raise
        submitted = _opt_time(field(batch, "created_at"))
        return DeferredJob(
            job_id=str(field(batch, "id")),
            model=str(requests[0].model or self._model),
            submitted_at=submitted if submitted is not None else time.time(),
            provider_state={"owned_file_ids": owned, "input_file_id": input_file_id},
        )

    async def _upload_input(
        self, client: Any, requests: Sequence[ProviderRequest], ids: Sequence[str]
    ) -> str:
        with tempfile.TemporaryFile() as handle:
            size = await asyncio.to_thread(
                _write_jsonl, handle, requests, ids, self._compile, self.URL
            )
            if size > MAX_INPUT_BYTES:
                raise ConfigurationError(
                    f"The batch input file would be {size / 1e6:.0f} MB; {self.SERVICE} accepts "
                    "at most "
                    f"{MAX_INPUT_BYTES // (1024 * 1024)} MB",
                    hint="Split the prompts over several defer() calls, or use fewer or smaller "
                    "text sources (file sources are uploaded once and only referenced).",
                )
            handle.seek(0)
            try:
                created = await client.files.create(
                    file=("pollux-batch.jsonl", handle, "application/jsonl"),
                    purpose="batch",
                    expires_after={"anchor": "created_at", "seconds": self.INPUT_TTL_S},
                )
            except Exception as exc:
                raise self._wrap(exc, "batch_submit") from exc
        return str(created.id)

    # ------------------------------------------------------------------- lifecycle

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The snapshot and, for an ended batch, every request's outcome."""
        batch = await self._retrieve(handle, "batch_collect")
        snapshot = snapshot_from_batch(handle, batch)
        if not snapshot.is_terminal:
            return DeferredResults(snapshot)
        items: list[DeferredItem] = []
        for file_id in (field(batch, "output_file_id"), field(batch, "error_file_id")):
            if isinstance(file_id, str) and file_id:
                items.extend([item async for item in self._items(file_id)])
        if snapshot.provider_status == "failed":
            seen = {item.request_id for item in items}
            message = _validation_message(batch)
            items.extend(
                DeferredItem(
                    request_id,
                    "failed",
                    error=_item_error(message, category="batch_failed"),
                    provider_status="failed",
                )
                for request_id in request_ids(handle.request_count)
                if request_id not in seen
            )
        await self._cleanup(handle)
        return DeferredResults(snapshot, tuple(items))

    async def _items(self, file_id: str) -> AsyncIterator[DeferredItem]:
        """The items of a result file, streamed line by line (never read whole into memory)."""
        client = self._client()
        try:
            async with client.files.with_streaming_response.content(file_id) as response:
                async for text in response.iter_lines():
                    if not text.strip():
                        continue
                    line = result_line(
                        text,
                        provider=PROVIDER,
                        message=f"openai batch result file {file_id} has a line that is not JSON",
                    )
                    if isinstance(line, Mapping):
                        yield item_from_line(line, served_model=self.SERVED_MODEL)
        except PolluxError:
            raise
        except Exception as exc:
            raise self._wrap(exc, "batch_collect") from exc
