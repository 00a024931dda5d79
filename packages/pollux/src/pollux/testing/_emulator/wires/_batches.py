"""The OpenAI Batch API on the virtual clock.

A job is validated, processed and finalized in virtual time (``Emulator(batch_durations=...)``);
its state is computed from the clock whenever it is read, so ``emu.advance(seconds)`` is all a
test needs. A job whose processing would end after its 24 h completion window expires; requests
left unprocessed by expiry or cancellation land in the error file with ``batch_expired`` or
``batch_cancelled``. Lines run through the same code as the real-time endpoint when the job
finishes, so scripted replies and ``ErrorResponse`` faults for ``openai.responses`` apply to them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pollux.testing._emulator._core import ApiError, Call, Core, fault_error
from pollux.testing._emulator._faults import ErrorResponse
from pollux.testing._emulator._http import Outcome, json_response
from pollux.testing._emulator._script import Reply

from . import _files, chat
from ._common import bad_request, openai_error_body
from ._responses import OpenAIState, response_body

#: The batch endpoints, and the route (under the job's wire) whose scripts their lines take.
ENDPOINTS = {
    "/v1/responses": "responses.create",
    "/v1/chat/completions": "chat.completions",
}
#: A wire's own check of one input line: ``(code, message, param)`` when it is refused.
LineCheck = Callable[[Mapping[str, Any]], "tuple[str, str, str | None] | None"]
WINDOW = 24 * 3600
TERMINAL = ("completed", "failed", "expired", "cancelled")


@dataclass(slots=True)
class Job:
    """One batch job; ``refresh`` brings it up to the virtual clock."""

    id: str
    endpoint: str
    input_file_id: str
    metadata: dict[str, str] | None
    created_at: float
    durations: dict[str, float]
    lines: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    status: str = "validating"
    stamps: dict[str, int] = field(default_factory=dict)
    cancel_at: float | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    #: The wire the job was created on (its lines take that wire's scripts and faults).
    wire: str = "openai"

    def processed_by(self, when: float) -> int:
        """How many lines are done at virtual time ``when``."""
        start = self.created_at + self.durations["validating"]
        if when < start:
            return 0
        span = self.durations["in_progress"]
        if span <= 0:
            return len(self.lines)
        return min(len(self.lines), math.floor(len(self.lines) * (when - start) / span))

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created_at),
            "in_progress_at": self.stamps.get("in_progress_at"),
            "expires_at": int(self.created_at + WINDOW),
            "finalizing_at": self.stamps.get("finalizing_at"),
            "completed_at": self.stamps.get("completed_at"),
            "failed_at": self.stamps.get("failed_at"),
            "expired_at": self.stamps.get("expired_at"),
            "cancelling_at": self.stamps.get("cancelling_at"),
            "cancelled_at": self.stamps.get("cancelled_at"),
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }


def _validate_lines(
    data: bytes, endpoint: str, check: LineCheck | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()

    def error(code: str, message: str, line: int, param: str | None = None) -> None:
        errors.append({"code": code, "message": message, "param": param, "line": line})

    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            error("invalid_json_line", "This line is not parseable as valid JSON.", number)
            continue
        if not isinstance(entry, dict):
            error("invalid_request", "Each line must be a JSON object.", number)
            continue
        custom_id = entry.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            error("missing_required_parameter", "Missing 'custom_id'.", number, "custom_id")
        elif custom_id in seen:
            error(
                "duplicate_custom_id",
                f"The custom_id '{custom_id}' is used more than once in this file.",
                number,
                "custom_id",
            )
        else:
            seen.add(custom_id)
        if entry.get("method") != "POST":
            error("invalid_method", "The method must be 'POST'.", number, "method")
        if entry.get("url") != endpoint:
            error(
                "mismatched_endpoint",
                f"The url '{entry.get('url')}' does not match the batch endpoint '{endpoint}'.",
                number,
                "url",
            )
        if not isinstance(entry.get("body"), dict):
            error("missing_required_parameter", "Missing 'body'.", number, "body")
        elif check is not None and (refused := check(entry)) is not None:
            error(refused[0], refused[1], number, refused[2])
        lines.append(entry)
    if not lines and not errors:
        error("empty_file", "The input file is empty.", 1)
    return lines, errors


def refresh(state: OpenAIState, job: Job) -> None:
    """Advance ``job`` to the virtual clock's present."""
    if job.status in TERMINAL:
        return
    now = state.core.clock.now()
    if job.cancel_at is not None:
        end = job.cancel_at + job.durations["cancelling"]
        if now >= end:
            _finish(state, job, "cancelled", end, job.processed_by(job.cancel_at))
        return
    validated = job.created_at + job.durations["validating"]
    expires = job.created_at + WINDOW
    if now < validated:
        # A job still validating when its window closes expires with nothing processed,
        # rather than staying in "validating" forever.
        if now >= expires:
            _finish(state, job, "expired", expires, 0)
        return
    if job.errors:
        job.status = "failed"
        job.stamps["failed_at"] = int(validated)
        return
    job.total = len(job.lines)
    job.stamps.setdefault("in_progress_at", int(validated))
    job.status = "in_progress"
    processed_end = validated + job.durations["in_progress"]
    done_at = processed_end + job.durations["finalizing"]
    if done_at > expires and now >= expires:
        _finish(state, job, "expired", expires, job.processed_by(expires))
        return
    if now < processed_end:
        job.completed = job.processed_by(now)
        return
    job.completed = len(job.lines)
    job.stamps.setdefault("finalizing_at", int(processed_end))
    job.status = "finalizing"
    if now >= done_at:
        _finish(state, job, "completed", done_at, len(job.lines))


def _run_line(state: OpenAIState, job: Job, entry: dict[str, Any]) -> tuple[int, Any]:
    core: Core = state.core
    route = f"{job.wire}.{ENDPOINTS[job.endpoint]}"
    item = core.scripts.take(route, generates=True)
    if isinstance(item, ErrorResponse):
        error = fault_error(item)
        return error.status, openai_error_body(error)
    reply = item if isinstance(item, Reply) else None
    body = dict(entry["body"])
    body.pop("stream", None)
    try:
        if job.endpoint == "/v1/responses":
            return 200, response_body(core, state, body, reply)
        chat.reject_unknown(body, chat.OPENAI_CHAT_PARAMS)
        return 200, chat.completion_body(core, body, reply)
    except ApiError as exc:
        return exc.status, openai_error_body(exc)


def _finish(state: OpenAIState, job: Job, status: str, at: float, processed: int) -> None:
    outputs: list[str] = []
    failures: list[str] = []
    for entry in job.lines[:processed]:
        code, body = _run_line(state, job, entry)
        line = {
            "id": state.core.new_id("batch_req_"),
            "custom_id": entry.get("custom_id"),
            "response": {
                "status_code": code,
                "request_id": state.core.new_id("req_"),
                "body": body,
            },
            "error": None,
        }
        (outputs if code == 200 else failures).append(json.dumps(line))
    reason = {"expired": "batch_expired", "cancelled": "batch_cancelled"}.get(status)
    if reason is not None:
        message = (
            "This request could not be executed before the completion window expired."
            if reason == "batch_expired"
            else "This request was cancelled before it was executed."
        )
        for entry in job.lines[processed:]:
            line = {
                "id": state.core.new_id("batch_req_"),
                "custom_id": entry.get("custom_id"),
                "response": None,
                "error": {"code": reason, "message": message},
            }
            failures.append(json.dumps(line))
    if outputs:
        data = ("\n".join(outputs) + "\n").encode()
        job.output_file_id = _files.add_file(
            state, f"batch_{job.id}_output.jsonl", "batch_output", data
        ).id
    if failures:
        data = ("\n".join(failures) + "\n").encode()
        job.error_file_id = _files.add_file(
            state, f"batch_{job.id}_error.jsonl", "batch_output", data
        ).id
    job.total = len(job.lines)
    job.completed = len(outputs)
    job.failed = len(failures)
    job.status = status
    job.stamps[f"{status}_at"] = int(at)


def create(call: Call, *, check: LineCheck | None = None) -> Outcome:
    """``POST /batches``; ``check`` adds a wire's own rule for each input line."""
    body = call.body()
    state: OpenAIState = call.state
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        supported = ", ".join(f"'{e}'" for e in ENDPOINTS)
        raise bad_request(
            f"Invalid value: '{endpoint}'. Supported values are: {supported}.",
            "endpoint",
            "invalid_value",
        )
    if body.get("completion_window") != "24h":
        raise bad_request(
            f"Invalid value: '{body.get('completion_window')}'. Supported values are: '24h'.",
            "completion_window",
            "invalid_value",
        )
    file_id = body.get("input_file_id")
    record = state.live_file(str(file_id)) if isinstance(file_id, str) else None
    if record is None:
        raise _files.not_found(str(file_id))
    if record.purpose != "batch":
        raise bad_request(
            f"The input file '{file_id}' must be uploaded with purpose 'batch', not "
            f"'{record.purpose}'.",
            "input_file_id",
        )
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, Mapping)
        or len(metadata) > 16
        or not all(isinstance(v, str) and len(v) <= 512 for v in metadata.values())
    ):
        raise bad_request(
            "Invalid 'metadata': at most 16 string values of up to 512 characters.", "metadata"
        )
    lines, errors = _validate_lines(record.data, str(endpoint), check)
    durations = dict(call.core.settings.batch_durations)
    job = Job(
        id=call.core.new_id("batch_"),
        endpoint=str(endpoint),
        input_file_id=record.id,
        metadata=dict(metadata) if metadata is not None else None,
        created_at=call.core.clock.now(),
        durations=durations,
        lines=lines,
        errors=errors,
        wire=call.wire.name,
    )
    state.batches[job.id] = job
    return json_response(job.as_json())


def _job(call: Call) -> Job:
    state: OpenAIState = call.state
    job = state.batches.get(call.params["batch_id"])
    if job is None:
        raise ApiError(
            404,
            f"No batch found with id '{call.params['batch_id']}'.",
            error_type="invalid_request_error",
            param="batch_id",
        )
    refresh(state, job)
    assert isinstance(job, Job)
    return job


def retrieve(call: Call) -> Outcome:
    """``GET /batches/{batch_id}``."""
    return json_response(_job(call).as_json())


def cancel(call: Call) -> Outcome:
    """``POST /batches/{batch_id}/cancel``."""
    job = _job(call)
    if job.status in TERMINAL:
        raise bad_request(f"Cannot cancel a batch with status '{job.status}'.", "batch_id")
    if job.cancel_at is None:
        now = call.core.clock.now()
        job.cancel_at = now
        job.completed = job.processed_by(now)
        job.status = "cancelling"
        job.stamps["cancelling_at"] = int(now)
        refresh(call.state, job)
    return json_response(job.as_json())


def list_batches(call: Call) -> Outcome:
    """``GET /batches`` (newest first)."""
    state: OpenAIState = call.state
    jobs = list(state.batches.values())
    for job in jobs:
        refresh(state, job)
    data = [job.as_json() for job in reversed(jobs)]
    return json_response(
        {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )
