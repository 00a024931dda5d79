"""Vertex AI batch prediction (``batchPredictionJobs``) for Gemini, on the virtual clock.

A job reads one JSONL file from the emulator's Cloud Storage (:mod:`.gcs`), one
``{"request": GenerateContentRequest}`` per line, and writes
``{outputUriPrefix}/prediction-model-<time>/predictions.jsonl``: one line per request that ran,
``{"status": "", "processed_time", "request", "response"}`` or, for a failed request,
``{"status": "<error>", "processed_time", "request"}`` (the request echoed, so a caller matches
lines by what it sent, such as its ``labels``). The lifecycle and the request execution are the
Gemini Batch API emulation's (:mod:`._gemini_batches`: ``Emulator(batch_durations=...)``, the
48 h window, scripted replies and faults for ``vertex.generate.content``); states are spelled
``JOB_STATE_*``. An input that cannot be read or parsed fails the job (``JOB_STATE_FAILED``
with an ``error``), as on Vertex AI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pollux.testing._emulator._core import Call
from pollux.testing._emulator._http import Outcome, json_response

from . import _gemini_batches as batches
from ._gemini_common import GoogleError, body_of, invalid, model_name, normalize, page
from ._gemini_common import rfc3339 as stamp
from ._gemini_state import GeminiState

__all__ = ["cancel", "create", "delete", "get", "list_jobs"]

_STATES = {
    "BATCH_STATE_PENDING": "JOB_STATE_PENDING",
    "BATCH_STATE_RUNNING": "JOB_STATE_RUNNING",
    "BATCH_STATE_SUCCEEDED": "JOB_STATE_SUCCEEDED",
    "BATCH_STATE_FAILED": "JOB_STATE_FAILED",
    "BATCH_STATE_CANCELLED": "JOB_STATE_CANCELLED",
    "BATCH_STATE_EXPIRED": "JOB_STATE_EXPIRED",
}


@dataclass(slots=True)
class VertexJob(batches.BatchJob):
    """A Gemini batch job with Vertex's addressing and Cloud Storage input and output."""

    scope: str = ""  # projects/{p}/locations/{l}
    input_uri: str = ""
    output_prefix: str = ""
    output_dir: str | None = None


def _storage(call: Call) -> Any:
    return call.core.state["gcs"]


def _read_input(call: Call, uri: str) -> tuple[list[tuple[Any, dict[str, Any]]], str | None]:
    data = _storage(call).get_uri(uri) if uri.startswith("gs://") else None
    if data is None:
        return [], f"Failed to read the input file {uri}: the object does not exist."
    requests: list[tuple[Any, dict[str, Any]]] = []
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            return [], f"Failed to parse line {number} of {uri} as JSON."
        if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
            return [], f"Line {number} of {uri} has no 'request' object."
        requests.append((entry["request"], normalize(entry["request"])))
    if not requests:
        return [], f"The input file {uri} holds no requests."
    return requests, None


def _export(call: Call, state: GeminiState, job: VertexJob) -> None:
    """Write the predictions of an ended job to Cloud Storage (once)."""
    if job.output_dir is not None or job.result_file is None:
        return
    record = state.files.get(job.result_file.removeprefix("files/"))
    lines: list[str] = []
    when = stamp(job.ended or job.updated)
    for raw in (record.data if record is not None else b"").decode().splitlines():
        result = json.loads(raw)
        error = result.get("error")
        if isinstance(error, dict) and error.get("code") in (499, 504):
            continue  # never ran (cancelled or expired): Vertex exports only what ran
        line: dict[str, Any] = {"status": "", "processed_time": when, "request": result["key"]}
        if "response" in result:
            line["response"] = result["response"]
        else:
            line["status"] = f"{error.get('status', 'INTERNAL')}: {error.get('message', '')}"
        lines.append(json.dumps(line))
    directory = f"{job.output_prefix.rstrip('/')}/prediction-model-{when.replace(':', '_')}"
    data = ("\n".join(lines) + "\n").encode() if lines else b""
    _storage(call).put_uri(f"{directory}/predictions.jsonl", data)
    job.output_dir = directory


def _refresh(call: Call, job: VertexJob) -> None:
    state: GeminiState = call.state
    batches.refresh(state, job)
    if job.state in batches.TERMINAL:
        _export(call, state, job)


def job_json(job: VertexJob) -> dict[str, Any]:
    """The ``BatchPredictionJob`` resource."""
    out: dict[str, Any] = {
        "name": f"{job.scope}/batchPredictionJobs/{job.id}",
        "displayName": job.display_name or "",
        "model": f"publishers/google/models/{job.model}",
        "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": [job.input_uri]}},
        "outputConfig": {
            "predictionsFormat": "jsonl",
            "gcsDestination": {"outputUriPrefix": job.output_prefix},
        },
        "state": _STATES[job.state],
        "createTime": stamp(job.created),
        "updateTime": stamp(job.updated or job.created),
    }
    if job.state != "BATCH_STATE_PENDING":
        out["startTime"] = stamp(job.created + job.pending)
    if job.ended is not None:
        out["endTime"] = stamp(job.ended)
    if job.state in batches.TERMINAL and job.failure is None:
        ran = job.succeeded + job.failed
        out["completionStats"] = {
            "successfulCount": str(job.succeeded),
            "failedCount": str(job.failed),
            "incompleteCount": str(len(job.requests) - ran),
        }
    if job.output_dir is not None:
        out["outputInfo"] = {"gcsOutputDirectory": job.output_dir}
    if job.failure is not None:
        out["error"] = {"code": 3, "message": job.failure}
    return out


def create(call: Call) -> Outcome:
    """``POST batchPredictionJobs``."""
    state: GeminiState = call.state
    body = body_of(call)
    raw_model = body.get("model")
    if not isinstance(raw_model, str) or "models/" not in raw_model:
        raise invalid("BatchPredictionJob.model must be a publisher model resource name.")
    model = model_name(raw_model)
    allowed = call.core.settings.models
    if allowed and model not in allowed:
        raise GoogleError(404, f"Publisher Model `publishers/google/models/{model}` not found.")
    source = body.get("inputConfig") or {}
    uris = (source.get("gcsSource") or {}).get("uris") if isinstance(source, dict) else None
    if source.get("instancesFormat") != "jsonl" or not isinstance(uris, list) or len(uris) != 1:
        raise invalid("inputConfig must be instancesFormat 'jsonl' with one gcsSource uri.")
    dest = body.get("outputConfig") or {}
    prefix = (dest.get("gcsDestination") or {}).get("outputUriPrefix")
    if not isinstance(prefix, str) or not prefix.startswith("gs://"):
        raise invalid("outputConfig.gcsDestination.outputUriPrefix must be a gs:// URI.")
    requests, failure = _read_input(call, str(uris[0]))
    job = VertexJob.start(
        call,
        job_id=str(int(call.core.new_id(""), 16)),
        model=model,
        display_name=body.get("displayName"),
        requests=requests,
        inline=False,
        failure=failure,
        scope=f"projects/{call.params['project']}/locations/{call.params['location']}",
        input_uri=str(uris[0]),
        output_prefix=prefix,
    )
    state.batches[job.id] = job
    _refresh(call, job)
    return json_response(job_json(job))


def _job(call: Call) -> VertexJob:
    state: GeminiState = call.state
    job = state.batches.get(call.params["job_id"])
    scope = f"projects/{call.params['project']}/locations/{call.params['location']}"
    if not isinstance(job, VertexJob) or job.scope != scope:
        raise GoogleError(
            404,
            f"The BatchPredictionJob does not exist: {scope}/batchPredictionJobs/"
            f"{call.params['job_id']}",
        )
    _refresh(call, job)
    return job


def get(call: Call) -> Outcome:
    """``GET batchPredictionJobs/{id}``."""
    return json_response(job_json(_job(call)))


def cancel(call: Call) -> Outcome:
    """``POST batchPredictionJobs/{id}:cancel``."""
    job = _job(call)
    if job.state in batches.TERMINAL:
        raise GoogleError(
            400,
            f"Cannot cancel a job in state {_STATES[job.state]}.",
            "FAILED_PRECONDITION",
        )
    job.cancel_at = call.core.clock.now()
    _refresh(call, job)
    return json_response({})


def delete(call: Call) -> Outcome:
    """``DELETE batchPredictionJobs/{id}``."""
    job = _job(call)
    del call.state.batches[job.id]
    return json_response({"name": f"{job.scope}/operations/{job.id}", "done": True})


def list_jobs(call: Call) -> Outcome:
    """``GET batchPredictionJobs`` (newest first, paged)."""
    state: GeminiState = call.state
    scope = f"projects/{call.params['project']}/locations/{call.params['location']}"
    jobs = [j for j in state.batches.values() if isinstance(j, VertexJob) and j.scope == scope]
    for job in jobs:
        _refresh(call, job)
    jobs.reverse()
    return json_response(page(call, jobs, job_json, "batchPredictionJobs", 10))
