"""Deferred delivery for ``provider="vertex"``: Vertex AI batch prediction through Cloud Storage.

Vertex batch prediction takes its input only from Cloud Storage or BigQuery; pollux uses Cloud
Storage under ``Config.staging_uri`` (``gs://bucket/prefix``):

- Submission: sources are prepared once for the job (inline, as on the realtime path: Vertex
  has no Files API); every prompt is compiled as the realtime path compiles it, and the job's
  JSONL (one ``{"request": GenerateContentRequest}`` line per prompt, the prompt's request id
  in the request's ``labels`` as ``pollux_key``) is written to a temporary file off the event
  loop, then uploaded to ``<staging_uri>/pollux-<id>/input.jsonl`` (:mod:`.storage`). The job
  is created with ``client.aio.batches.create(src=<input>, config={"dest":
  "<staging_uri>/pollux-<id>/output"})``. If the create fails, the input object is deleted.
- Status: the SDK's ``JOB_STATE_*`` names, normalized as for the Gemini Batch API
  (:func:`pollux.providers.gemini.deferred.normalize_status`); once a job ended the counts come
  from its predictions.
- Collection: every ``.jsonl`` object under the job's ``output_info.gcs_output_directory``
  is read; each line echoes its request, and is matched to its prompt by the request's
  ``labels.pollux_key`` (by position when missing). A line with a ``response`` is a succeeded
  item; one with a non-empty ``status`` a failed item; a prompt with no line failed, expired or
  was cancelled with the job. The predictions are read once per job and remembered; the
  input object is deleted once an inspect, collect or cancel sees the job ended (the
  predictions are left in the bucket, the job's record of what was answered).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

from pollux.errors import ConfigurationError, PolluxError
from pollux.providers._batch_jobs import require_requests, result_line
from pollux.providers._deferred import DeferredItem, DeferredJob, request_ids
from pollux.providers.base import PreparedSources
from pollux.providers.gemini.compile import rest_request
from pollux.providers.gemini.deferred import MAX_REQUESTS, GoogleBatchJobs
from pollux.providers.gemini.deferred import _item as gemini_item
from pollux.providers.gemini.extract import field

from .errors import PROVIDER
from .sources import VertexSources
from .storage import CloudStorage

if TYPE_CHECKING:
    from pollux.interaction.deferred import DeferredHandle
    from pollux.providers.base import ProviderRequest

__all__ = ["LABEL", "STAGING_HINT", "VertexBatches"]

#: What to do when ``defer`` has no staging URI.
STAGING_HINT = (
    "Vertex AI batch prediction reads its input from Cloud Storage: pass "
    "Config(staging_uri='gs://<bucket>/<prefix>') (or set POLLUX_VERTEX_STAGING_URI) with a "
    "bucket the credentials may write and Vertex AI may read, or use run_many() for realtime "
    "answers."
)

#: The request label that carries a prompt's request id through the job.
LABEL = "pollux_key"


def _write_jsonl(
    handle: IO[bytes],
    requests: Sequence[ProviderRequest],
    ids: Sequence[str],
    compile_request: Callable[[ProviderRequest], Mapping[str, Any]],
) -> None:
    for request_id, request in zip(ids, requests, strict=True):
        body = rest_request(compile_request(request))
        body["labels"] = {LABEL: request_id}
        line = json.dumps({"request": body}, ensure_ascii=False, separators=(",", ":"))
        handle.write(line.encode("utf-8"))
        handle.write(b"\n")


class VertexBatches(GoogleBatchJobs):
    """The batch-prediction backend of one :class:`~pollux.providers.vertex.VertexProvider`.

    Args:
        client: Returns the provider's (Vertex) ``genai.Client``.
        compile_request: The provider's realtime ``compile``.
        storage: Cloud Storage over the Session's transport.
        ready: Settles the credentials and project (awaited before any call).
        wrap: The provider's error mapping, ``wrap(exc, phase=...)``.
        model: The configured model.
        staging_uri: ``Config.staging_uri`` (None: submission is refused).
        scope: Returns ``projects/{project}/locations/{location}`` of the provider.
    """

    # A job the SDK returns without a state reports an empty ``provider_status``.
    _unknown_state = ""

    def __init__(
        self,
        client: Callable[[], Any],
        compile_request: Callable[[ProviderRequest], Mapping[str, Any]],
        storage: CloudStorage,
        *,
        ready: Callable[[str], Any],
        wrap: Callable[..., PolluxError],
        model: str,
        staging_uri: str | None,
        scope: Callable[[], str],
    ) -> None:
        super().__init__(client)
        self._compile = compile_request
        self._storage = storage
        self._ready = ready
        self._wrap_error = wrap
        self._model = model
        self._staging = staging_uri.rstrip("/") if staging_uri else None
        self._scope = scope

    def _wrap(self, exc: Exception, phase: str) -> PolluxError:
        return self._wrap_error(exc, phase=phase)

    # -------------------------------------------------------------------- submit

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Stage the JSONL in Cloud Storage, then create the batch prediction job."""
        require_requests(requests)
        if self._staging is None:
            raise ConfigurationError(
                "provider='vertex' needs Config(staging_uri='gs://...') for deferred delivery",
                hint=STAGING_HINT,
            )
        if len(requests) > MAX_REQUESTS:
            raise ConfigurationError(
                f"A Vertex AI batch from pollux takes at most {MAX_REQUESTS:,} requests, "
                f"got {len(requests):,}",
                hint="Split the prompts over several defer() calls.",
            )
        await self._ready("batch_submit")
        model = str(requests[0].model or self._model)
        sources = requests[0].sources.sources
        prepared = PreparedSources(
            sources=tuple(sources), parts=await VertexSources().parts(sources)
        )
        bound = [replace(request, sources=prepared) for request in requests]
        folder = f"{self._staging}/pollux-{uuid.uuid4().hex[:16]}"
        input_uri, output_prefix = f"{folder}/input.jsonl", f"{folder}/output"
        with tempfile.TemporaryFile() as handle:
            await asyncio.to_thread(_write_jsonl, handle, bound, request_ids, self._compile)
            await self._storage.upload(input_uri, handle)
        try:
            job = await self._client().aio.batches.create(
                model=model,
                src=input_uri,
                config={
                    "dest": output_prefix,
                    "display_name": f"pollux-{len(requests)}-requests",
                },
            )
        except BaseException as exc:
            await asyncio.shield(self._forget_input(input_uri))
            if isinstance(exc, Exception):
                raise self._wrap(exc, "batch_submit") from exc
            raise
        return self._submitted(job, model, {"input_uri": input_uri, "output_prefix": output_prefix})

    async def _forget_input(self, uri: str) -> None:
        # Best effort: the object is small, and named after the job.
        with contextlib.suppress(PolluxError):
            await self._storage.delete(uri)

    # ------------------------------------------------------------------- lifecycle

    async def _get(self, handle: DeferredHandle, phase: str) -> Any:
        await self._ready(phase)
        # The SDK addresses a job by its id under the client's own project and location.
        scope = self._scope()
        if not handle.job_id.startswith(f"{scope}/"):
            raise ConfigurationError(
                f"Vertex AI job {handle.job_id!r} is not in {scope}",
                hint="Reach it with the project and location it was submitted in: "
                "Config(project=..., location=...) as in the job name.",
            )
        return await super()._get(handle, phase)

    async def _release(self, handle: DeferredHandle) -> None:
        # The predictions stay in the bucket: they are the job's record of what was answered.
        uri = (handle.provider_state or {}).get("input_uri")
        if isinstance(uri, str) and uri.startswith("gs://"):
            await self._forget_input(uri)

    async def _lines(self, directory: str) -> list[Mapping[str, Any]]:
        lines: list[Mapping[str, Any]] = []
        for uri in await self._storage.names(directory.rstrip("/") + "/"):
            if not uri.endswith(".jsonl"):
                continue
            data = await self._storage.read(uri)
            for text in data.decode("utf-8").splitlines():
                if not text.strip():
                    continue
                line = result_line(
                    text,
                    provider=PROVIDER,
                    message=f"vertex batch predictions {uri} hold a line that is not JSON",
                    hint="Collect again; if it persists, the object is damaged.",
                )
                if isinstance(line, Mapping):
                    lines.append(line)
        return lines

    async def _read_outcomes(self, handle: DeferredHandle, job: Any) -> tuple[DeferredItem, ...]:
        ids = request_ids(handle.request_count)
        raw = self._state(job)
        by_key: dict[str, DeferredItem] = {}
        directory = field(field(job, "output_info"), "gcs_output_directory")
        if isinstance(directory, str) and directory.startswith("gs://"):
            for position, line in enumerate(await self._lines(directory)):
                labels = field(line.get("request"), "labels")
                key = field(labels, LABEL)
                if not isinstance(key, str):
                    key = ids[position] if position < len(ids) else str(position)
                status = line.get("status")
                error = {"message": str(status)} if status else None
                by_key[key] = gemini_item(key, line.get("response"), error, job_state=raw)
        items: list[DeferredItem] = []
        for request_id in ids:
            item = by_key.get(request_id)
            if item is None:
                item = gemini_item(
                    request_id,
                    None,
                    {
                        "message": str(field(field(job, "error"), "message") or "did not run"),
                        "status": {
                            "JOB_STATE_CANCELLED": "CANCELLED",
                            "JOB_STATE_EXPIRED": "DEADLINE_EXCEEDED",
                        }.get(raw),
                        "code": {"JOB_STATE_CANCELLED": 499, "JOB_STATE_EXPIRED": 504}.get(raw),
                    },
                    job_state=raw,
                )
            items.append(_relabelled(item))
        return tuple(items)


def _relabelled(item: DeferredItem) -> DeferredItem:
    """The item with its error in Vertex's name (the Gemini helpers built it)."""
    from .errors import relabel

    if item.error is not None:
        relabel(item.error)
    return item
