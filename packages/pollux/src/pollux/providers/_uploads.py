"""What the SDK providers' ``uploads`` modules share about sources: MIME checks, names, streaming.

Each provider routes sources its own way (``plan_source`` in its ``uploads`` module); these are
the pieces that are the same for all of them: which MIME types are text, the name an upload
carries, the refusals OpenAI and Anthropic give for YouTube and non-http(s) URLs and for media
they cannot read, and streaming one source's content into an SDK upload call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pollux.errors import ConfigurationError, SourceError

if TYPE_CHECKING:
    from pollux.errors import PolluxError
    from pollux.source import Source

__all__ = [
    "TEXT_LIKE_APPLICATION",
    "base_mime",
    "is_text_mime",
    "media_hint",
    "refuse_unreachable",
    "stream_upload",
    "upload_name",
]

_T = TypeVar("_T")

#: ``application/*`` types every provider reads as text (a provider may accept a few more).
TEXT_LIKE_APPLICATION = frozenset(
    {
        "application/json",
        "application/jsonl",
        "application/x-ndjson",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-tex",
        "application/x-latex",
        "application/x-sh",
        "application/sql",
        "application/csv",
    }
)


def base_mime(mime: str) -> str:
    """The MIME type without parameters, lower-cased (``"Text/Plain; q=1"`` -> ``text/plain``)."""
    return mime.split(";", 1)[0].strip().lower()


def is_text_mime(mime: str, *, also: frozenset[str] = frozenset()) -> bool:
    """Whether ``mime`` (already :func:`base_mime`) is text.

    Text is ``text/*``, a text-like ``application/*`` type (:data:`TEXT_LIKE_APPLICATION` plus
    ``also``) or a ``+json``/``+xml``/``+yaml`` suffix.
    """
    return (
        mime.startswith("text/")
        or mime in TEXT_LIKE_APPLICATION
        or mime in also
        or mime.endswith(("+json", "+xml", "+yaml"))
    )


def refuse_unreachable(source: Source, *, provider: str) -> None:
    """Refuse a YouTube source, and a URI source that is not http(s), for ``provider``.

    Raises:
        ConfigurationError: The provider cannot fetch the source; the hint says what to do.
    """
    kind = source.source_type
    if kind == "youtube":
        raise ConfigurationError(
            f"provider={provider!r} cannot read YouTube videos",
            hint="Use provider='gemini' for YouTube, or pass a transcript as Source.from_text().",
        )
    if kind in ("uri", "arxiv"):
        uri = source.identifier
        if not uri.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"provider={provider!r} can only fetch http(s) URLs, got {uri!r}",
                hint="Download the file and pass Source.from_file(path) instead.",
            )


def media_hint(mime: str) -> str | None:
    """The hint for audio, video or an unsupported image type (None for other content)."""
    if mime.startswith(("audio/", "video/")):
        return "Use provider='gemini' for audio and video, or transcribe it first."
    if mime.startswith("image/"):
        return "Convert the image to PNG, JPEG, WebP or GIF."
    return None


def upload_name(source: Source) -> str:
    """The file name an upload of ``source`` carries."""
    if source._path is not None:
        return source._path.name
    return Path(source.identifier).name or "upload"


async def stream_upload(
    source: Source,
    send: Callable[[Any], Awaitable[_T]],
    *,
    wrap: Callable[[Exception], PolluxError],
) -> _T:
    """Call ``send(content)`` with an open file (streamed from disk) or the in-memory bytes.

    Raises:
        SourceError: The file cannot be read.
        PolluxError: ``send`` failed (``wrap`` maps the SDK's exception).
    """
    try:
        with contextlib.ExitStack() as stack:
            if source._path is not None:
                handle: Any = stack.enter_context(source._path.open("rb"))
            else:
                handle = source._read_bytes()
            return await send(handle)
    except OSError as exc:
        raise SourceError(
            f"Cannot read source file {source.identifier}: {exc.strerror or exc}",
            hint="Check that the file still exists and is readable.",
        ) from exc
    except Exception as exc:
        raise wrap(exc) from exc
