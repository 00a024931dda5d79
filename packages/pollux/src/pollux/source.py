"""Sources: the content a model reads (text, JSON, files, bytes, and remote references).

A :class:`Source` is a pure value. Nothing is read when it is built except ``stat`` for a
file; content is read lazily and, for files, hashed as a stream in fixed-size chunks with
the digest memoized per (path, size, mtime).

Engine-facing internals (not public API): ``_kind``, ``_path``, ``_data``, ``_remote_uri``,
``_iter_bytes()``, ``_read_bytes()``, ``_content_hash()`` and ``_environment_identity()``.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from .errors import SourceError, SourceTypeError

__all__ = ["ProviderHint", "Source", "SourceType"]

SourceType = Literal["text", "json", "file", "bytes", "youtube", "uri", "arxiv"]
"""The kinds of :class:`Source`."""

_CHUNK_SIZE = 1 << 20
_ARXIV_HOSTS = frozenset({"arxiv.org", "www.arxiv.org", "export.arxiv.org"})
# New-style ids (2301.07041, 2301.07041v2) and old-style ids (hep-th/9901001, math.GT/0309136v1).
_ARXIV_ID_RE = re.compile(r"^(?:\d{4}\.\d{4,5}|[a-z]+(?:-[a-z]+)*(?:\.[A-Z]{2})?/\d{7})(?:v\d+)?$")
# Extensions whose MIME type must not depend on the host's mime.types file.
_MIME_OVERRIDES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".csv": "text/csv",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".pdf": "application/pdf",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".mp4": "video/mp4",
    ".mov": "video/quicktime",
    ".webm": "video/webm",
    ".html": "text/html",
    ".xml": "application/xml",
    ".py": "text/x-python",
}

# (resolved path, size, mtime_ns) -> sha256 hex. Bounded so long-lived processes stay small.
_HASH_MEMO: dict[tuple[str, int, int], str] = {}
_HASH_MEMO_MAX = 4096
_HASH_MEMO_LOCK = threading.Lock()


def _guess_mime(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in _MIME_OVERRIDES:
        return _MIME_OVERRIDES[suffix]
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def _iter_file(path: Path, chunk_size: int) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            yield chunk


def _hash_file(path: Path) -> str:
    """SHA-256 of a file, read in chunks and memoized per (path, size, mtime)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise SourceError(
            f"Cannot read source file {path}: {exc.strerror or exc}",
            hint="Check that the file still exists and is readable.",
        ) from exc
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _HASH_MEMO_LOCK:
        cached = _HASH_MEMO.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    try:
        for chunk in _iter_file(path, _CHUNK_SIZE):
            digest.update(chunk)
    except OSError as exc:
        raise SourceError(
            f"Cannot read source file {path}: {exc.strerror or exc}",
            hint="Check that the file still exists and is readable.",
        ) from exc
    value = digest.hexdigest()
    with _HASH_MEMO_LOCK:
        if len(_HASH_MEMO) >= _HASH_MEMO_MAX:
            _HASH_MEMO.pop(next(iter(_HASH_MEMO)))
        _HASH_MEMO[key] = value
    return value


def _require_text(value: object, what: str, hint: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SourceError(f"{what} must be a non-empty string, got {value!r}", hint=hint)
    return value


@dataclass(frozen=True, slots=True)
class ProviderHint:
    """One provider-specific setting attached to a source (for example Gemini video metadata).

    Args:
        provider: The provider the hint applies to; it is ignored by every other provider.
        name: The hint's name (``"video_metadata"``, ``"url_context"``).
        payload: The settings, as sorted ``(key, value)`` pairs.
    """

    provider: str
    name: str
    payload: tuple[tuple[str, str | float], ...] = ()

    def payload_dict(self) -> dict[str, str | float]:
        """Return the payload as a plain dict."""
        return dict(self.payload)


@dataclass(frozen=True, slots=True)
class Source:
    """A structured representation of a single input source.

    Build sources with the ``from_*`` constructors rather than directly.

    Attributes:
        source_type: ``"text"``, ``"json"``, ``"file"``, ``"bytes"``, ``"youtube"``, ``"uri"``
            or ``"arxiv"``.
        identifier: A display label, the file path, or the remote URI.
        mime_type: The content's MIME type.
        size_bytes: The content size (``0`` for remote references; a file's size when the
            source was built).
        content_loader: Returns the whole content. Prefer streaming through the engine for
            large files.
        provider_hints: Provider-specific settings, see :meth:`with_gemini_video_settings`.

    Example:
        >>> Source.from_text("The sky is blue.").mime_type
        'text/plain'
        >>> Source.from_arxiv("https://arxiv.org/abs/2301.07041v2").identifier
        'https://arxiv.org/pdf/2301.07041v2.pdf'
    """

    source_type: SourceType
    identifier: str
    mime_type: str
    size_bytes: int
    content_loader: Callable[[], bytes] = field(compare=False, repr=False)
    provider_hints: tuple[ProviderHint, ...] = ()
    # Internal: in-memory content (text/json/bytes) or the file path, for streaming and
    # identity. Compared, so two sources with equal content are equal.
    _data: bytes | None = field(default=None, repr=False)
    _path: Path | None = field(default=None, repr=False)

    def __reduce__(self) -> tuple[Any, ...]:
        # The loader is a closure; rebuild it from the stored content or path instead.
        return (
            _rebuild_source,
            (
                self.source_type,
                self.identifier,
                self.mime_type,
                self.size_bytes,
                self.provider_hints,
                self._data,
                self._path,
            ),
        )

    # ----------------------------------------------------------------- constructors

    @classmethod
    def from_text(cls, text: str, *, identifier: str | None = None) -> Source:
        """Create a source from text.

        Args:
            text: The text content.
            identifier: Display label. Defaults to the first 50 characters of ``text``.

        Raises:
            SourceError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise SourceError(
                f"Source.from_text() needs a str, got {type(text).__name__}",
                hint="Decode bytes first, or use Source.from_bytes(data, mime_type=...).",
            )
        content = text.encode("utf-8")
        return cls._in_memory("text", identifier or text[:50], "text/plain", content)

    @classmethod
    def from_json(cls, data: Any, *, identifier: str | None = None) -> Source:
        """Create a source from a JSON-serializable object.

        Args:
            data: A JSON-compatible value. Objects with a ``model_dump()`` method (pydantic
                models) are dumped first.
            identifier: Display label. Defaults to ``"json-data"``.

        Raises:
            SourceError: ``data`` is not JSON serializable.
        """
        dump = getattr(data, "model_dump", None)
        if callable(dump) and not isinstance(data, type):
            try:
                data = dump(mode="json")
            except TypeError:
                data = dump()
        try:
            content = json.dumps(data, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SourceError(
                f"Data is not JSON serializable: {exc}",
                hint="Pass dicts, lists, strings, numbers, booleans, None or a pydantic model.",
            ) from exc
        return cls._in_memory("json", identifier or "json-data", "application/json", content)

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, *, mime_type: str, identifier: str | None = None
    ) -> Source:
        """Create a source from in-memory binary content (an image, a PDF, audio, ...).

        Args:
            data: The content.
            mime_type: The content's MIME type, for example ``"image/png"``.
            identifier: Display label (used as a file name for uploads). Defaults to
                ``"bytes-<first 12 hex digits of the SHA-256>"``.

        Raises:
            SourceError: ``data`` is not bytes-like or ``mime_type`` is not ``type/subtype``.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SourceError(
                f"Source.from_bytes() needs bytes, got {type(data).__name__}",
                hint="Use Source.from_text() for str content.",
            )
        content = bytes(data)
        mime = _require_text(mime_type, "mime_type", "Pass mime_type='image/png', for example.")
        if "/" not in mime:
            raise SourceError(
                f"mime_type must look like 'type/subtype', got {mime!r}",
                hint="Pass mime_type='application/pdf', for example.",
            )
        if identifier is not None:
            _require_text(identifier, "identifier", "Pass a short label such as 'photo.png'.")
        ident = identifier or f"bytes-{hashlib.sha256(content).hexdigest()[:12]}"
        return cls._in_memory("bytes", ident, mime, content)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, mime_type: str | None = None) -> Source:
        """Create a source from a local file. Nothing is read until the content is needed.

        Args:
            path: Path to the file.
            mime_type: MIME type override. Guessed from the extension when ``None``
                (``application/octet-stream`` when unknown).

        Raises:
            SourceError: The file does not exist or is not a regular file.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise SourceError(
                f"Source.from_file() needs a path, got {type(path).__name__}",
                hint="Pass a str or pathlib.Path.",
            )
        p = Path(path).expanduser()
        if not p.exists():
            raise SourceError(f"File not found: {p}", hint="Check the path and working directory.")
        if not p.is_file():
            raise SourceError(
                f"Not a regular file: {p}",
                hint="Pass a file; for a directory, build one Source per file.",
            )
        if mime_type is not None:
            _require_text(mime_type, "mime_type", "Pass mime_type='application/pdf', for example.")
        mime = mime_type or _guess_mime(p)

        def loader() -> bytes:
            return p.read_bytes()

        return cls(
            source_type="file",
            identifier=str(p),
            mime_type=mime,
            size_bytes=p.stat().st_size,
            content_loader=loader,
            _path=p,
        )

    @classmethod
    def from_youtube(cls, url: str) -> Source:
        """Create a source that references a YouTube video by URL (nothing is downloaded).

        Raises:
            SourceError: ``url`` is not an http(s) URL.
        """
        _require_text(url, "YouTube url", "Pass 'https://www.youtube.com/watch?v=...'.")
        if urlparse(url).scheme not in {"http", "https"}:
            raise SourceError(
                f"YouTube reference must be an http(s) URL, got {url!r}",
                hint="Pass 'https://www.youtube.com/watch?v=...'.",
            )
        return cls._remote("youtube", url, "video/mp4", f"youtube:{url}".encode())

    @classmethod
    def from_uri(cls, uri: str, *, mime_type: str = "application/octet-stream") -> Source:
        """Create a source that references remote content by URI (``gs://``, ``https://``...).

        Args:
            uri: The remote URI.
            mime_type: The content's MIME type.

        Raises:
            SourceError: ``uri`` has no scheme, or ``mime_type`` is empty.
        """
        _require_text(uri, "uri", "Pass 'https://example.com/doc.pdf', for example.")
        if not urlparse(uri).scheme:
            raise SourceError(
                f"URI needs a scheme, got {uri!r}",
                hint="Pass 'https://...' or 'gs://...'; for a local file use Source.from_file().",
            )
        _require_text(mime_type, "mime_type", "Pass mime_type='application/pdf', for example.")
        return cls._remote("uri", uri, mime_type, f"uri:{mime_type}:{uri}".encode())

    @classmethod
    def from_arxiv(cls, ref: str) -> Source:
        """Create an arXiv PDF source from an arXiv id or URL.

        Args:
            ref: An id (``"2301.07041"``, ``"2301.07041v2"``, ``"hep-th/9901001"``) or an
                ``abs``/``pdf`` URL on arxiv.org, with or without ``.pdf``. It is normalized to
                ``https://arxiv.org/pdf/<id>.pdf``.

        Raises:
            SourceTypeError: ``ref`` is not a str (also a TypeError).
            SourceError: The reference is not a valid arXiv id or arxiv.org URL.
        """
        if not isinstance(ref, str):
            raise SourceTypeError(
                f"arXiv reference must be a str, got {type(ref).__name__}",
                hint="Pass an id such as '2301.07041' or an arxiv.org URL.",
            )
        url = _normalize_arxiv(ref.strip())
        return cls._remote("arxiv", url, "application/pdf", url.encode("utf-8"))

    @classmethod
    def _in_memory(cls, kind: SourceType, identifier: str, mime: str, content: bytes) -> Source:
        return cls(
            source_type=kind,
            identifier=identifier,
            mime_type=mime,
            size_bytes=len(content),
            content_loader=lambda: content,
            _data=content,
        )

    @classmethod
    def _remote(cls, kind: SourceType, identifier: str, mime: str, marker: bytes) -> Source:
        # Remote references carry no content; the marker bytes give them a stable identity.
        return cls(
            source_type=kind,
            identifier=identifier,
            mime_type=mime,
            size_bytes=0,
            content_loader=lambda: marker,
            _data=marker,
        )

    # ----------------------------------------------------------------- provider hints

    def with_gemini_video_settings(
        self,
        *,
        start_offset: str | None = None,
        end_offset: str | None = None,
        fps: float | None = None,
    ) -> Source:
        """Return a copy with Gemini video controls attached.

        The settings affect only Gemini requests and Gemini cache identity; other providers
        ignore them.

        Args:
            start_offset: Where to start, for example ``"10s"``.
            end_offset: Where to stop, for example ``"1m30s"``.
            fps: Frames per second to sample, in ``(0, 24]``.

        Raises:
            SourceError: The source is not a video, a setting is invalid, or none is given.
        """
        if not self._is_video_source():
            raise SourceError(
                "Gemini video settings require a video source "
                "(local video file, video URI, or YouTube URL)",
                hint="Use Source.from_youtube(...), a video/* file or a video/* URI.",
            )
        payload: dict[str, str | float] = {}
        for name, offset in (("start_offset", start_offset), ("end_offset", end_offset)):
            if offset is not None:
                if not isinstance(offset, str) or not offset.strip():
                    raise SourceError(
                        f"{name} must be a non-empty string",
                        hint=f"Pass {name}='10s', for example.",
                    )
                payload[name] = offset
        if fps is not None:
            if isinstance(fps, bool) or not isinstance(fps, (int, float)):
                raise SourceError("fps must be a number", hint="Pass fps=1.0, for example.")
            if not 0 < float(fps) <= 24:
                raise SourceError(
                    f"fps must be > 0 and <= 24, got {fps}", hint="Pass a value in (0, 24]."
                )
            payload["fps"] = float(fps)
        if not payload:
            raise SourceError(
                "Provide at least one Gemini video setting: start_offset, end_offset, or fps",
                hint="For example with_gemini_video_settings(fps=1.0).",
            )
        return self._with_hint("gemini", "video_metadata", payload)

    def with_gemini_url_context(self) -> Source:
        """Return a copy that asks Gemini to retrieve this http(s) URI at request time.

        Raises:
            SourceError: The source was not built with :meth:`from_uri`, or is not http(s).
        """
        if self.source_type != "uri":
            raise SourceError(
                "Gemini URL Context requires Source.from_uri(...)",
                hint="Build the source with Source.from_uri('https://...').",
            )
        if urlparse(self.identifier).scheme not in {"http", "https"}:
            raise SourceError(
                "Gemini URL Context requires an HTTP(S) URI",
                hint="Use an https:// URL; gs:// and other schemes are not fetched.",
            )
        return self._with_hint("gemini", "url_context", {})

    def provider_hints_for(self, provider: str | None) -> dict[str, dict[str, str | float]] | None:
        """Return the hints that apply to ``provider`` as plain dicts, or ``None``."""
        if provider is None:
            return None
        hints = {h.name: h.payload_dict() for h in self.provider_hints if h.provider == provider}
        return hints or None

    def gemini_video_settings_for(self, provider: str | None) -> dict[str, str | float] | None:
        """Return the Gemini video settings when ``provider`` can use them, else ``None``."""
        hints = self.provider_hints_for(provider)
        return None if hints is None else hints.get("video_metadata")

    def _is_video_source(self) -> bool:
        return self.source_type == "youtube" or self.mime_type.startswith("video/")

    def _with_hint(self, provider: str, name: str, payload: dict[str, str | float]) -> Source:
        hint = ProviderHint(provider=provider, name=name, payload=tuple(sorted(payload.items())))
        kept = tuple(
            h for h in self.provider_hints if not (h.provider == provider and h.name == name)
        )
        return replace(self, provider_hints=(*kept, hint))

    # ----------------------------------------------------------------- identity

    def cache_identity_hash(self, *, provider: str | None = None) -> str:
        """Return the SHA-256 identity used for caching.

        The raw content hash, combined with the hints that apply to ``provider`` (such as
        Gemini video settings) when there are any.
        """
        hints = self.provider_hints_for(provider)
        if hints is None:
            return self._content_hash()
        combined = (
            self._content_hash() + "|" + json.dumps(hints, sort_keys=True, separators=(",", ":"))
        )
        return hashlib.sha256(combined.encode("utf-8")).hexdigest()

    def _environment_identity(self, *, provider: str) -> dict[str, Any]:
        """Provider-visible identity for environment fingerprints (no directory names)."""
        identity: dict[str, Any] = {
            "source_type": self.source_type,
            "mime_type": self.mime_type,
            "content_hash": self._content_hash(),
        }
        if self.source_type == "file":
            identity["identifier"] = Path(self.identifier).name
        elif self.source_type not in {"text", "json"}:
            identity["identifier"] = self.identifier
        hints = self.provider_hints_for(provider)
        if hints is not None:
            identity["provider_hints"] = hints
        return identity

    # ----------------------------------------------------------------- engine internals

    @property
    def _kind(self) -> SourceType:
        return self.source_type

    @property
    def _remote_uri(self) -> str | None:
        """The URI a provider fetches for youtube/uri/arxiv sources, else ``None``."""
        return self.identifier if self.source_type in {"youtube", "uri", "arxiv"} else None

    def _content_hash(self) -> str:
        """SHA-256 hex of the content. Files are hashed as a stream, memoized per stat."""
        if self._path is not None:
            return _hash_file(self._path)
        if self._data is not None:
            return hashlib.sha256(self._data).hexdigest()
        return hashlib.sha256(self._load()).hexdigest()

    def _iter_bytes(self, chunk_size: int = _CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the content in chunks of at most ``chunk_size`` bytes (files are streamed)."""
        if self._path is not None:
            try:
                yield from _iter_file(self._path, chunk_size)
            except OSError as exc:
                raise SourceError(
                    f"Cannot read source file {self._path}: {exc.strerror or exc}",
                    hint="Check that the file still exists and is readable.",
                ) from exc
            return
        data = self._read_bytes()
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    def _read_bytes(self) -> bytes:
        """Return the whole content (for small inline parts)."""
        if self._data is not None:
            return self._data
        return self._load()

    def _load(self) -> bytes:
        """Call the content loader; any failure is a `SourceError` (as in pollux 2.0)."""
        try:
            return self.content_loader()
        except SourceError:
            raise
        except Exception as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise SourceError(
                f"Failed to load content from source: {self.identifier} "
                f"({type(exc).__name__}: {reason})",
                hint="Check that the source still exists and is readable, and that a custom "
                "content_loader returns bytes without raising.",
            ) from exc


def _normalize_arxiv(ref: str) -> str:
    if not ref:
        raise SourceError(
            "arXiv reference cannot be empty", hint="Pass an id such as '2301.07041'."
        )
    arxiv_id = ref
    if "://" in ref or ref.lower().startswith(tuple(f"{h}/" for h in _ARXIV_HOSTS)):
        parsed = urlparse(ref if "://" in ref else f"https://{ref}")
        if parsed.scheme not in {"http", "https"}:
            raise SourceError(
                f"Expected an http(s) arxiv.org URL, got {ref!r}",
                hint="Pass 'https://arxiv.org/abs/<id>' or just the id.",
            )
        host = (parsed.hostname or "").lower()
        if host not in _ARXIV_HOSTS:
            raise SourceError(
                f"Expected arxiv.org URL, got: {parsed.netloc}",
                hint="Pass an arxiv.org abs/pdf URL or just the id.",
            )
        path = parsed.path.strip("/")
        for prefix in ("abs/", "pdf/"):
            if path.startswith(prefix):
                arxiv_id = path[len(prefix) :]
                break
        else:
            raise SourceError(
                f"Unsupported arXiv URL path: {parsed.path}",
                hint="Use an /abs/<id> or /pdf/<id> URL.",
            )
    if arxiv_id.endswith(".pdf"):
        arxiv_id = arxiv_id[: -len(".pdf")]
    arxiv_id = arxiv_id.strip("/")
    if not _ARXIV_ID_RE.match(arxiv_id):
        raise SourceError(
            f"Invalid arXiv id: {arxiv_id!r}",
            hint="Use a new-style id like '2301.07041v2' or an old-style one like "
            "'hep-th/9901001'.",
        )
    return f"https://arxiv.org/pdf/{arxiv_id}.pdf"


def _rebuild_source(
    source_type: SourceType,
    identifier: str,
    mime_type: str,
    size_bytes: int,
    provider_hints: tuple[ProviderHint, ...],
    data: bytes | None,
    path: Path | None,
) -> Source:
    loader: Callable[[], bytes]
    if path is not None:
        file_path = path

        def loader() -> bytes:
            return file_path.read_bytes()

    else:
        content = data or b""

        def loader() -> bytes:
            return content

    return Source(
        source_type=source_type,
        identifier=identifier,
        mime_type=mime_type,
        size_bytes=size_bytes,
        content_loader=loader,
        provider_hints=provider_hints,
        _data=data,
        _path=path,
    )
