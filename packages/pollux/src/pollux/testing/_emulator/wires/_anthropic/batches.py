"""Message Batches on the virtual clock: create, retrieve, list, cancel, delete, results (JSONL).

A batch is ``in_progress`` for the emulator's ``validating + in_progress + finalizing`` batch
durations (12 virtual seconds by default), then ``ended``; ``cancel`` makes it ``canceling`` for
the ``cancelling`` duration, then ``ended`` with the requests not yet processed ``canceled``. A
batch that would not end within 24 hours ends at ``expires_at`` with the rest ``expired``. Each
request runs through the same code as ``POST /v1/messages`` when the batch ends, so scripted
replies and ``ErrorResponse`` faults for ``anthropic.messages.create`` apply to it; an invalid
request is ``errored`` with the API's error body.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from pollux.testing._emulator._core import ApiError, Call, fault_error
from pollux.testing._emulator._faults import ErrorResponse
from pollux.testing._emulator._http import Outcome, Response, json_response
from pollux.testing._emulator._script import Reply

from .errors import error_body, invalid, not_found, require_headers
from .messages import betas, message_body
from .paging import page
from .state import AnthropicState, rfc3339

__all__ = ["cancel", "create", "delete", "list_batches", "results", "retrieve"]

WINDOW = 24 * 3600
MAX_REQUESTS = 100_000
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
CREATE_ROUTE = "anthropic.messages.create"


@dataclass(slots=True)
class Batch:
    """One Message Batch; :func:`refresh` brings it up to the virtual clock."""

    id: str
    requests: list[dict[str, Any]]
    created_at: float
    span: float
    cancelling: float
    status: str = "in_progress"
    cancel_at: float | None = None
    ended_at: float | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    results_url: str | None = None
    betas: frozenset[str] = frozenset()

    def processed_by(self, when: float) -> int:
        """How many requests are done at virtual time ``when`` (progress is linear)."""
        if self.span <= 0:
            return len(self.requests)
        done = len(self.requests) * (when - self.created_at) / self.span
        return max(0, min(len(self.requests), math.floor(done)))

    def as_json(self) -> dict[str, Any]:
        counts = self.counts or {
            "processing": len(self.requests),
            "succeeded": 0,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
        }
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status,
            "request_counts": counts,
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.created_at + WINDOW),
            "ended_at": rfc3339(self.ended_at) if self.ended_at is not None else None,
            "cancel_initiated_at": rfc3339(self.cancel_at) if self.cancel_at is not None else None,
            "archived_at": None,
            "results_url": self.results_url,
        }


def refresh(state: AnthropicState, batch: Batch, origin: str) -> None:
    """Advance ``batch`` to the virtual clock's present."""
    if batch.status == "ended":
        return
    now = state.core.clock.now()
    if batch.cancel_at is not None:
        end = batch.cancel_at + batch.cancelling
        if now >= end:
            _finish(state, batch, end, batch.processed_by(batch.cancel_at), "canceled", origin)
        return
    done_at = batch.created_at + batch.span
    expires = batch.created_at + WINDOW
    if done_at > expires and now >= expires:
        _finish(state, batch, expires, batch.processed_by(expires), "expired", origin)
    elif now >= done_at:
        _finish(state, batch, done_at, len(batch.requests), "expired", origin)


def _run(state: AnthropicState, params: dict[str, Any], betas: frozenset[str]) -> dict[str, Any]:
    core = state.core
    item = core.scripts.take(CREATE_ROUTE, generates=True)
    if isinstance(item, ErrorResponse):
        return {"type": "errored", "error": error_body(fault_error(item))}
    reply = item if isinstance(item, Reply) else None
    if params.get("stream"):
        error = invalid("stream: streaming is not supported in Message Batches")
        return {"type": "errored", "error": error_body(error)}
    try:
        return {"type": "succeeded", "message": message_body(core, state, params, reply, betas)}
    except ApiError as exc:
        return {"type": "errored", "error": error_body(exc)}


def _finish(
    state: AnthropicState, batch: Batch, at: float, processed: int, rest: str, origin: str
) -> None:
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    for index, entry in enumerate(batch.requests):
        result = _run(state, entry["params"], batch.betas) if index < processed else {"type": rest}
        counts[result["type"]] += 1
        batch.lines.append({"custom_id": entry["custom_id"], "result": result})
    batch.counts = counts
    batch.status = "ended"
    batch.ended_at = at
    batch.results_url = f"{origin}/v1/messages/batches/{batch.id}/results"


def _origin(call: Call) -> str:
    host = call.request.headers.get("host", "127.0.0.1")
    return f"http://{host}{call.wire.mount}"


def create(call: Call) -> Outcome:
    """``POST /v1/messages/batches``."""
    require_headers(call)
    body = call.request.json
    if not isinstance(body, dict):
        raise invalid("The request body is not valid JSON. Send a JSON object.")
    for key in body:
        if key != "requests":
            raise invalid(f"{key}: Extra inputs are not permitted")
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        raise invalid("requests: List should have at least 1 item after validation, not 0")
    if len(requests) > MAX_REQUESTS:
        raise invalid(
            f"requests: List should have at most {MAX_REQUESTS} items after validation, not "
            f"{len(requests)}"
        )
    seen: set[str] = set()
    for index, entry in enumerate(requests):
        where = f"requests.{index}"
        if not isinstance(entry, dict):
            raise invalid(f"{where}: Input should be a valid dictionary")
        custom_id = entry.get("custom_id")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
            raise invalid(
                f"{where}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        if custom_id in seen:
            raise invalid(f"{where}.custom_id: Duplicate custom_id '{custom_id}' in the batch")
        seen.add(custom_id)
        if not isinstance(entry.get("params"), dict):
            raise invalid(f"{where}.params: Field required")
        for key in entry:
            if key not in ("custom_id", "params"):
                raise invalid(f"{where}.{key}: Extra inputs are not permitted")
    durations = call.core.settings.batch_durations
    batch = Batch(
        id=call.core.new_id("msgbatch_"),
        requests=[{"custom_id": e["custom_id"], "params": e["params"]} for e in requests],
        created_at=call.core.clock.now(),
        span=durations["validating"] + durations["in_progress"] + durations["finalizing"],
        cancelling=durations["cancelling"],
        betas=betas(call),
    )
    state: AnthropicState = call.state
    state.batches[batch.id] = batch
    refresh(state, batch, _origin(call))
    return json_response(batch.as_json())


def _batch(call: Call) -> Batch:
    require_headers(call)
    state: AnthropicState = call.state
    batch = state.batches.get(call.params["batch_id"])
    if batch is None:
        raise not_found(
            f"message_batch_id: no Message Batch found with id {call.params['batch_id']}"
        )
    refresh(state, batch, _origin(call))
    assert isinstance(batch, Batch)
    return batch


def retrieve(call: Call) -> Outcome:
    """``GET /v1/messages/batches/{batch_id}``."""
    return json_response(_batch(call).as_json())


def cancel(call: Call) -> Outcome:
    """``POST /v1/messages/batches/{batch_id}/cancel``."""
    batch = _batch(call)
    if batch.status == "ended":
        raise invalid(f"Message Batch {batch.id} has already ended and cannot be canceled")
    if batch.cancel_at is None:
        batch.cancel_at = call.core.clock.now()
        batch.status = "canceling"
        refresh(call.state, batch, _origin(call))
    return json_response(batch.as_json())


def delete(call: Call) -> Outcome:
    """``DELETE /v1/messages/batches/{batch_id}`` (only once it has ended)."""
    batch = _batch(call)
    if batch.status != "ended":
        raise invalid(
            f"Message Batch {batch.id} is still {batch.status}; cancel it and wait until it has "
            "ended before deleting it"
        )
    del call.state.batches[batch.id]
    return json_response({"id": batch.id, "type": "message_batch_deleted"})


def results(call: Call) -> Outcome:
    """``GET /v1/messages/batches/{batch_id}/results``: one JSON line per request."""
    batch = _batch(call)
    if batch.status != "ended":
        raise invalid(f"Message Batch {batch.id} has not ended yet; results are not available")
    data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in batch.lines)
    return Response(200, data.encode(), "application/binary")


def list_batches(call: Call) -> Outcome:
    """``GET /v1/messages/batches`` (newest first)."""
    require_headers(call)
    state: AnthropicState = call.state
    origin = _origin(call)
    batches = list(state.batches.values())
    for batch in batches:
        refresh(state, batch, origin)
    items = [batch.as_json() for batch in reversed(batches)]
    return json_response(page(items, call.request.query))
