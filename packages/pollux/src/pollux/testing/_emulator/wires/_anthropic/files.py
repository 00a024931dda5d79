"""The Files API (beta ``files-api-2025-04-14``): upload, metadata, list, download, delete.

The beta header is accepted but not required (SDK 2.x also sends these routes without it).
Uploaded files are not downloadable, as on the API; expiry (``expires_in_seconds``) runs on the
virtual clock.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from pollux.testing._emulator._core import ApiError, Call
from pollux.testing._emulator._http import Outcome, Response, json_response, parse_multipart

from .errors import invalid, require_headers
from .paging import page
from .state import AnthropicState, StoredFile

__all__ = ["content", "delete", "list_files", "retrieve", "upload"]


def _not_found(file_id: str) -> ApiError:
    return ApiError(404, f"File not found: {file_id}", error_type="not_found_error")


def upload(call: Call) -> Outcome:
    """``POST /v1/files`` (multipart: ``file``, optional ``expires_in_seconds``)."""
    require_headers(call)
    content_type = call.request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise invalid("file: the request must be multipart/form-data with a `file` part")
    try:
        form = parse_multipart(call.request.body, content_type)
    except ValueError as exc:
        raise invalid(f"file: could not parse the multipart body: {exc}") from exc
    part = form.get("file")
    if part is None:
        raise invalid("file: Field required")
    if not part.data:
        raise invalid("file: the file is empty")
    now = call.core.clock.now()
    expires_at = None
    if "expires_in_seconds" in form:
        try:
            seconds = int(form["expires_in_seconds"].data.decode())
        except ValueError as exc:
            raise invalid("expires_in_seconds: Input should be a valid integer") from exc
        if not 3600 <= seconds <= 7_776_000:
            raise invalid("expires_in_seconds: Input should be between 3600 and 7776000")
        expires_at = now + seconds
    filename = (part.filename or "").rsplit("/", 1)[-1]
    mime = (part.content_type or "").split(";", 1)[0].strip()
    if not mime or mime == "application/octet-stream":
        mime = mimetypes.guess_type(filename)[0] or mime or "application/octet-stream"
    if not filename:
        filename = "unnamed" + (mimetypes.guess_extension(mime) or "")
    record = StoredFile(call.core.new_id("file_"), filename, mime, part.data, now, expires_at)
    state: AnthropicState = call.state
    state.files[record.id] = record
    return json_response(record.as_json())


def _get(call: Call) -> StoredFile:
    require_headers(call)
    state: AnthropicState = call.state
    record = state.live_file(call.params["file_id"])
    if record is None:
        raise _not_found(call.params["file_id"])
    return record


def retrieve(call: Call) -> Outcome:
    """``GET /v1/files/{file_id}``."""
    return json_response(_get(call).as_json())


def content(call: Call) -> Outcome:
    """``GET /v1/files/{file_id}/content``: only files the API itself produced download."""
    record = _get(call)
    if not record.downloadable:
        raise invalid(f"File {record.id} is not downloadable: uploaded files cannot be downloaded")
    return Response(200, record.data, record.mime_type)


def delete(call: Call) -> Outcome:
    """``DELETE /v1/files/{file_id}``."""
    record = _get(call)
    del call.state.files[record.id]
    return json_response({"id": record.id, "type": "file_deleted"})


def list_files(call: Call) -> Outcome:
    """``GET /v1/files`` (newest first; ``limit``, ``after_id``, ``before_id``)."""
    require_headers(call)
    state: AnthropicState = call.state
    records = [r for r in (state.live_file(i) for i in list(state.files)) if r is not None]
    items: list[dict[str, Any]] = [r.as_json() for r in reversed(records)]
    return json_response(page(items, call.request.query))
