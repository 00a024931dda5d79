"""Sources for Vertex AI: inline what fits in the request, reference ``gs://`` and web URIs.

Vertex AI has no Files API: a model reads a file either from inside the request (base64
``inline_data``) or from a URI it fetches itself (``file_data.file_uri``: ``gs://`` objects the
project may read, public https URLs, YouTube). So, decided by :func:`plan_source` with no I/O
(a source that cannot go fails before any request):

=====================================  =======================================================
source                                 part
=====================================  =======================================================
text / JSON                            ``text``
text-like file up to 1 MiB             ``text`` (read as UTF-8 off the event loop)
other files and bytes                  ``inline_data``, while the request's inline content
                                       stays within :data:`INLINE_MAX_BYTES`
gs://, https, YouTube and arXiv URIs   ``file_data{file_uri, mime_type}``
URI with ``with_gemini_url_context``   its URL as ``text``, plus the ``url_context`` tool
=====================================  =======================================================

Inline content above the limit is a :class:`ConfigurationError` whose hint says to upload the
file to Cloud Storage and pass ``Source.from_uri("gs://...", mime_type=...)``: pollux does not
copy local files into a bucket on its own. Nothing is uploaded, so nothing is deleted when the
Session closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pollux.errors import ConfigurationError
from pollux.providers.gemini.uploads import shared_route, source_part

from .errors import PROVIDER

if TYPE_CHECKING:
    from pollux.source import Source

__all__ = ["INLINE_MAX_BYTES", "VertexSources", "plan_source", "validate_sources"]

Route = Literal["text", "read_text", "inline", "remote", "url_context"]

#: The most raw content pollux sends inline in one Vertex request (base64 makes it 4/3 larger;
#: Vertex AI takes requests up to 20 MB with inline data).
INLINE_MAX_BYTES = 15 * (1 << 20)


def plan_source(source: Source) -> Route:
    """Decide how one source reaches Vertex AI, with no I/O.

    Raises:
        ConfigurationError: Vertex AI cannot take this source; the hint says what to do.
    """
    shared = shared_route(
        source,
        provider=PROVIDER,
        fetch_hint="Use a gs:// URI the project can read or an https:// URL, or pass the "
        "file with Source.from_file() if it is small enough to send inline.",
    )
    if shared is not None:
        return shared
    return "inline"


def validate_sources(sources: Sequence[Source]) -> None:
    """Check every source can be routed and the inline ones fit (no I/O).

    Raises:
        ConfigurationError: A source Vertex AI cannot take, or inline content above
            :data:`INLINE_MAX_BYTES`; the hint names the sources to move to Cloud Storage.
    """
    inline = [source for source in sources if plan_source(source) == "inline"]
    total = sum(source.size_bytes for source in inline)
    if total > INLINE_MAX_BYTES:
        largest = sorted(inline, key=lambda s: s.size_bytes, reverse=True)[:3]
        names = ", ".join(f"{s.identifier} ({s.size_bytes:,} bytes)" for s in largest)
        raise ConfigurationError(
            f"provider='vertex' sends local files inside the request and these hold "
            f"{total:,} bytes, above the {INLINE_MAX_BYTES:,} a request may carry "
            f"(largest: {names})",
            hint="Vertex AI has no Files API: upload the large files to Cloud Storage "
            "(gcloud storage cp FILE gs://BUCKET/) and pass Source.from_uri('gs://BUCKET/FILE', "
            "mime_type=...), readable by the project's Vertex AI service agent.",
        )


class VertexSources:
    """Parts for a Vertex request; the Gemini provider's upload-registry surface, no uploads.

    ``forget``, ``pin`` and ``delete_all`` exist because the Gemini provider calls them on its
    upload registry; with nothing uploaded they have nothing to do.
    """

    uploads = 0

    def __len__(self) -> int:
        return 0

    async def parts(self, sources: Sequence[Source]) -> tuple[dict[str, Any], ...]:
        """The parts for ``sources``; files are read off the event loop."""
        validate_sources(sources)
        routes = [plan_source(source) for source in sources]

        def build(source: Source, route: Route) -> dict[str, Any]:
            return source_part(source, route, text=None, file=None)

        out: list[dict[str, Any]] = []
        for source, route in zip(sources, routes, strict=True):
            if source._path is not None and route in ("read_text", "inline"):
                out.append(await asyncio.to_thread(build, source, route))
            else:
                out.append(build(source, route))
        return tuple(out)

    def forget(self, names: Sequence[str]) -> None:
        """Nothing to forget: no file is uploaded."""

    def pin(self, parts: Sequence[Mapping[str, Any]]) -> None:
        """Nothing to pin: no file is uploaded."""

    async def delete_all(self) -> list[str]:
        """Nothing to delete: no file is uploaded."""
        return []
