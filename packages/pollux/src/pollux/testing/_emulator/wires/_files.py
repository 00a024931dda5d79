"""The OpenAI Files API: upload, list, retrieve, content, delete; expiry on the virtual clock."""

from __future__ import annotations

from typing import Any

from pollux.testing._emulator._core import ApiError, Call
from pollux.testing._emulator._http import Outcome, Response, json_response, parse_multipart

from ._common import bad_request
from ._responses import FileRecord, OpenAIState

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")


def not_found(file_id: str) -> ApiError:
    """The 404 the Files API gives for an unknown, deleted or expired file."""
    return ApiError(
        404, f"No such File object: {file_id}", error_type="invalid_request_error", param="id"
    )


def add_file(state: OpenAIState, filename: str, purpose: str, data: bytes) -> FileRecord:
    """Store a file the emulator itself produced (batch output and error files)."""
    record = FileRecord(
        state.core.new_id("file-"), filename, purpose, data, int(state.core.clock.now())
    )
    state.files[record.id] = record
    return record


#: The expiry range the Files API takes (``expires_after.seconds``).
TTL_RANGE = (3600, 2_592_000)


def create(call: Call, *, batch_ttl: tuple[int, int] = TTL_RANGE) -> Outcome:
    """``POST /files`` (multipart: file, purpose, optional expires_after).

    ``batch_ttl`` is the expiry range for ``purpose=batch`` files (Azure's is 14 to 30 days).
    """
    content_type = call.request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise bad_request("The request must be multipart/form-data.", "file")
    try:
        form = parse_multipart(call.request.body, content_type)
    except ValueError as exc:
        raise bad_request(f"Could not parse the multipart body: {exc}.", "file") from exc
    purpose = form["purpose"].data.decode() if "purpose" in form else None
    if purpose is None:
        raise bad_request(
            "Missing required parameter: 'purpose'.", "purpose", "missing_required_parameter"
        )
    if purpose not in PURPOSES:
        raise bad_request(f"'{purpose}' is not one of {list(PURPOSES)} - 'purpose'", "purpose")
    upload = form.get("file")
    if upload is None:
        raise bad_request(
            "Missing required parameter: 'file'.", "file", "missing_required_parameter"
        )
    state: OpenAIState = call.state
    now = int(call.core.clock.now())
    expires_at = None
    if "expires_after[seconds]" in form:
        anchor = (
            form["expires_after[anchor]"].data.decode() if "expires_after[anchor]" in form else ""
        )
        if anchor != "created_at":
            raise bad_request(
                "Invalid value for 'expires_after.anchor': expected 'created_at'.",
                "expires_after.anchor",
            )
        try:
            seconds = int(form["expires_after[seconds]"].data.decode())
        except ValueError as exc:
            raise bad_request(
                "Invalid 'expires_after.seconds': expected an integer.", "expires_after.seconds"
            ) from exc
        low, high = batch_ttl if purpose == "batch" else TTL_RANGE
        if not low <= seconds <= high:
            raise bad_request(
                f"Invalid 'expires_after.seconds': expected a value between {low} and {high}, "
                f"but got {seconds} instead.",
                "expires_after.seconds",
            )
        expires_at = now + seconds
    record = FileRecord(
        call.core.new_id("file-"),
        upload.filename or "upload",
        purpose,
        upload.data,
        now,
        expires_at,
    )
    if purpose == "batch" and not record.filename.endswith(".jsonl"):
        raise bad_request("Batch input files must have a .jsonl extension.", "file")
    state.files[record.id] = record
    return json_response(record.as_json())


def _get(call: Call) -> FileRecord:
    state: OpenAIState = call.state
    record = state.live_file(call.params["file_id"])
    if record is None:
        raise not_found(call.params["file_id"])
    return record


def retrieve(call: Call) -> Outcome:
    """``GET /files/{file_id}``."""
    return json_response(_get(call).as_json())


def content(call: Call) -> Outcome:
    """``GET /files/{file_id}/content``: the raw bytes."""
    return Response(200, _get(call).data, "application/octet-stream")


def delete(call: Call) -> Outcome:
    """``DELETE /files/{file_id}``."""
    record = _get(call)
    del call.state.files[record.id]
    return json_response({"id": record.id, "object": "file", "deleted": True})


def list_files(call: Call) -> Outcome:
    """``GET /files`` (optionally filtered by ``purpose``; newest first)."""
    state: OpenAIState = call.state
    purpose = call.request.query.get("purpose")
    records = [
        r
        for r in (state.live_file(i) for i in list(state.files))
        if r is not None and (purpose is None or r.purpose == purpose)
    ]
    data: list[dict[str, Any]] = [r.as_json() for r in reversed(records)]
    return json_response(
        {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )
