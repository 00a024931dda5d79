"""Turn environment sources into Responses API input parts, uploading through the Files API.

Routing (decided by :func:`plan_source`, which does no I/O, so unsupported sources fail before
any upload):

================================  ===========================================================
source                            wire part
================================  ===========================================================
text / JSON                       ``input_text`` (inlined)
text-like file or bytes           ``input_text`` (read as UTF-8 and inlined, never uploaded)
image file or bytes               upload (``purpose="user_data"``) -> ``input_image{file_id}``
PDF / office document             upload (``purpose="user_data"``) -> ``input_file{file_id}``
http(s) image URL                 ``input_image{image_url}``
http(s) PDF / document / text URL ``input_file{file_url}`` (arXiv sources land here)
YouTube, audio, video, others     ConfigurationError with a hint, before any I/O
================================  ===========================================================

Uploads stream the file from disk (the SDK receives an open file object, not its bytes) and
carry ``expires_after`` as a safety net; pollux deletes them right after the call
(:func:`delete_files`). Identical sources within one call are uploaded once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pollux.errors import ConfigurationError, SourceError
from pollux.providers._uploads import (
    base_mime,
    is_text_mime,
    media_hint,
    refuse_unreachable,
    stream_upload,
    upload_name,
)

from .errors import wrap_openai_error

if TYPE_CHECKING:
    from pollux.source import Source

Route = Literal["text", "upload_image", "upload_file", "url_image", "url_file"]

#: Server-side expiry for uploads, in case the delete after the call never happens.
UPLOAD_TTL_S = 24 * 3600

IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"})
DOCUMENT_MIMES = frozenset(
    {
        "application/pdf",
        "application/rtf",
        "text/rtf",
        "application/msword",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.oasis.opendocument.text",
    }
)
# Text-like beyond the shared set (:data:`pollux.providers._uploads.TEXT_LIKE_APPLICATION`).
_MORE_TEXT_LIKE = frozenset({"application/x-javascript", "application/x-bibtex"})


def is_text_like(mime: str) -> bool:
    """Whether content of this MIME type is text pollux inlines instead of uploading."""
    return is_text_mime(base_mime(mime), also=_MORE_TEXT_LIKE)


def _mime(source: Source) -> str:
    return base_mime(source.mime_type)


def plan_source(source: Source) -> Route:
    """Decide how one source reaches the model, with no I/O.

    Raises:
        ConfigurationError: The Responses API cannot take this source; the hint says what to do.
    """
    kind = source.source_type
    mime = _mime(source)
    if kind in ("text", "json"):
        return "text"
    refuse_unreachable(source, provider="openai")
    if kind in ("uri", "arxiv"):
        uri = source.identifier
        if mime in IMAGE_MIMES:
            return "url_image"
        if mime in DOCUMENT_MIMES or is_text_like(mime):
            return "url_file"
        raise ConfigurationError(
            f"provider='openai' cannot read a remote {mime} URL ({uri})",
            hint="Pass Source.from_uri(url, mime_type=...) with an image, PDF or text type, "
            "or download the file first.",
        )
    if is_text_like(mime):
        return "text"
    if mime in IMAGE_MIMES:
        return "upload_image"
    if mime in DOCUMENT_MIMES:
        return "upload_file"
    hint = media_hint(mime) or (
        "Pass mime_type= with the real type (PDF, image, office or text document)."
    )
    raise ConfigurationError(
        f"provider='openai' cannot read {mime} content ({source.identifier})", hint=hint
    )


def validate_sources(sources: Sequence[Source]) -> None:
    """Check every source can be routed (no I/O). Raises ConfigurationError."""
    for source in sources:
        plan_source(source)


@dataclass(frozen=True, slots=True)
class PreparedParts:
    """Wire parts for a call's sources, plus the file ids pollux uploaded for it."""

    parts: tuple[dict[str, Any], ...]
    owned: tuple[str, ...]


def _inline_text(source: Source) -> str:
    data = source._read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"Source {source.identifier} is not valid UTF-8 text ({source.mime_type})",
            hint="Pass mime_type= with the real type, or re-encode the file as UTF-8.",
        ) from exc


def _upload_key(source: Source) -> tuple[str, str]:
    if source._path is not None:
        return (f"path:{source._path.resolve()}", source.mime_type)
    return (f"sha256:{source._content_hash()}", source.mime_type)


async def upload_source(
    client: Any, source: Source, *, timeout_s: float = 300.0, ttl_s: int = UPLOAD_TTL_S
) -> str:
    """Upload one file or bytes source with ``purpose="user_data"``; return the file id.

    ``ttl_s`` is the server-side expiry (``expires_after``); deferred jobs pass a longer one so
    the file outlives the batch's completion window.

    File content is streamed from disk: the SDK gets an open file object, never the bytes.

    Raises:
        APIError: The upload failed (wrapped with ``phase="upload"``).
    """
    name = upload_name(source)

    def send(handle: Any) -> Awaitable[Any]:
        return client.files.create(  # type: ignore[no-any-return]
            file=(name, handle, source.mime_type),
            purpose="user_data",
            expires_after={"anchor": "created_at", "seconds": ttl_s},
        )

    created = await stream_upload(
        source, send, wrap=lambda exc: wrap_openai_error(exc, phase="upload", timeout_s=timeout_s)
    )
    return str(created.id)


async def delete_files(client: Any, file_ids: Sequence[str]) -> list[str]:
    """Delete uploaded files, best effort; return the ids that could not be deleted."""
    if not file_ids:
        return []

    async def _delete(file_id: str) -> bool:
        try:
            await client.files.delete(file_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            return False
        return True

    results = await asyncio.gather(*(_delete(file_id) for file_id in file_ids))
    return [file_id for file_id, ok in zip(file_ids, results, strict=True) if not ok]


async def _upload_all(
    client: Any, pending: dict[tuple[str, str], Source], *, timeout_s: float, ttl_s: int
) -> dict[tuple[str, str], str]:
    """Upload every pending source concurrently; all or nothing.

    When one upload fails, or the caller is cancelled, the files that did get uploaded are
    deleted before the error propagates: nobody else knows their ids.
    """
    tasks = {
        key: asyncio.ensure_future(upload_source(client, source, timeout_s=timeout_s, ttl_s=ttl_s))
        for key, source in pending.items()
    }
    if not tasks:
        return {}
    try:
        await asyncio.wait(tasks.values())
    except BaseException:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        await asyncio.shield(delete_files(client, _succeeded(tasks)))
        raise
    failure = next(
        (t.exception() for t in tasks.values() if not t.cancelled() and t.exception()), None
    )
    if failure is not None:
        await delete_files(client, _succeeded(tasks))
        raise failure
    return {key: task.result() for key, task in tasks.items()}


def _succeeded(tasks: Mapping[tuple[str, str], asyncio.Future[str]]) -> list[str]:
    return [
        task.result()
        for task in tasks.values()
        if task.done() and not task.cancelled() and task.exception() is None
    ]


async def prepare_parts(
    client: Any,
    sources: Sequence[Source],
    *,
    timeout_s: float = 300.0,
    ttl_s: int = UPLOAD_TTL_S,
) -> PreparedParts:
    """Build the input parts for ``sources``, uploading what must be uploaded.

    Routes are planned first (no I/O) and text is read next, so bad input fails before any
    upload. Distinct uploads run concurrently; when one fails (or the call is cancelled), the
    files already uploaded are deleted before the error propagates.
    """
    routes = [plan_source(source) for source in sources]
    pending: dict[tuple[str, str], Source] = {}
    for source, route in zip(sources, routes, strict=True):
        if route in ("upload_image", "upload_file"):
            pending.setdefault(_upload_key(source), source)
    # Text is read first: a bad text file then fails before anything was uploaded.
    texts: dict[int, str] = {}
    for index, (source, route) in enumerate(zip(sources, routes, strict=True)):
        if route == "text":
            # In-memory content needs no thread hop; files are read off the event loop.
            if source._data is not None:
                texts[index] = _inline_text(source)
            else:
                texts[index] = await asyncio.to_thread(_inline_text, source)
    uploaded = await _upload_all(client, pending, timeout_s=timeout_s, ttl_s=ttl_s)
    parts: list[dict[str, Any]] = []
    for index, (source, route) in enumerate(zip(sources, routes, strict=True)):
        if route == "text":
            parts.append({"type": "input_text", "text": texts[index]})
        elif route == "upload_image":
            file_id = uploaded[_upload_key(source)]
            parts.append({"type": "input_image", "file_id": file_id, "detail": "auto"})
        elif route == "upload_file":
            parts.append({"type": "input_file", "file_id": uploaded[_upload_key(source)]})
        elif route == "url_image":
            parts.append({"type": "input_image", "image_url": source.identifier, "detail": "auto"})
        else:
            parts.append({"type": "input_file", "file_url": source.identifier})
    return PreparedParts(parts=tuple(parts), owned=tuple(uploaded.values()))


__all__ = [
    "DOCUMENT_MIMES",
    "IMAGE_MIMES",
    "UPLOAD_TTL_S",
    "PreparedParts",
    "delete_files",
    "is_text_like",
    "plan_source",
    "prepare_parts",
    "upload_source",
    "validate_sources",
]
