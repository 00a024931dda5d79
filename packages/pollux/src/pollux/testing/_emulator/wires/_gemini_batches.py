"""The Gemini Batch API on the virtual clock.

``models/{m}:batchGenerateContent`` takes inline requests or a JSONL file (``{"key", "request"}``
per line). A job is ``BATCH_STATE_PENDING`` for the ``validating`` stage of
``Emulator(batch_durations=...)``, ``RUNNING`` for ``in_progress`` plus ``finalizing``, then
``SUCCEEDED``; one still unfinished after 48 h (``batch_window_seconds``) is ``EXPIRED``, a
cancelled one ``CANCELLED``, one whose input file does not parse ``FAILED``. Requests run when
the job ends, through the same code as ``generateContent``, so scripted replies and
``ErrorResponse`` faults for ``gemini.generate.content`` apply to them; failures are per-request
errors. Inline jobs answer inline; file jobs write a results file (``files/{id}:download``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pollux.testing._emulator._core import ApiError, Call, fault_error
from pollux.testing._emulator._faults import ErrorResponse
from pollux.testing._emulator._http import Outcome, json_response
from pollux.testing._emulator._script import Reply

from . import _gemini_files as files
from ._gemini_common import GoogleError, body_of, google_error_body, invalid, normalize, page
from ._gemini_common import rfc3339 as stamp
from ._gemini_generate import generate_body
from ._gemini_request import check_model
from ._gemini_state import GeminiState

TERMINAL = ("BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED",
            "BATCH_STATE_EXPIRED")  # fmt: skip
_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1beta."

_Job = TypeVar("_Job", bound="BatchJob")


@dataclass(slots=True)
class BatchJob:
    """One batch job; ``refresh`` brings it up to the virtual clock."""

    id: str
    model: str
    display_name: str | None
    created: float
    pending: float
    running: float
    requests: list[tuple[Any, dict[str, Any]]]
    inline: bool
    source_file: str | None = None
    failure: str | None = None
    state: str = "BATCH_STATE_PENDING"
    updated: float = 0.0
    ended: float | None = None
    cancel_at: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    result_file: str | None = None
    succeeded: int = 0
    failed: int = 0
    done_count: int = 0

    @classmethod
    def start(
        cls: type[_Job],
        call: Call,
        *,
        job_id: str,
        model: str,
        display_name: object,
        requests: list[tuple[Any, dict[str, Any]]],
        inline: bool,
        failure: str | None,
        **extra: Any,
    ) -> _Job:
        """A job submitted now, staged by ``Emulator(batch_durations=...)``."""
        durations = call.core.settings.batch_durations
        return cls(
            id=job_id,
            model=model,
            display_name=display_name if isinstance(display_name, str) else None,
            created=call.core.clock.now(),
            pending=durations["validating"],
            running=durations["in_progress"] + durations["finalizing"],
            requests=requests,
            inline=inline,
            failure=failure,
            **extra,
        )

    def processed_by(self, when: float) -> int:
        """How many requests are done at virtual time ``when``."""
        start = self.created + self.pending
        if when < start:
            return 0
        if self.running <= 0:
            return len(self.requests)
        return min(
            len(self.requests), math.floor(len(self.requests) * (when - start) / self.running)
        )


def refresh(state: GeminiState, job: BatchJob) -> None:
    """Advance ``job`` to the virtual clock's present."""
    if job.state in TERMINAL:
        return
    now = state.core.clock.now()
    if job.cancel_at is not None:
        _finish(state, job, "BATCH_STATE_CANCELLED", job.cancel_at, job.processed_by(job.cancel_at))
        return
    started = job.created + job.pending
    expires = job.created + state.batch_window_seconds
    ends = started + job.running
    # A job expires when it is still pending or running at the end of its window.
    unfinished = started > expires or (job.failure is None and ends > expires)
    if unfinished and now >= expires:
        _finish(state, job, "BATCH_STATE_EXPIRED", expires, job.processed_by(expires))
        return
    if now < started:
        return
    if job.failure is not None:
        job.state = "BATCH_STATE_FAILED"
        job.ended = job.updated = started
        return
    job.state = "BATCH_STATE_RUNNING"
    job.updated = started
    if now >= ends:
        _finish(state, job, "BATCH_STATE_SUCCEEDED", ends, len(job.requests))
    else:
        job.done_count = job.processed_by(now)


def _status(error: ApiError) -> dict[str, Any]:
    # A batch line's error is a google.rpc.Status without the typed details of an HTTP error.
    body = google_error_body(error)["error"]
    body.pop("details", None)
    return {"error": body}


def _run_one(state: GeminiState, job: BatchJob, request: dict[str, Any]) -> dict[str, Any]:
    core = state.core
    item = core.scripts.take(state.generate_selector, generates=True)
    if isinstance(item, ErrorResponse):
        return _status(fault_error(item))
    reply = item if isinstance(item, Reply) else None
    try:
        body = generate_body(core, state, job.model, request, reply)
    except ApiError as exc:
        return _status(exc)
    return {"response": body}


def _finish(state: GeminiState, job: BatchJob, status: str, at: float, processed: int) -> None:
    results: list[tuple[dict[str, Any], Any]] = []
    for index, (meta, request) in enumerate(job.requests):
        if index < processed:
            result = _run_one(state, job, request)
        else:
            cancelled = status == "BATCH_STATE_CANCELLED"
            result = {
                "error": {
                    "code": 499 if cancelled else 504,
                    "message": "The batch was cancelled before this request ran."
                    if cancelled
                    else "The batch expired before this request ran.",
                    "status": "CANCELLED" if cancelled else "DEADLINE_EXCEEDED",
                }
            }
        results.append((result, meta))
    job.succeeded = sum(1 for r, _ in results if "response" in r)
    job.failed = len(results) - job.succeeded
    job.done_count = len(results)
    if job.inline:
        job.results = [{**r, **({"metadata": m} if m is not None else {})} for r, m in results]
    else:
        lines = [json.dumps({"key": m, **r}) for r, m in results]
        data = ("\n".join(lines) + "\n").encode() if lines else b""
        record = state.add_file(f"batch-{job.id}-results", "application/jsonl", data, "GENERATED")
        job.result_file = record.name
    job.state = status
    job.ended = job.updated = at


def job_json(job: BatchJob) -> dict[str, Any]:
    """The batch as the Operation resource the API returns."""
    pending = len(job.requests) - job.done_count
    stats: dict[str, Any] = {
        "requestCount": str(len(job.requests)),
        "pendingRequestCount": str(pending),
    }
    if job.state in TERMINAL:
        stats["successfulRequestCount"] = str(job.succeeded)
        stats["failedRequestCount"] = str(job.failed)
    metadata: dict[str, Any] = {
        "@type": _TYPE + "GenerateContentBatch",
        "name": f"batches/{job.id}",
        "model": f"models/{job.model}",
        "state": job.state,
        "createTime": stamp(job.created),
        "updateTime": stamp(job.updated or job.created),
        "batchStats": stats,
    }
    if job.display_name is not None:
        metadata["displayName"] = job.display_name
    if job.source_file is not None:
        metadata["inputConfig"] = {"fileName": job.source_file}
    out: dict[str, Any] = {"name": f"batches/{job.id}", "metadata": metadata}
    if job.ended is not None:
        metadata["endTime"] = stamp(job.ended)
    if job.state in TERMINAL:
        out["done"] = True
        output: dict[str, Any] | None = None
        if job.result_file is not None:
            output = {"responsesFile": job.result_file}
        elif job.inline and job.state != "BATCH_STATE_FAILED":
            output = {"inlinedResponses": {"inlinedResponses": job.results}}
        if output is not None:
            metadata["output"] = output
            out["response"] = {"@type": _TYPE + "GenerateContentBatchOutput", **output}
        if job.failure is not None:
            out["error"] = {"code": 400, "message": job.failure}
    return out


def _file_requests(
    state: GeminiState, name: str
) -> tuple[list[tuple[Any, dict[str, Any]]], str | None]:
    record = state.live_file(name)
    if record is None:
        raise files.not_found(name.removeprefix("files/"))
    requests: list[tuple[Any, dict[str, Any]]] = []
    for number, raw in enumerate(record.data.decode("utf-8", "replace").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            return [], f"Failed to parse line {number} of {record.name} as JSON."
        if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
            return [], f"Line {number} of {record.name} has no 'request' object."
        requests.append((entry.get("key"), normalize(entry["request"])))
    if not requests:
        return [], f"The input file {record.name} holds no requests."
    return requests, None


def create(call: Call) -> Outcome:
    """``POST models/{model}:batchGenerateContent``."""
    state: GeminiState = call.state
    model = check_model(call.core, call.params["model"], "batchGenerateContent")
    body = body_of(call)
    batch = body.get("batch")
    if not isinstance(batch, dict):
        raise invalid("* BatchGenerateContentRequest.batch: batch is required.\n")
    source = batch.get("inputConfig")
    if not isinstance(source, dict):
        raise invalid("* GenerateContentBatch.input_config: input_config is required.\n")
    failure = None
    file_name = source.get("fileName")
    inline = source.get("requests")
    if isinstance(file_name, str) and file_name:
        requests, failure = _file_requests(state, file_name)
        is_inline = False
    elif (
        isinstance(inline, dict) and isinstance(inline.get("requests"), list) and inline["requests"]
    ):
        requests = []
        for index, entry in enumerate(inline["requests"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
                raise invalid(
                    f"* GenerateContentBatch.input_config.requests.requests[{index}].request: "
                    "request is required.\n"
                )
            requests.append((entry.get("metadata"), entry["request"]))
        is_inline = True
    else:
        raise invalid(
            "* GenerateContentBatch.input_config: one of file_name or requests is required.\n"
        )
    job = BatchJob.start(
        call,
        job_id=call.core.new_id(""),
        model=model,
        display_name=batch.get("displayName"),
        requests=requests,
        inline=is_inline,
        failure=failure,
        source_file=file_name if not is_inline else None,
    )
    state.batches[job.id] = job
    refresh(state, job)
    return json_response(job_json(job))


def _job(call: Call) -> BatchJob:
    state: GeminiState = call.state
    job = state.batches.get(call.params["batch_id"])
    if job is None:
        raise GoogleError(404, f"Batch batches/{call.params['batch_id']} not found.")
    refresh(state, job)
    assert isinstance(job, BatchJob)
    return job


def get(call: Call) -> Outcome:
    """``GET batches/{id}``."""
    return json_response(job_json(_job(call)))


def cancel(call: Call) -> Outcome:
    """``POST batches/{id}:cancel``."""
    job = _job(call)
    if job.state in TERMINAL:
        raise GoogleError(
            400, f"Batch batches/{job.id} is already in state {job.state}.", "FAILED_PRECONDITION"
        )
    job.cancel_at = call.core.clock.now()
    refresh(call.state, job)
    return json_response({})


def delete(call: Call) -> Outcome:
    """``DELETE batches/{id}``."""
    job = _job(call)
    del call.state.batches[job.id]
    return json_response({})


def list_batches(call: Call) -> Outcome:
    """``GET batches`` (newest first, paged)."""
    state: GeminiState = call.state
    jobs = list(state.batches.values())
    for job in jobs:
        refresh(state, job)
    jobs.reverse()
    return json_response(page(call, jobs, job_json, "operations", 10))
