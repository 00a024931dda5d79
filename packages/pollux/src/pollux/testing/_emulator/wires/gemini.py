"""The Gemini Developer API, as ``google-genai`` speaks it.

Mounted as ``"gemini"``: ``emu.base_url("gemini")`` is ``.../gemini``, what
``genai.Client(http_options=types.HttpOptions(base_url=...))`` expects; the SDK adds the API
version itself, and both ``v1`` and ``v1beta`` are served (uploads under ``/upload/<version>``).
The key is read from ``x-goog-api-key`` or ``?key=``; a request without one is refused with
Google's 403, a wrong one (with ``Emulator(api_key=...)``) with Google's 400 ``API_KEY_INVALID``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pollux.testing._emulator._core import ApiError, Core, Route, WireSpec
from pollux.testing._emulator._http import HTTPRequest, Outcome, Response, StreamResponse

from . import _gemini_batches as batches
from . import _gemini_caches as caches
from . import _gemini_files as files
from . import _gemini_generate as gen
from ._gemini_common import GoogleError, google_error_body
from ._gemini_state import GeminiState

VERSIONS = ("v1beta", "v1")


def _routes() -> tuple[Route, ...]:
    routes: list[Route] = []
    for v in VERSIONS:
        routes += [
            Route(
                "POST",
                f"/{v}/models/{{model}}:generateContent",
                "generate.content",
                gen.generate_content,
                generates=True,
            ),
            Route(
                "POST",
                f"/{v}/models/{{model}}:streamGenerateContent",
                "generate.stream",
                gen.stream_generate_content,
                generates=True,
            ),
            Route("POST", f"/{v}/models/{{model}}:countTokens", "count_tokens", gen.count_tokens),
            Route(
                "POST",
                f"/{v}/models/{{model}}:batchGenerateContent",
                "batches.create",
                batches.create,
            ),
            Route("GET", f"/{v}/models", "models.list", gen.list_models),
            Route("GET", f"/{v}/models/{{model}}", "models.get", gen.get_model),
            Route("POST", f"/upload/{v}/files", "files.upload", files.upload),
            Route("GET", f"/{v}/files", "files.list", files.list_files),
            Route("GET", f"/{v}/files/{{file_id}}:download", "files.download", files.download),
            Route(
                "GET", f"/download/{v}/files/{{file_id}}:download", "files.download", files.download
            ),
            Route("GET", f"/{v}/files/{{file_id}}", "files.get", files.get),
            Route("DELETE", f"/{v}/files/{{file_id}}", "files.delete", files.delete),
            Route("POST", f"/{v}/cachedContents", "caches.create", caches.create),
            Route("GET", f"/{v}/cachedContents", "caches.list", caches.list_caches),
            Route("GET", f"/{v}/cachedContents/{{cache_id}}", "caches.get", caches.get),
            Route("PATCH", f"/{v}/cachedContents/{{cache_id}}", "caches.update", caches.update),
            Route("DELETE", f"/{v}/cachedContents/{{cache_id}}", "caches.delete", caches.delete),
            Route("GET", f"/{v}/batches", "batches.list", batches.list_batches),
            Route("POST", f"/{v}/batches/{{batch_id}}:cancel", "batches.cancel", batches.cancel),
            Route("GET", f"/{v}/batches/{{batch_id}}", "batches.get", batches.get),
            Route("DELETE", f"/{v}/batches/{{batch_id}}", "batches.delete", batches.delete),
        ]
    return tuple(routes)


def _key(headers: Mapping[str, str]) -> str | None:
    return headers.get("x-goog-api-key")


def _authorize(route: Route, http: HTTPRequest, expected: str | None) -> ApiError | None:
    if route.name == "files.upload" and "upload_id" in http.query:
        return None  # the upload URL itself authorizes the chunks, as on Google's servers
    key = http.headers.get("x-goog-api-key") or http.query.get("key")
    if not key:
        return GoogleError(
            403,
            "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API.",
        )
    if expected is not None and key != expected:
        return GoogleError(
            400,
            "API key not valid. Please pass a valid API key.",
            details=[
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            ],
        )
    return None


def _finish(route: Route, http: HTTPRequest, outcome: Outcome) -> Outcome:
    if isinstance(outcome, (Response, StreamResponse)):
        # Google sends the delay in RetryInfo, never as a Retry-After header.
        outcome.headers.pop("retry-after", None)
        if route.name == "files.upload" and outcome.status != 200:
            # Without an upload status the SDK sleeps and resends the chunk.
            outcome.headers.setdefault("x-goog-upload-status", "final")
    return outcome


def _state(core: Core) -> GeminiState:
    return GeminiState(core)


WIRES = (
    WireSpec(
        "gemini",
        "/gemini",
        "/gemini",
        _routes(),
        google_error_body,
        _key,
        _state,
        authorize=_authorize,
        finish=_finish,
    ),
)
