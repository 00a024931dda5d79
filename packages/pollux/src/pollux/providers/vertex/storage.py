"""The few Cloud Storage calls Vertex AI batch prediction needs, over the Session's transport.

Vertex batch prediction reads its input from Cloud Storage and writes its predictions there,
so deferred delivery uploads one JSONL object per job and reads the prediction objects back.
Those calls go to Cloud Storage's JSON API through the Session's :class:`pollux.transport.Transport`
(its httpx client: proxies, CA bundle, connection pool) with the same bearer token as the
Vertex calls, so no Cloud Storage library is needed:

* upload: ``POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name=...``, the body streamed
  from a temporary file in 1 MiB chunks;
* list: ``GET /storage/v1/b/{bucket}/o?prefix=...`` (paged);
* read: ``GET /storage/v1/b/{bucket}/o/{object}?alt=media``;
* delete: ``DELETE /storage/v1/b/{bucket}/o/{object}``.

The endpoint is ``https://storage.googleapis.com``, or ``STORAGE_EMULATOR_HOST`` when set (the
variable Google's Cloud Storage clients read; :class:`pollux.testing.Emulator` serves it at
``emu.base_url("gcs")``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import IO, Any
from urllib.parse import quote

from pollux.errors import APIError
from pollux.providers._errors import api_error, network_error
from pollux.transport import Transport

from .errors import PROVIDER

__all__ = ["EMULATOR_ENV_VAR", "CloudStorage", "split_uri"]

#: Where Cloud Storage calls go instead of ``https://storage.googleapis.com``.
EMULATOR_ENV_VAR = "STORAGE_EMULATOR_HOST"
_DEFAULT = "https://storage.googleapis.com"
_CHUNK = 1 << 20


def split_uri(uri: str) -> tuple[str, str]:
    """``("bucket", "name")`` of ``gs://bucket/name``."""
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return bucket, name


def endpoint() -> str:
    """The Cloud Storage endpoint in use."""
    host = os.environ.get(EMULATOR_ENV_VAR) or _DEFAULT
    if not host.startswith(("http://", "https://")):
        host = f"http://{host}"
    return host.rstrip("/")


class CloudStorage:
    """Upload, list, read and delete objects with the provider's credentials.

    Args:
        transport: The Session's transport.
        headers: Returns the ``Authorization`` headers (a fresh token) for one request.
        timeout_s: ``Config.request_timeout_s``.
    """

    def __init__(
        self,
        transport: Transport,
        headers: Callable[[], Awaitable[Mapping[str, str]]],
        *,
        timeout_s: float,
    ) -> None:
        self._http = transport
        self._headers = headers
        self._timeout_s = timeout_s

    async def _send(
        self, method: str, url: str, *, phase: str, content: Any = None, ok_404: bool = False
    ) -> Any:
        client = self._http.httpx_client()
        headers = dict(await self._headers())
        if content is not None:
            headers["Content-Type"] = "application/jsonl"
        try:
            response = await client.request(
                method, url, content=content, headers=headers, timeout=self._timeout_s
            )
        except Exception as exc:
            kind = "timeout" if "Timeout" in type(exc).__name__ else "connect"
            raise network_error(
                provider=PROVIDER,
                phase=phase,
                kind=kind,
                message=str(exc) or type(exc).__name__,
                base_url=endpoint(),
                timeout_s=self._timeout_s,
            ) from exc
        if response.status_code == 404 and ok_404:
            return None
        if response.status_code >= 300:
            raise self._status_error(response, phase, url)
        return response

    def _status_error(self, response: Any, phase: str, url: str) -> APIError:
        try:
            message = str(response.json()["error"]["message"])
        except Exception:
            message = response.text[:500]
        status = response.status_code
        error = api_error(
            provider=PROVIDER,
            phase=phase,
            status_code=status,
            message=f"Cloud Storage: {message}",
            headers=dict(response.headers),
        )
        if status in (401, 403):
            error.hint = (
                "The credentials may not use the staging bucket: grant the identity "
                "'Storage Object Admin' (roles/storage.objectAdmin) on it, and the Vertex AI "
                "service agent read and write access, or choose another Config.staging_uri."
            )
        elif status == 404:
            error.hint = (
                "The staging bucket does not exist: create it (gcloud storage buckets create "
                "gs://BUCKET --location=...) in the job's region, or fix Config.staging_uri "
                "(or POLLUX_VERTEX_STAGING_URI)."
            )
        return error

    @staticmethod
    def _object_url(uri: str) -> str:
        bucket, name = split_uri(uri)
        return f"{endpoint()}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"

    async def upload(self, uri: str, handle: IO[bytes]) -> None:
        """Write ``handle``'s content (read from its start, off the event loop) to ``uri``."""
        bucket, name = split_uri(uri)
        url = (
            f"{endpoint()}/upload/storage/v1/b/{quote(bucket, safe='')}/o"
            f"?uploadType=media&name={quote(name, safe='')}"
        )
        handle.seek(0)

        async def chunks() -> AsyncIterator[bytes]:
            while True:
                data = await asyncio.to_thread(handle.read, _CHUNK)
                if not data:
                    return
                yield data

        await self._send("POST", url, phase="batch_submit", content=chunks())

    async def names(self, prefix_uri: str) -> list[str]:
        """The ``gs://`` URIs of every object under ``prefix_uri``."""
        bucket, prefix = split_uri(prefix_uri)
        found: list[str] = []
        token = ""
        while True:
            url = (
                f"{endpoint()}/storage/v1/b/{quote(bucket, safe='')}/o"
                f"?prefix={quote(prefix, safe='')}"
                + (f"&pageToken={quote(token, safe='')}" if token else "")
            )
            page = (await self._send("GET", url, phase="batch_collect")).json()
            found += [f"gs://{bucket}/{item['name']}" for item in page.get("items") or ()]
            token = page.get("nextPageToken") or ""
            if not token:
                return found

    async def read(self, uri: str) -> bytes:
        """One object's content."""
        response = await self._send(
            "GET", f"{self._object_url(uri)}?alt=media", phase="batch_collect"
        )
        return bytes(response.content)

    async def delete(self, uri: str) -> None:
        """Delete one object (one already gone is fine)."""
        await self._send("DELETE", self._object_url(uri), phase="batch_cleanup", ok_404=True)
