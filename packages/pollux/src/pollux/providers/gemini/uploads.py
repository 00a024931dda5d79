"""Turn environment sources into Gemini parts, uploading through the Files API once per Session.

Routing (decided by :func:`plan_source`, no I/O, so a bad source fails before any upload):

=====================================  =======================================================
source                                 part
=====================================  =======================================================
text / JSON                            ``text``
text-like file up to 1 MiB             ``text`` (read as UTF-8 off the event loop)
bytes up to 1 MiB (not video)          ``inline_data`` (base64 on the wire)
other files and bytes                  Files API upload -> ``file_data{file_uri, mime_type}``
YouTube, arXiv, http(s) and gs:// URI  ``file_data{file_uri}``
URI with ``with_gemini_url_context``   its URL as ``text``, plus the ``url_context`` tool
=====================================  =======================================================

``with_gemini_video_settings`` adds a ``video_metadata`` sibling to the part.

Uploads use the SDK's resumable protocol with a file object, so the content is streamed from
disk in 8 MiB chunks, never read whole, on a worker thread (the SDK reads with blocking
calls). A file is usable once ``ACTIVE``: pollux polls ``files.get`` with exponential backoff
(0.25 s doubling to 5 s, within :data:`ACTIVATION_TIMEOUT_S`); ``FAILED`` is an
:class:`APIError` with a hint.

**Upload reuse.** Gemini keeps an uploaded file for 48 hours, so :class:`UploadRegistry` (one per
provider, so one per Session) maps a content hash and MIME type to the uploaded file: the same PDF
over five ``run_many`` calls is uploaded once. Before a kept file is reused, ``files.get``
confirms it still exists and is ``ACTIVE`` with at least :data:`REUSE_MARGIN_S` to live; a file
that was deleted or expired is uploaded again. Concurrent calls needing the same content share
one upload (single flight). The registry deletes its files when the Session closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pollux.errors import APIError, ConfigurationError, SourceError
from pollux.providers._batch_jobs import iso_time
from pollux.providers._uploads import base_mime, is_text_mime

from .errors import PROVIDER, is_not_found, wrap_gemini_error
from .extract import field

if TYPE_CHECKING:
    from pollux.source import Source

__all__ = [
    "ACTIVATION_TIMEOUT_S",
    "INLINE_MAX_BYTES",
    "REUSE_MARGIN_S",
    "UploadRegistry",
    "UploadedFile",
    "plan_source",
    "shared_route",
    "source_part",
    "uses_url_context",
    "validate_sources",
]

_log = logging.getLogger("pollux.providers.gemini")

Route = Literal["text", "read_text", "inline", "upload", "remote", "url_context"]

#: Content up to this size is sent inside the request instead of uploaded.
INLINE_MAX_BYTES = 1 << 20
#: How long a file may stay PROCESSING before pollux gives up.
ACTIVATION_TIMEOUT_S = 600.0
#: A kept upload is reused only while it has at least this long to live (Gemini keeps 48 h).
REUSE_MARGIN_S = 3600.0
_POLL_FIRST_S = 0.25
_POLL_MAX_S = 5.0


def _mime(source: Source) -> str:
    return base_mime(source.mime_type)


def _is_text_like(mime: str) -> bool:
    return is_text_mime(mime)


def uses_url_context(source: Source) -> bool:
    """Whether the source asked for Gemini's URL context tool."""
    hints = source.provider_hints_for(PROVIDER) or {}
    return "url_context" in hints


def shared_route(
    source: Source, *, provider: str, fetch_hint: str
) -> Literal["text", "read_text", "remote", "url_context"] | None:
    """How a source reaches Gemini and Vertex AI alike, with no I/O; None for binary content.

    Text, JSON and text-like files up to :data:`INLINE_MAX_BYTES` go as text, URIs by
    reference (or through the URL context tool); what is left (other files and bytes) each
    provider routes its own way.

    Args:
        source: The source.
        provider: The provider named in the error.
        fetch_hint: The error's hint for a URI the provider cannot fetch.

    Raises:
        ConfigurationError: A URI that is not http(s) or gs://.
    """
    kind = source.source_type
    if kind in ("text", "json"):
        return "text"
    if kind in ("youtube", "uri", "arxiv"):
        if uses_url_context(source):
            return "url_context"
        uri = source.identifier
        if not uri.startswith(("http://", "https://", "gs://")):
            raise ConfigurationError(f"provider={provider!r} cannot fetch {uri!r}", hint=fetch_hint)
        return "remote"
    if _is_text_like(_mime(source)) and source.size_bytes <= INLINE_MAX_BYTES:
        return "read_text" if source._path is not None else "text"
    return None


def plan_source(source: Source) -> Route:
    """Decide how one source reaches Gemini, with no I/O.

    Raises:
        ConfigurationError: Gemini cannot take this source; the hint says what to do.
    """
    shared = shared_route(
        source,
        provider=PROVIDER,
        fetch_hint="Use an https:// URL, or download the file and pass Source.from_file().",
    )
    if shared is not None:
        return shared
    kind = source.source_type
    mime = _mime(source)
    if kind == "bytes" and source.size_bytes <= INLINE_MAX_BYTES and not mime.startswith("video/"):
        return "inline"
    return "upload"


def validate_sources(sources: Sequence[Source]) -> None:
    """Check every source can be routed (no I/O). Raises ConfigurationError."""
    for source in sources:
        plan_source(source)


def _text_of(source: Source) -> str:
    data = source._read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"Source {source.identifier} is not valid UTF-8 text ({source.mime_type})",
            hint="Pass mime_type= with the real type, or re-encode the file as UTF-8.",
        ) from exc


def _with_video(part: dict[str, Any], source: Source) -> dict[str, Any]:
    settings = source.gemini_video_settings_for(PROVIDER)
    if settings:
        part["video_metadata"] = dict(settings)
    return part


def source_part(
    source: Source, route: Route, *, text: str | None, file: UploadedFile | None
) -> dict[str, Any]:
    """The part for one routed source (``text`` read or ``file`` uploaded beforehand)."""
    if route in ("text", "read_text"):
        return {"text": text if text is not None else _text_of(source)}
    if route == "url_context":
        return {"text": source.identifier}
    if route == "inline":
        return _with_video(
            {"inline_data": {"mime_type": source.mime_type, "data": source._read_bytes()}}, source
        )
    if route == "remote":
        data: dict[str, Any] = {"file_uri": source.identifier}
        if source.source_type != "youtube" and _mime(source) != "application/octet-stream":
            data["mime_type"] = source.mime_type
        return _with_video({"file_data": data}, source)
    assert file is not None
    return _with_video({"file_data": {"file_uri": file.uri, "mime_type": file.mime_type}}, source)


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """One file in Gemini's Files API: its resource name, URI, MIME type and expiry."""

    name: str
    uri: str
    mime_type: str
    expires_at: float | None

    def fresh(self, now: float) -> bool:
        """Whether the file still has :data:`REUSE_MARGIN_S` to live."""
        return self.expires_at is None or self.expires_at - now > REUSE_MARGIN_S


def local_expiry(
    resource: Any, expiry_field: str, anchors: Sequence[str], now: float
) -> float | None:
    """The resource's expiry on the local clock.

    Google reports expiries on its own clock; the time left is measured against the
    resource's own create/update time, so a skewed local clock does not misjudge it.
    """
    expiry = iso_time(field(resource, expiry_field))
    if expiry is None:
        return None
    for name in anchors:
        anchor = iso_time(field(resource, name))
        if anchor is not None:
            return now + (expiry - anchor)
    return expiry


def _state(file: Any) -> str:
    state = field(file, "state")
    return str(getattr(state, "value", state) or "")


def _failed(source_name: str, file: Any) -> APIError:
    reason = field(field(file, "error"), "message") or "processing failed"
    return APIError(
        f"gemini upload failed: Gemini could not process {source_name} ({reason})",
        hint="Check that the file is a valid instance of its MIME type (pass mime_type= if it "
        "was guessed wrong); a damaged or unsupported file cannot be processed.",
        retryable=False,
        provider=PROVIDER,
        phase="upload",
        error_category="upload_failed",
    )


class UploadRegistry:
    """Uploaded files of one provider, keyed by content hash and MIME type (see module doc).

    Args:
        client: A zero-argument callable returning the SDK client (built lazily).
        timeout_s: The request timeout, quoted in timeout hints.
        clock: Wall-clock seconds (Gemini reports expiries as timestamps).
        sleep: The sleep used between activation polls.
    """

    def __init__(
        self,
        client: Callable[[], Any],
        *,
        timeout_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._clock = clock
        self._sleep = sleep
        self._files: dict[tuple[str, str], UploadedFile] = {}
        # Files a context cache was built from: kept when the Session closes (they expire).
        self.pinned: set[str] = set()
        self._inflight: dict[tuple[str, str], asyncio.Future[UploadedFile]] = {}
        self.uploads = 0

    def __len__(self) -> int:
        return len(self._files)

    @staticmethod
    def key(source: Source) -> tuple[str, str]:
        """The reuse key: the content hash (streamed, memoized per file stat) and MIME type."""
        return (source._content_hash(), source.mime_type)

    async def file_for(self, source: Source) -> UploadedFile:
        """The uploaded file for this content: a verified kept one, or a new upload."""
        key = await asyncio.to_thread(self.key, source) if source._path else self.key(source)
        kept = self._files.get(key)
        if kept is not None:
            if await self._still_usable(kept):
                return kept
            self._files.pop(key, None)
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[UploadedFile] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            uploaded = await self._upload(source)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: joiners re-raise it, nobody else must
            raise
        finally:
            self._inflight.pop(key, None)
        self._files[key] = uploaded
        future.set_result(uploaded)
        return uploaded

    async def _still_usable(self, kept: UploadedFile) -> bool:
        if not kept.fresh(self._clock()):
            return False
        try:
            current = await self._client().aio.files.get(name=kept.name)
        except Exception as exc:
            if is_not_found(exc):
                _log.info("gemini file %s is gone; uploading it again", kept.name)
                return False
            raise wrap_gemini_error(exc, phase="upload", timeout_s=self._timeout_s) from exc
        return _state(current) == "ACTIVE"

    async def _upload(self, source: Source) -> UploadedFile:
        client = self._client()
        name = Path(source.identifier).name if source._path is not None else "upload"
        config = {"mime_type": source.mime_type, "display_name": name[:512] or "upload"}

        def upload() -> Any:
            # The SDK's resumable upload reads 8 MiB chunks with blocking reads; run it on a
            # worker thread through the sync client so the event loop never waits on disk.
            with contextlib.ExitStack() as stack:
                handle: Any
                if source._path is not None:
                    handle = stack.enter_context(source._path.open("rb"))
                else:
                    handle = io.BytesIO(source._read_bytes())
                return client.files.upload(file=handle, config=config)

        try:
            created = await asyncio.to_thread(upload)
        except OSError as exc:
            raise SourceError(
                f"Cannot read source file {source.identifier}: {exc.strerror or exc}",
                hint="Check that the file still exists and is readable.",
            ) from exc
        except Exception as exc:
            raise wrap_gemini_error(exc, phase="upload", timeout_s=self._timeout_s) from exc
        self.uploads += 1
        active = await self._wait_active(source, created)
        return UploadedFile(
            name=str(field(active, "name")),
            uri=str(field(active, "uri")),
            mime_type=str(field(active, "mime_type") or source.mime_type),
            expires_at=local_expiry(
                active, "expiration_time", ("update_time", "create_time"), self._clock()
            ),
        )

    async def _wait_active(self, source: Source, file: Any) -> Any:
        deadline = time.monotonic() + ACTIVATION_TIMEOUT_S
        delay = _POLL_FIRST_S
        while True:
            state = _state(file)
            if state == "ACTIVE" or (state in ("", "STATE_UNSPECIFIED") and field(file, "uri")):
                return file
            if state == "FAILED":
                await self._delete(str(field(file, "name")))
                raise _failed(source.identifier, file)
            if time.monotonic() + delay > deadline:
                raise APIError(
                    f"gemini upload failed: {source.identifier} was still {state or 'processing'} "
                    f"after {ACTIVATION_TIMEOUT_S:g} s",
                    hint="Large videos can take minutes to process; retry later.",
                    retryable=True,
                    provider=PROVIDER,
                    phase="upload",
                    error_category="timeout",
                )
            await self._sleep(delay)
            delay = min(delay * 2, _POLL_MAX_S)
            try:
                file = await self._client().aio.files.get(name=field(file, "name"))
            except Exception as exc:
                raise wrap_gemini_error(exc, phase="upload", timeout_s=self._timeout_s) from exc

    async def _delete(self, name: str) -> bool:
        try:
            await self._client().aio.files.delete(name=name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return is_not_found(exc)
        return True

    def forget(self, names: Sequence[str]) -> None:
        """Stop reusing these files (a request reported them gone)."""
        gone = set(names)
        for key, file in list(self._files.items()):
            if file.name in gone or file.uri in gone:
                del self._files[key]

    def pin(self, parts: Sequence[Mapping[str, Any]]) -> None:
        """Keep the files these parts name past :meth:`delete_all` (a cache was built on them)."""
        uris = set(file_names(parts))
        self.pinned.update(f.name for f in self._files.values() if f.uri in uris)

    async def delete_all(self) -> list[str]:
        """Delete every kept file but the pinned ones; return the names not deleted."""
        files = [f for f in self._files.values() if f.name not in self.pinned]
        self._files.clear()
        results = await asyncio.gather(*(self._delete(f.name) for f in files))
        return [f.name for f, ok in zip(files, results, strict=True) if not ok]

    async def parts(self, sources: Sequence[Source]) -> tuple[dict[str, Any], ...]:
        """The parts for ``sources``: text read first, then distinct uploads concurrently."""
        routes = [plan_source(source) for source in sources]
        texts: dict[int, str] = {}
        for index, (source, route) in enumerate(zip(sources, routes, strict=True)):
            if route == "read_text":
                texts[index] = await asyncio.to_thread(_text_of, source)
        uploads = [s for s, r in zip(sources, routes, strict=True) if r == "upload"]
        files = await asyncio.gather(*(self.file_for(source) for source in uploads))
        by_source = dict(zip((id(s) for s in uploads), files, strict=True))
        return tuple(
            source_part(source, route, text=texts.get(index), file=by_source.get(id(source)))
            for index, (source, route) in enumerate(zip(sources, routes, strict=True))
        )


def file_names(parts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The file URIs referenced by prepared parts."""
    return [
        str(part["file_data"]["file_uri"])
        for part in parts
        if isinstance(part.get("file_data"), Mapping)
    ]
