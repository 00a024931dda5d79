"""The Gemini Files API: resumable upload, get, list, delete, download; states on the clock.

An upload is Google's resumable protocol: a ``start`` request (``X-Goog-Upload-Protocol:
resumable``, ``X-Goog-Upload-Command: start``) answered with an ``x-goog-upload-url``, then chunks
sent to that URL with ``upload`` and, on the last, ``upload, finalize``; the finalize answer
carries ``x-goog-upload-status: final`` and ``{"file": {...}}``. A file is ``PROCESSING`` for
``file_processing_seconds`` (virtual) and ``file_processing_polls`` reads, then ``ACTIVE`` (or
``FAILED`` once ``emu.wire("gemini").fail_file(name)`` marked it), and is gone after 48 h.
"""

from __future__ import annotations

from typing import Any

from pollux.testing._emulator._core import Call
from pollux.testing._emulator._http import Outcome, Response, json_response

from ._gemini_common import GoogleError, body_of, invalid, page, rfc3339
from ._gemini_state import GeminiFile, GeminiState, Upload, sha256_b64


def not_found(file_id: str) -> GoogleError:
    """What the real API answers for an unknown, deleted or expired file."""
    return GoogleError(
        403, f"You do not have permission to access the File {file_id} or it may not exist."
    )


def origin(call: Call) -> str:
    """``http://host:port`` as the client addressed the emulator."""
    return "http://" + call.request.headers.get("host", "127.0.0.1")


def file_json(call: Call, record: GeminiFile) -> dict[str, Any]:
    """The ``File`` resource."""
    state: GeminiState = call.state
    status = state.file_state(record)
    out: dict[str, Any] = {
        "name": record.name,
        "mimeType": record.mime_type,
        "sizeBytes": str(len(record.data)),
        "createTime": rfc3339(record.created),
        "updateTime": rfc3339(record.created),
        "expirationTime": rfc3339(record.expires),
        "sha256Hash": sha256_b64(record.data),
        "uri": f"{origin(call)}/gemini/v1beta/{record.name}",
        "state": status,
        "source": record.source,
    }
    if record.display_name is not None:
        out["displayName"] = record.display_name
    if record.source == "GENERATED":
        out["downloadUri"] = (
            f"{origin(call)}/gemini/download/v1beta/{record.name}:download?alt=media"
        )
    if status == "FAILED":
        out["error"] = {"code": 400, "message": record.failed}
    return out


def upload(call: Call) -> Outcome:
    """``POST /upload/<version>/files``: the start request, or a chunk to an upload URL."""
    state: GeminiState = call.state
    headers = call.request.headers
    upload_id = call.request.query.get("upload_id")
    command = headers.get("x-goog-upload-command", "").replace(" ", "").split(",")
    if upload_id is None:
        if headers.get("x-goog-upload-protocol") != "resumable" or command != ["start"]:
            raise invalid(
                "Upload requests must use X-Goog-Upload-Protocol: resumable with "
                "X-Goog-Upload-Command: start (multipart uploads are not emulated)."
            )
        return _start(call, state)
    session = state.uploads.get(upload_id)
    if session is None:
        raise GoogleError(404, f"No upload session {upload_id!r}.")
    if command == ["query"]:
        return Response(
            200,
            b"",
            "text/plain",
            {
                "x-goog-upload-status": "active",
                "x-goog-upload-size-received": str(len(session.received)),
            },
        )
    if "upload" not in command:
        raise invalid(f"Unknown X-Goog-Upload-Command {headers.get('x-goog-upload-command')!r}.")
    try:
        offset = int(headers.get("x-goog-upload-offset", "0"))
    except ValueError as exc:
        raise invalid("X-Goog-Upload-Offset must be an integer.") from exc
    if offset != len(session.received):
        raise GoogleError(
            400,
            f"The upload offset {offset} does not match the {len(session.received)} bytes "
            "received so far.",
        )
    session.received += call.request.body
    if "finalize" not in command:
        return Response(200, b"", "text/plain", {"x-goog-upload-status": "active"})
    del state.uploads[upload_id]
    if session.size is not None and session.size != len(session.received):
        raise invalid(
            f"The upload declared {session.size} bytes but {len(session.received)} arrived."
        )
    display = session.meta.get("displayName")
    record = state.add_file(
        display if isinstance(display, str) else None,
        session.mime_type,
        bytes(session.received),
        "UPLOADED",
    )
    wanted = session.meta.get("name")
    if isinstance(wanted, str) and wanted:
        del state.files[record.id]
        record.id = wanted.removeprefix("files/")
        state.files[record.id] = record
    response = json_response({"file": file_json(call, record)})
    response.headers["x-goog-upload-status"] = "final"
    return response


def _start(call: Call, state: GeminiState) -> Outcome:
    body = body_of(call)
    meta = body.get("file") or {}
    if not isinstance(meta, dict):
        raise invalid("Invalid value at 'file'.")
    headers = call.request.headers
    mime = headers.get("x-goog-upload-header-content-type") or meta.get("mimeType")
    if not isinstance(mime, str) or not mime:
        raise invalid("The file's MIME type is required (X-Goog-Upload-Header-Content-Type).")
    size_text = headers.get("x-goog-upload-header-content-length") or meta.get("sizeBytes")
    try:
        size = int(size_text) if size_text is not None else None
    except ValueError as exc:
        raise invalid("X-Goog-Upload-Header-Content-Length must be an integer.") from exc
    wanted = meta.get("name")
    if isinstance(wanted, str) and wanted:
        file_id = wanted.removeprefix("files/")
        if state.live_file(file_id) is not None:
            raise GoogleError(
                409, f"A file named files/{file_id} already exists.", "ALREADY_EXISTS"
            )
    session = Upload(call.core.new_id("up"), meta, size, mime)
    state.uploads[session.id] = session
    url = f"{origin(call)}{call.request.path}?upload_id={session.id}&upload_protocol=resumable"
    return Response(
        200,
        b"",
        "text/plain",
        {"x-goog-upload-url": url, "x-goog-upload-status": "active"},
    )


def _record(call: Call) -> GeminiFile:
    state: GeminiState = call.state
    record = state.live_file(call.params["file_id"])
    if record is None:
        raise not_found(call.params["file_id"])
    return record


def get(call: Call) -> Outcome:
    """``GET files/{id}`` (each read counts towards ``file_processing_polls``)."""
    record = _record(call)
    answer = file_json(call, record)
    record.polls += 1
    return json_response(answer)


def delete(call: Call) -> Outcome:
    """``DELETE files/{id}``."""
    record = _record(call)
    del call.state.files[record.id]
    return json_response({})


def list_files(call: Call) -> Outcome:
    """``GET files`` (newest first, paged by ``pageSize``/``pageToken``)."""
    state: GeminiState = call.state
    records = [r for r in (state.live_file(i) for i in list(state.files)) if r is not None]
    records.reverse()
    return json_response(page(call, records, lambda r: file_json(call, r), "files", 10))


def download(call: Call) -> Outcome:
    """``GET files/{id}:download?alt=media``: the bytes of a generated file."""
    record = _record(call)
    if record.source != "GENERATED":
        raise invalid(
            "Only generated files can be downloaded; uploaded files cannot be downloaded."
        )
    return Response(200, record.data, record.mime_type)
