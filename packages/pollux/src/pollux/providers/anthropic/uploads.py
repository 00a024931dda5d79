"""Turn environment sources into Messages API content blocks, uploading through the Files API.

Routing (decided by :func:`plan_source`, which does no I/O, so unsupported sources fail before
any upload):

================================  ===========================================================
source                            content block
================================  ===========================================================
text / JSON                       ``text`` (inlined)
text-like file or bytes           upload as ``text/plain`` -> ``document{source: file}``
PDF file or bytes                 upload -> ``document{source: file}``
PNG / JPEG / GIF / WebP           upload -> ``image{source: file}``
http(s) image URL                 ``image{source: url}``
http(s) PDF URL (arXiv too)       ``document{source: url}``
YouTube, audio, video, others     ConfigurationError with a hint, before any I/O
================================  ===========================================================

Uploads go through ``client.beta.files.upload`` (the ``files-api-2025-04-14`` beta) with an open
file object, so the SDK streams the file from disk instead of holding it in memory. An
:class:`UploadRegistry` belongs to one provider (one Session): it uploads each distinct content
once (keyed by content hash, MIME type and file name; concurrent requests for the same content
share one upload), reuses the file for every later call of the Session, and deletes every file
it uploaded when the Session closes. Anthropic keeps uploads until they are deleted, so nothing
is left behind.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pollux.errors import ConfigurationError, SourceError
from pollux.providers._uploads import (
    base_mime,
    is_text_mime,
    media_hint,
    refuse_unreachable,
    stream_upload,
    upload_name,
)
from pollux.source import Source

from .errors import wrap_anthropic_error

__all__ = [
    "FILES_BETA",
    "IMAGE_MIMES",
    "MAX_FILE_BYTES",
    "UploadRegistry",
    "block_for",
    "delete_files",
    "is_text_like",
    "plan_source",
    "upload_source",
    "validate_sources",
]

Route = Literal["text", "upload_text", "upload_pdf", "upload_image", "url_image", "url_pdf"]

#: The beta the Files API and ``source: {type: file}`` blocks need.
FILES_BETA = "files-api-2025-04-14"

#: The Files API's size limit per file.
MAX_FILE_BYTES = 500 * 1024 * 1024

IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_IMAGE_ALIASES = {"image/jpg": "image/jpeg"}
# Text-like beyond the shared set (:data:`pollux.providers._uploads.TEXT_LIKE_APPLICATION`).
_MORE_TEXT_LIKE = frozenset({"application/x-bibtex"})


def is_text_like(mime: str) -> bool:
    """Whether content of this MIME type is text (sent as a ``text/plain`` document)."""
    return is_text_mime(base_mime(mime), also=_MORE_TEXT_LIKE)


def _mime(source: Source) -> str:
    base = base_mime(source.mime_type)
    return _IMAGE_ALIASES.get(base, base)


def plan_source(source: Source) -> Route:
    """Decide how one source reaches the model, with no I/O.

    Raises:
        ConfigurationError: The Messages API cannot take this source; the hint says what to do.
    """
    kind = source.source_type
    mime = _mime(source)
    if kind in ("text", "json"):
        return "text"
    refuse_unreachable(source, provider="anthropic")
    if kind in ("uri", "arxiv"):
        uri = source.identifier
        if mime in IMAGE_MIMES:
            return "url_image"
        if mime == "application/pdf":
            return "url_pdf"
        raise ConfigurationError(
            f"provider='anthropic' can only read image and PDF URLs, not {mime} ({uri})",
            hint="Pass Source.from_uri(url, mime_type='application/pdf' or an image type), "
            "or download the file and pass Source.from_file(path).",
        )
    route: Route | None = None
    if mime == "application/pdf":
        route = "upload_pdf"
    elif mime in IMAGE_MIMES:
        route = "upload_image"
    elif is_text_like(mime):
        route = "upload_text"
    if route is not None:
        if source.size_bytes > MAX_FILE_BYTES:
            raise ConfigurationError(
                f"{source.identifier} is {source.size_bytes / 2**20:.0f} MiB; the Anthropic Files "
                f"API takes files up to {MAX_FILE_BYTES // 2**20} MiB",
                hint="Split the document, or pass a smaller excerpt.",
            )
        return route
    hint = media_hint(mime) or (
        "Anthropic reads PDFs, images and text: convert the file, or pass mime_type= "
        "with its real type."
    )
    raise ConfigurationError(
        f"provider='anthropic' cannot read {mime} content ({source.identifier})", hint=hint
    )


def validate_sources(sources: Sequence[Source]) -> None:
    """Check every source can be routed (no I/O). Raises ConfigurationError."""
    for source in sources:
        plan_source(source)


def _inline_text(source: Source) -> str:
    data = source._read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:  # pragma: no cover - text/json sources are UTF-8 already
        raise SourceError(
            f"Source {source.identifier} is not valid UTF-8 text",
            hint="Re-encode the content as UTF-8.",
        ) from exc


def _upload_mime(route: Route, source: Source) -> str:
    return "text/plain" if route == "upload_text" else _mime(source)


def block_for(route: Route, source: Source, *, file_id: str | None = None) -> dict[str, Any]:
    """The content block for one routed source (``file_id`` for uploaded routes)."""
    if route == "text":
        return {"type": "text", "text": _inline_text(source)}
    if route == "url_image":
        return {"type": "image", "source": {"type": "url", "url": source.identifier}}
    if route == "url_pdf":
        return {"type": "document", "source": {"type": "url", "url": source.identifier}}
    if file_id is None:  # pragma: no cover - callers upload first
        raise ValueError(f"route {route} needs a file id")
    kind = "image" if route == "upload_image" else "document"
    return {"type": kind, "source": {"type": "file", "file_id": file_id}}


async def upload_source(client: Any, source: Source, route: Route, *, timeout_s: float) -> str:
    """Upload one file or bytes source to the Files API; return the file id.

    Files are streamed from disk: the SDK gets an open file object, never the whole content.

    Raises:
        SourceError: The file cannot be read.
        APIError: The upload failed (``phase="upload"``).
    """
    name = upload_name(source)
    mime = _upload_mime(route, source)

    def send(handle: Any) -> Awaitable[Any]:
        return client.beta.files.upload(  # type: ignore[no-any-return]
            file=(name, handle, mime), betas=[FILES_BETA]
        )

    created = await stream_upload(
        source,
        send,
        wrap=lambda exc: wrap_anthropic_error(exc, phase="upload", timeout_s=timeout_s),
    )
    return str(created.id)


async def delete_files(client: Any, file_ids: Sequence[str]) -> list[str]:
    """Delete uploaded files, best effort; return the ids that could not be deleted."""
    if not file_ids:
        return []

    async def _delete(file_id: str) -> bool:
        try:
            await client.beta.files.delete(file_id, betas=[FILES_BETA])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A file that is already gone is deleted as far as we are concerned.
            return getattr(exc, "status_code", None) == 404
        return True

    results = await asyncio.gather(*(_delete(file_id) for file_id in file_ids))
    return [file_id for file_id, ok in zip(file_ids, results, strict=True) if not ok]


async def _content_key(source: Source, route: Route) -> tuple[str, str, str]:
    # Hashing a file reads it: off the event loop (the digest is memoized per size and mtime).
    if source._path is not None:
        digest = await asyncio.to_thread(source._content_hash)
    else:
        digest = source._content_hash()
    return (digest, _upload_mime(route, source), upload_name(source))


class UploadRegistry:
    """The Files API uploads of one Session: content hash -> file id, deleted on close.

    Args:
        client: Returns the SDK client (built lazily by the provider).
        timeout_s: The request timeout, quoted in error hints.
    """

    def __init__(self, client: Callable[[], Any], *, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._files: dict[tuple[str, str, str], asyncio.Future[str]] = {}

    @property
    def file_ids(self) -> list[str]:
        """The ids of the files uploaded so far (and still owned)."""
        return [
            f.result()
            for f in self._files.values()
            if f.done() and not f.cancelled() and f.exception() is None
        ]

    async def file_id(self, source: Source, route: Route) -> str:
        """The file id for ``source``, uploading it the first time its content is seen."""
        key = await _content_key(source, route)
        future = self._files.get(key)
        if future is None:
            future = asyncio.ensure_future(
                upload_source(self._client(), source, route, timeout_s=self._timeout_s)
            )
            self._files[key] = future
        try:
            return await asyncio.shield(future)
        except BaseException:
            failed = future.done() and (future.cancelled() or future.exception() is not None)
            if failed and self._files.get(key) is future:
                # A failed upload is forgotten, so the next call tries again.
                del self._files[key]
            raise

    def forget_gone(self, message: str) -> list[str]:
        """Stop reusing the files an error message names (they were deleted elsewhere).

        Anthropic keeps uploads until they are deleted, so a cleanup job or another process
        may remove one this Session still reuses: the request naming it fails, and the next
        call must upload the content again. A forgotten file is not deleted on close.

        Returns:
            The ids forgotten.
        """
        forgotten = []
        for key, future in list(self._files.items()):
            if not future.done() or future.cancelled() or future.exception() is not None:
                continue
            file_id = future.result()
            if re.search(rf"(?<![\w-]){re.escape(file_id)}(?![\w-])", message):
                del self._files[key]
                forgotten.append(file_id)
        return forgotten

    async def blocks(self, sources: Sequence[Source]) -> tuple[dict[str, Any], ...]:
        """The content blocks for ``sources`` (uploads run concurrently, each content once)."""
        routes = [plan_source(source) for source in sources]
        # Inline text first: a bad text source then fails before anything is uploaded.
        inline = {
            index: block_for(route, source)
            for index, (source, route) in enumerate(zip(sources, routes, strict=True))
            if route in ("text", "url_image", "url_pdf")
        }
        uploads = [
            (index, source, route)
            for index, (source, route) in enumerate(zip(sources, routes, strict=True))
            if index not in inline
        ]
        ids = await asyncio.gather(*(self.file_id(source, route) for _, source, route in uploads))
        blocks: dict[int, dict[str, Any]] = dict(inline)
        for (index, source, route), file_id in zip(uploads, ids, strict=True):
            blocks[index] = block_for(route, source, file_id=file_id)
        return tuple(blocks[index] for index in range(len(sources)))

    async def aclose(self, client: Any) -> list[str]:
        """Delete every file this registry uploaded; return the ids that could not be deleted."""
        pending = [f for f in self._files.values() if not f.done()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        ids = self.file_ids
        self._files.clear()
        return await delete_files(client, ids)
