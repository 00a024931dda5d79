"""Cloud Storage's JSON API, the part batch jobs use: upload, list, read and delete objects.

Mounted as ``"gcs"``: ``emu.base_url("gcs")`` is ``.../gcs``, what the ``STORAGE_EMULATOR_HOST``
variable names for Cloud Storage clients (requests go to ``<host>/upload/storage/v1/...`` and
``<host>/storage/v1/...``). Served:

* ``POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name=...``: a simple upload, the body
  is the object's content;
* ``GET /storage/v1/b/{bucket}/o?prefix=...``: list objects (paged with ``pageToken``);
* ``GET /storage/v1/b/{bucket}/o/{object}``: the object's metadata, or with ``?alt=media`` its
  content;
* ``DELETE /storage/v1/b/{bucket}/o/{object}``.

Credentials: ``Authorization: Bearer <access token>`` (401 without; with
``Emulator(api_key=...)`` the token must equal it). Buckets exist when first written to.
Objects are kept in ``emu.wire("gcs").objects`` (``{"bucket/name": bytes}``): Vertex AI batch
jobs read their input and write their predictions there.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pollux.testing._emulator._core import ApiError, Call, Core, Route, WireSpec
from pollux.testing._emulator._http import HTTPRequest, Outcome, Response, json_response

from ._common import bearer_key
from ._gemini_common import GoogleError, google_error_body, rfc3339


class StorageState:
    """The objects of every bucket, by ``"bucket/name"``.

    Attributes:
        objects: Object content by ``"bucket/name"``.
        created: Virtual creation time by ``"bucket/name"``.
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self.objects: dict[str, bytes] = {}
        self.created: dict[str, float] = {}

    def put(self, bucket: str, name: str, data: bytes) -> None:
        """Store (or replace) an object."""
        key = f"{bucket}/{name}"
        self.objects[key] = bytes(data)
        self.created[key] = self.core.clock.now()

    def get(self, bucket: str, name: str) -> bytes | None:
        """An object's content, or None."""
        return self.objects.get(f"{bucket}/{name}")

    def put_uri(self, uri: str, data: bytes) -> None:
        """Store an object by ``gs://bucket/name``."""
        bucket, name = split_uri(uri)
        self.put(bucket, name, data)

    def get_uri(self, uri: str) -> bytes | None:
        """An object's content by ``gs://bucket/name``, or None."""
        bucket, name = split_uri(uri)
        return self.get(bucket, name)


def split_uri(uri: str) -> tuple[str, str]:
    """``("bucket", "name")`` of ``gs://bucket/name``."""
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return bucket, name


def _not_found(bucket: str, name: str) -> GoogleError:
    return GoogleError(404, f"No such object: {bucket}/{name}")


def _resource(state: StorageState, bucket: str, name: str) -> dict[str, Any]:
    data = state.objects[f"{bucket}/{name}"]
    return {
        "kind": "storage#object",
        "id": f"{bucket}/{name}",
        "name": name,
        "bucket": bucket,
        "size": str(len(data)),
        "md5Hash": hashlib.md5(data).hexdigest(),
        "timeCreated": rfc3339(state.created[f"{bucket}/{name}"]),
    }


def upload(call: Call) -> Outcome:
    """``POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name=...``."""
    state: StorageState = call.state
    query = call.request.query
    if query.get("uploadType") != "media":
        raise GoogleError(400, "Only uploadType=media is served by the emulator.")
    name = query.get("name")
    if not name:
        raise GoogleError(400, "Required parameter: name")
    bucket = call.params["bucket"]
    state.put(bucket, name, call.request.body)
    return json_response(_resource(state, bucket, name))


def list_objects(call: Call) -> Outcome:
    """``GET /storage/v1/b/{bucket}/o?prefix=...``."""
    state: StorageState = call.state
    bucket = call.params["bucket"]
    prefix = call.request.query.get("prefix") or ""
    names = sorted(
        key.partition("/")[2]
        for key in state.objects
        if key.startswith(f"{bucket}/") and key.partition("/")[2].startswith(prefix)
    )
    try:
        start = int(call.request.query.get("pageToken") or 0)
        size = int(call.request.query.get("maxResults") or 1000)
    except ValueError as exc:
        raise GoogleError(400, "Invalid pageToken or maxResults.") from exc
    chunk = names[start : start + size]
    out: dict[str, Any] = {"kind": "storage#objects"}
    if chunk:
        out["items"] = [_resource(state, bucket, name) for name in chunk]
    if start + size < len(names):
        out["nextPageToken"] = str(start + size)
    return json_response(out)


def get_object(call: Call) -> Outcome:
    """``GET /storage/v1/b/{bucket}/o/{object}`` (``?alt=media``: the content)."""
    state: StorageState = call.state
    bucket, name = call.params["bucket"], call.params["object"]
    data = state.get(bucket, name)
    if data is None:
        raise _not_found(bucket, name)
    if call.request.query.get("alt") == "media":
        return Response(200, data, "application/octet-stream")
    return json_response(_resource(state, bucket, name))


def delete_object(call: Call) -> Outcome:
    """``DELETE /storage/v1/b/{bucket}/o/{object}``."""
    state: StorageState = call.state
    bucket, name = call.params["bucket"], call.params["object"]
    if state.objects.pop(f"{bucket}/{name}", None) is None:
        raise _not_found(bucket, name)
    state.created.pop(f"{bucket}/{name}", None)
    return Response(204, b"", "application/json")


def _authorize(route: Route, http: HTTPRequest, expected: str | None) -> ApiError | None:
    token = bearer_key(http.headers)
    if not token or (expected is not None and token != expected):
        return GoogleError(401, "Invalid Credentials")
    return None


def _state(core: Core) -> StorageState:
    return StorageState(core)


WIRES = (
    WireSpec(
        "gcs",
        "/gcs",
        "/gcs",
        (
            Route("POST", "/upload/storage/v1/b/{bucket}/o", "objects.insert", upload),
            Route("GET", "/storage/v1/b/{bucket}/o", "objects.list", list_objects),
            Route("GET", "/storage/v1/b/{bucket}/o/{object:path}", "objects.get", get_object),
            Route(
                "DELETE", "/storage/v1/b/{bucket}/o/{object:path}", "objects.delete", delete_object
            ),
        ),
        google_error_body,
        bearer_key,
        _state,
        authorize=_authorize,
    ),
)
