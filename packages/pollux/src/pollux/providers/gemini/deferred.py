"""Deferred delivery for ``provider="gemini"``: the Gemini Batch API.

Submission:

- Sources are prepared once for the whole job. Files are uploaded into a job-owned registry
  (not the Session's, which deletes its uploads when it closes): they must outlive the Session,
  since the job runs later. Their names go into ``provider_state["owned_files"]``.
- Every prompt is compiled exactly as the realtime path compiles it. The job's JSONL (one
  ``{"key", "request"}`` line per prompt, the request in Gemini's REST JSON) is written to a
  temporary file off the event loop, never built in memory. Up to :data:`INLINE_MAX_BYTES` the
  requests are sent inline (``src=[{contents, config, metadata: {key}}]``); larger jobs upload
  the JSONL (streamed from disk) and submit it by file name; the file is owned too.
- If anything fails, everything uploaded so far is deleted before the error propagates.

Status normalization (:func:`normalize_status`): ``QUEUED``/``PENDING`` -> queued;
``RUNNING``/``PAUSED``/``UPDATING`` -> running; ``CANCELLING``; ``SUCCEEDED`` -> completed,
partial or failed by the per-request outcomes; ``PARTIALLY_SUCCEEDED`` -> partial; ``FAILED``;
``CANCELLED``/``EXPIRED`` -> partial when some requests succeeded, else themselves. The SDK does
not surface Google's running counts, so an active job reports every request pending; once it
ended the counts come from the results (inline answers, or the result file, read once and
remembered).

Collection reads ``dest.inlined_responses`` or downloads ``dest.file_name``; each result is
matched to its prompt by ``metadata.key`` / ``key`` (by position when a key is missing), so
results come back in prompt order. A per-request error is a failed item (Google's 499
``CANCELLED`` is a cancelled one, and the 504 ``DEADLINE_EXCEEDED`` of a request an expired job
never ran is an expired one). Owned files are deleted once an inspect, collect or cancel
sees the job terminal. A handle carries everything needed, so collection works after a restart.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

from pollux.errors import APIError, ConfigurationError, PolluxError
from pollux.interaction.deferred import DeferredSnapshot
from pollux.providers._batch_jobs import handle_snapshot, iso_time, require_requests, result_line
from pollux.providers._deferred import DeferredItem, DeferredJob, DeferredResults, request_ids
from pollux.providers._errors import api_error
from pollux.providers.base import PreparedSources

from .compile import rest_request
from .errors import PROVIDER, wrap_gemini_error
from .extract import extract_response, field
from .uploads import UploadRegistry

if TYPE_CHECKING:
    from pollux.interaction.deferred import DeferredHandle, DeferredStatus
    from pollux.providers.base import ProviderRequest

__all__ = [
    "INLINE_MAX_BYTES",
    "MAX_REQUESTS",
    "GeminiBatches",
    "GoogleBatchJobs",
    "normalize_status",
    "rest_request",
]

#: Jobs whose JSONL is at most this size are sent inline (Google allows 20 MB per request).
INLINE_MAX_BYTES = 10 * 1024 * 1024
#: Requests per job pollux submits (keep far below Google's file limits).
MAX_REQUESTS = 100_000

_TERMINAL = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_EXPIRED",
    }
)


def normalize_status(
    raw: str, *, request_count: int, succeeded: int, failed: int, known: bool
) -> tuple[DeferredStatus, int, int, int]:
    """Map a job state and outcome counts to ``(status, succeeded, failed, pending)``.

    ``known`` says whether the counts were read from results (only possible once the job
    ended); otherwise every request is reported pending.
    """
    terminal = raw in _TERMINAL
    if not known:
        succeeded = failed = 0
    succeeded = min(succeeded, request_count)
    failed = min(failed, request_count - succeeded)
    pending = request_count - succeeded - failed
    if terminal and known:
        failed, pending = failed + pending, 0
    status: DeferredStatus
    if raw in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING"):
        status = "queued"
    elif raw == "JOB_STATE_CANCELLING":
        status = "cancelling"
    elif raw == "JOB_STATE_SUCCEEDED":
        if not known:
            status = "completed"
        else:
            status = "completed" if failed == 0 else ("failed" if succeeded == 0 else "partial")
    elif raw == "JOB_STATE_PARTIALLY_SUCCEEDED":
        status = "partial"
    elif raw in ("JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"):
        expired = raw == "JOB_STATE_EXPIRED"
        status = "partial" if succeeded > 0 else ("expired" if expired else "cancelled")
    elif raw == "JOB_STATE_FAILED":
        status = "failed"
    else:
        status = "running"
    return status, succeeded, failed, pending


def _item_error(message: str, *, category: str, status: int | None = None) -> APIError:
    error = api_error(provider=PROVIDER, phase="batch_collect", status_code=status, message=message)
    resubmit = "Submit the prompt again with defer(), or run it with run()."
    error.hint = resubmit if error.retryable or status is None else f"{error.hint} Then: {resubmit}"
    error.error_category = category if status is None else (error.error_category or category)
    return error


def _item(request_id: str, response: Any, error: Any, *, job_state: str = "") -> DeferredItem:
    if error is not None:
        code = field(error, "code")
        message = str(field(error, "message") or "the request failed")
        code_int = code if isinstance(code, int) and not isinstance(code, bool) else None
        if code_int == 499 or field(error, "status") == "CANCELLED":
            return DeferredItem(
                request_id,
                "cancelled",
                error=_item_error(message, category="cancelled"),
                provider_status="CANCELLED",
            )
        if job_state == "JOB_STATE_EXPIRED" and (
            code_int == 504 or field(error, "status") == "DEADLINE_EXCEEDED"
        ):
            # A request an expired job never ran expired with it; nothing about it failed.
            return DeferredItem(
                request_id,
                "expired",
                error=_item_error(message, category="expired"),
                provider_status="DEADLINE_EXCEEDED",
            )
        return DeferredItem(
            request_id,
            "failed",
            error=_item_error(message, category="failed", status=code_int),
            provider_status=str(code) if code is not None else None,
        )
    if response is None:
        return DeferredItem(
            request_id,
            "failed",
            error=_item_error("no response", category="failed"),
        )
    try:
        extracted = extract_response(response)
    except PolluxError as exc:
        failure = exc if isinstance(exc, APIError) else _item_error(str(exc), category="failed")
        return DeferredItem(request_id, "failed", error=failure)
    return DeferredItem(request_id, "succeeded", response=extracted, provider_status="OK")


def _write_jsonl(
    handle: IO[bytes],
    requests: Sequence[ProviderRequest],
    ids: Sequence[str],
    compile_request: Callable[[ProviderRequest], Mapping[str, Any]],
) -> tuple[int, list[dict[str, Any]] | None]:
    """Write the JSONL; also keep the inline form while the file stays small."""
    inline: list[dict[str, Any]] | None = []
    for request_id, request in zip(ids, requests, strict=True):
        compiled = compile_request(request)
        line = {"key": request_id, "request": rest_request(compiled)}
        handle.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        handle.write(b"\n")
        if inline is not None:
            if handle.tell() > INLINE_MAX_BYTES:
                inline = None
            else:
                inline.append(
                    {
                        "contents": compiled["contents"],
                        "config": compiled["config"],
                        "metadata": {"key": request_id},
                    }
                )
    return handle.tell(), inline


class GoogleBatchJobs(ABC):
    """The lifecycle of a google-genai batch job, shared by the Gemini and Vertex AI backends.

    Both read a job through ``client.aio.batches`` with the same ``JOB_STATE_*`` names; this
    holds the status snapshot, ``inspect_deferred``, ``collect_deferred`` and
    ``cancel_deferred``, reading an ended job's outcomes once and releasing its staged input
    once. A subclass states what differs: how outcomes are read (:meth:`_read_outcomes`), what
    staged input is released (:meth:`_release`), how errors are wrapped (:meth:`_wrap`) and,
    if it must, how a job is fetched (:meth:`_get`).

    Args:
        client: Returns the provider's ``genai.Client`` (built lazily).
    """

    #: ``provider_status`` of a job whose state the SDK leaves empty.
    _unknown_state = "JOB_STATE_UNSPECIFIED"

    def __init__(self, client: Callable[[], Any]) -> None:
        self._client = client
        # Jobs whose staged input this backend already released (no repeated deletes).
        self._cleaned: set[str] = set()
        # Outcomes of ended jobs (read once per job).
        self._items: dict[str, tuple[DeferredItem, ...]] = {}

    # ---------------------------------------------------------------- the wire

    @abstractmethod
    def _wrap(self, exc: Exception, phase: str) -> PolluxError:
        """The provider's pollux error for an SDK exception in ``phase``."""

    @abstractmethod
    async def _read_outcomes(self, handle: DeferredHandle, job: Any) -> tuple[DeferredItem, ...]:
        """Every request's outcome of an ended job, in prompt order."""

    @abstractmethod
    async def _release(self, handle: DeferredHandle) -> None:
        """Delete what the job staged for its input, best effort."""

    # ---------------------------------------------------------------- lifecycle

    @staticmethod
    def _submitted(job: Any, model: str, provider_state: dict[str, Any]) -> DeferredJob:
        """The :class:`DeferredJob` of a job ``batches.create`` answered with."""
        submitted = iso_time(field(job, "create_time"))
        return DeferredJob(
            job_id=str(field(job, "name")),
            model=model,
            submitted_at=submitted if submitted is not None else time.time(),
            provider_state=provider_state,
        )

    def _state(self, job: Any) -> str:
        state = field(job, "state")
        return str(getattr(state, "value", state) or self._unknown_state)

    async def _get(self, handle: DeferredHandle, phase: str) -> Any:
        try:
            return await self._client().aio.batches.get(name=handle.job_id)
        except Exception as exc:
            raise self._wrap(exc, phase) from exc

    async def _cleanup(self, handle: DeferredHandle) -> None:
        if handle.job_id in self._cleaned:
            return
        await self._release(handle)
        self._cleaned.add(handle.job_id)

    async def _outcomes(self, handle: DeferredHandle, job: Any) -> tuple[DeferredItem, ...]:
        cached = self._items.get(handle.job_id)
        if cached is not None:
            return cached
        outcome = await self._read_outcomes(handle, job)
        self._items[handle.job_id] = outcome
        return outcome

    async def _snapshot(
        self, handle: DeferredHandle, job: Any
    ) -> tuple[DeferredSnapshot, tuple[DeferredItem, ...] | None]:
        raw = self._state(job)
        items = await self._outcomes(handle, job) if raw in _TERMINAL else None
        succeeded = sum(item.status == "succeeded" for item in items or ())
        normalized = normalize_status(
            raw,
            request_count=handle.request_count,
            succeeded=succeeded,
            failed=len(items or ()) - succeeded,
            known=items is not None,
        )
        snapshot = handle_snapshot(
            handle,
            normalized,
            provider_status=raw,
            completed_at=iso_time(field(job, "end_time")) if raw in _TERMINAL else None,
            expires_at=None,
        )
        return snapshot, items

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """The job's normalized status; its staged input is released once it ended."""
        snapshot, _ = await self._snapshot(handle, await self._get(handle, "batch_status"))
        if snapshot.is_terminal:
            await self._cleanup(handle)
        return snapshot

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The snapshot and, for an ended job, every request's outcome in prompt order."""
        snapshot, items = await self._snapshot(handle, await self._get(handle, "batch_collect"))
        if items is None:
            return DeferredResults(snapshot)
        await self._cleanup(handle)
        return DeferredResults(snapshot, items)

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """Ask the provider to cancel; a job that already ended is left alone."""
        job = await self._get(handle, "batch_cancel")
        if self._state(job) in _TERMINAL:
            await self._cleanup(handle)
            return
        try:
            await self._client().aio.batches.cancel(name=handle.job_id)
        except Exception as exc:
            raise self._wrap(exc, "batch_cancel") from exc
        job = await self._get(handle, "batch_cancel")
        if self._state(job) in _TERMINAL:
            await self._cleanup(handle)


class GeminiBatches(GoogleBatchJobs):
    """The Batch API backend of one :class:`~pollux.providers.gemini.GeminiProvider`.

    Args:
        client: Returns the provider's ``genai.Client`` (built lazily).
        compile_request: The provider's realtime ``compile``.
        model: The configured model.
        timeout_s: The request timeout, quoted in error hints.
    """

    def __init__(
        self,
        client: Callable[[], Any],
        compile_request: Callable[[ProviderRequest], Mapping[str, Any]],
        *,
        model: str,
        timeout_s: float,
    ) -> None:
        super().__init__(client)
        self._compile = compile_request
        self._model = model
        self._timeout_s = timeout_s

    def _wrap(self, exc: Exception, phase: str) -> PolluxError:
        return wrap_gemini_error(exc, phase=phase, timeout_s=self._timeout_s)

    # -------------------------------------------------------------------- submit

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Upload sources (and, for large jobs, the JSONL), then create the job."""
        require_requests(requests)
        if len(requests) > MAX_REQUESTS:
            raise ConfigurationError(
                f"A Gemini batch from pollux takes at most {MAX_REQUESTS:,} requests, "
                f"got {len(requests):,}",
                hint="Split the prompts over several defer() calls.",
            )
        client = self._client()
        model = str(requests[0].model or self._model)
        uploads = UploadRegistry(self._client, timeout_s=self._timeout_s)
        owned: list[str] = []
        try:
            sources = requests[0].sources.sources
            parts = await uploads.parts(sources)
            owned.extend(file.name for file in uploads._files.values())
            prepared = PreparedSources(sources=tuple(sources), parts=parts)
            bound = [replace(request, sources=prepared) for request in requests]
            with tempfile.TemporaryFile() as handle:
                _, inline = await asyncio.to_thread(
                    _write_jsonl, handle, bound, request_ids, self._compile
                )
                if inline is not None:
                    src: Any = inline
                else:
                    handle.seek(0)
                    name = await self._upload_jsonl(client, handle)
                    owned.append(name)
                    src = name
            try:
                job = await client.aio.batches.create(
                    model=model,
                    src=src,
                    config={"display_name": f"pollux-{len(requests)}-requests"},
                )
            except Exception as exc:
                raise self._wrap(exc, "batch_submit") from exc
        except BaseException:
            await asyncio.shield(self._delete(owned))
            raise
        return self._submitted(job, model, {"owned_files": owned, "inline": inline is not None})

    async def _upload_jsonl(self, client: Any, handle: IO[bytes]) -> str:
        def upload() -> Any:
            return client.files.upload(
                file=handle,
                config={"mime_type": "application/jsonl", "display_name": "pollux-batch.jsonl"},
            )

        try:
            created = await asyncio.to_thread(upload)
        except Exception as exc:
            raise self._wrap(exc, "batch_submit") from exc
        return str(field(created, "name"))

    async def _delete(self, names: Sequence[str]) -> None:
        client = self._client()

        async def one(name: str) -> None:
            try:
                await client.aio.files.delete(name=name)
            except asyncio.CancelledError:
                raise
            except Exception:
                pass  # already gone, or expired: files live 48 h anyway

        await asyncio.gather(*(one(name) for name in names))

    # ------------------------------------------------------------------- lifecycle

    async def _release(self, handle: DeferredHandle) -> None:
        state = handle.provider_state or {}
        owned = [str(n) for n in state.get("owned_files") or () if isinstance(n, str)]
        await self._delete(owned)

    async def _read_outcomes(self, handle: DeferredHandle, job: Any) -> tuple[DeferredItem, ...]:
        ids = request_ids(handle.request_count)
        raw = self._state(job)
        by_key: dict[str, DeferredItem] = {}
        dest = field(job, "dest")
        inlined = field(dest, "inlined_responses")
        if inlined:
            for position, entry in enumerate(inlined):
                key = field(field(entry, "metadata"), "key")
                if not isinstance(key, str) and position < len(ids):
                    key = ids[position]
                by_key[str(key)] = _item(
                    str(key), field(entry, "response"), field(entry, "error"), job_state=raw
                )
        file_name = field(dest, "file_name")
        if isinstance(file_name, str) and file_name:
            try:
                data = await self._client().aio.files.download(file=file_name)
            except Exception as exc:
                raise self._wrap(exc, "batch_collect") from exc
            for position, text in enumerate(bytes(data).decode("utf-8").splitlines()):
                if not text.strip():
                    continue
                line = result_line(
                    text,
                    provider=PROVIDER,
                    message=f"gemini batch result file {file_name} has a line that is not JSON",
                )
                key = line.get("key") if isinstance(line, Mapping) else None
                if not isinstance(key, str) and position < len(ids):
                    key = ids[position]
                by_key[str(key)] = _item(
                    str(key), line.get("response"), line.get("error"), job_state=raw
                )
        items: list[DeferredItem] = []
        for request_id in ids:
            item = by_key.get(request_id)
            if item is None:
                message = str(field(field(job, "error"), "message") or "the request did not run")
                status = (
                    "expired"
                    if raw == "JOB_STATE_EXPIRED"
                    else ("cancelled" if raw == "JOB_STATE_CANCELLED" else "failed")
                )
                item = DeferredItem(
                    request_id,
                    status,  # type: ignore[arg-type]
                    error=_item_error(message, category=status),
                    provider_status=raw,
                )
            items.append(item)
        return tuple(items)
