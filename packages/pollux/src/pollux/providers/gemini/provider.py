"""The ``gemini`` provider: the Gemini Developer API through the official ``google-genai`` SDK.

One :class:`GeminiProvider` per Session owns one ``genai.Client`` (built on first use, the SDK
imported lazily) and uses its async side (``client.aio``). The client is created with
``HttpRetryOptions(attempts=1)``, which turns off both the SDK's tenacity retries and its
implicit reconnect-and-resend on connection errors: the engine owns the only retry loop. The
request timeout is ``Config.request_timeout_s``. The SDK reads ``GOOGLE_GEMINI_BASE_URL`` itself,
so that variable points pollux at a gateway, a proxy or :class:`pollux.testing.Emulator`
(``Config(base_url=...)`` stays reserved for local servers).

Transport: the SDK sends over the Session's :class:`pollux.transport.Transport` (its shared httpx
client, ``HttpOptions(httpx_async_client=...)``), and ``generateContent`` and
``streamGenerateContent`` go straight through the transport's keep-alive pool with the REST body
``compile`` built (:mod:`pollux.providers._direct`; error statuses still raise the SDK's
``errors.APIError`` subclasses), which ``bench/bench_gemini_fanout.py`` and
``bench/bench_streaming.py`` measure as far cheaper per request and per chunk than the SDK's
pipeline.

The work is split by job: ``compile`` (request -> ``generate_content`` arguments), ``extract``
(response -> neutral), ``stream`` (chunks -> neutral), ``uploads`` (sources -> parts, Files API,
reuse), ``schema`` (JSON Schema -> Gemini's subset), ``caching`` (persistent context caches),
``deferred`` (Batch API) and ``errors``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError, PolluxError
from pollux.providers._delegation import model_readiness
from pollux.providers._direct import sdk_headers
from pollux.providers._sdk_provider import DirectRequest, SDKProvider, StreamMapper
from pollux.providers.base import (
    CacheUse,
    Capabilities,
    PreparedSources,
    ProviderReadiness,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
)

from .caching import DEFAULT_TTL_S, REGISTRY, GeminiCaches, cache_names
from .client import DEFAULT_TRANSPORT, build_client
from .compile import (
    build_config,
    payload_contents,
    rest_request,
    turn_contents,
    validate_options,
)
from .deferred import GeminiBatches
from .errors import PROVIDER, endpoint, wrap_gemini_error
from .extract import extract_response
from .stream import GeminiStreamMapper
from .uploads import UploadRegistry, file_names, uses_url_context, validate_sources

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.environment import CachePolicy
    from pollux.source import Source
    from pollux.transport import Transport

__all__ = [
    "CAPABILITIES",
    "DEFAULT_TRANSPORT",
    "DIRECT_REQUESTS",
    "GeminiProvider",
    "build_client",
    "open_stream",
    "post_generate",
]

_log = logging.getLogger("pollux.providers.gemini")

# The SDK requires ``contents``; the real ones travel in the request body (see ``execute``).
_PLACEHOLDER = "."

#: What the Gemini Developer API path supports (checked by the engine before any I/O).
CAPABILITIES = Capabilities(
    streaming=True,
    structured_outputs=True,
    reasoning=True,
    reasoning_budget_tokens=True,
    tools=True,
    conversation=True,
    uploads=True,
    persistent_cache=True,
    implicit_caching=False,
    deferred_delivery=True,
    temperature=True,
    top_p=True,
    seed=True,
    max_tokens=True,
    tool_result_errors=True,
)


#: Send through the SDK's request pipeline directly (see :func:`post_generate`); tests turn it
#: off to exercise the public fallback.
DIRECT_REQUESTS = True


def _model_path(model: str, *, vertex: bool = False) -> str:
    if vertex:
        # Under the SDK's own pipeline a Vertex path gets ``projects/{p}/locations/{l}/``
        # prefixed by the SDK; a full resource name is left as it is.
        if model.startswith(("projects/", "publishers/")):
            return model
        return f"publishers/google/models/{model.removeprefix('models/')}"
    if model.startswith(("models/", "tunedModels/")):
        return model
    return f"models/{model}"


def _is_vertex(client: Any) -> bool:
    return getattr(client, "vertexai", False) is True


async def post_generate(client: Any, compiled: Mapping[str, Any]) -> Any:
    """POST one compiled request to ``:generateContent``; return the answer as JSON.

    The body is the REST JSON ``compile`` built. It goes through the SDK's own request pipeline
    (``client.aio._api_client.async_request``: base URL, API version, key header, timeout,
    transport, error mapping), skipping ``generate_content``'s per-call pydantic conversion of
    the request and the response, which costs more client CPU than the raw SDK's whole call
    (``bench/bench_gemini_fanout.py``). Should that internal entry point ever move, the public
    ``generate_content`` carries the same body through ``http_options.extra_body`` and returns
    the raw HTTP body (``should_return_http_response``).
    """
    body = rest_request(compiled)
    api = getattr(client.aio, "_api_client", None)
    send = getattr(api, "async_request", None)
    if DIRECT_REQUESTS and send is not None:
        model = _model_path(compiled["model"], vertex=_is_vertex(client))
        answer = await send("post", f"{model}:generateContent", body)
        raw = getattr(answer, "body", None)
    else:
        response = await client.aio.models.generate_content(
            model=compiled["model"],
            contents=_PLACEHOLDER,
            config={"http_options": {"extra_body": body}, "should_return_http_response": True},
        )
        raw = response.sdk_http_response.body
    return json.loads(raw) if raw else {}


async def open_stream(client: Any, compiled: Mapping[str, Any]) -> AsyncIterator[Any]:
    """Start one ``:streamGenerateContent`` call; return an iterator of chunks.

    Like :func:`post_generate`, the prebuilt REST body goes through the SDK's request pipeline
    and chunks arrive as JSON dicts (the SDK still raises in-band errors); without that entry
    point, the public ``generate_content_stream`` is used with the SDK-form arguments and its
    chunks are SDK objects (the mapper reads both).
    """
    api = getattr(client.aio, "_api_client", None)
    send = getattr(api, "async_request_streamed", None)
    if not (DIRECT_REQUESTS and send is not None):
        chunks: AsyncIterator[Any] = await client.aio.models.generate_content_stream(
            model=compiled["model"], contents=compiled["contents"], config=compiled["config"]
        )
        return chunks
    model = _model_path(compiled["model"], vertex=_is_vertex(client))
    path = f"{model}:streamGenerateContent?alt=sse"
    raw: AsyncIterator[Any] = await send("post", path, rest_request(compiled))

    async def decoded() -> AsyncIterator[Any]:
        try:
            async for piece in raw:
                body = getattr(piece, "body", None)
                if body:
                    yield json.loads(body)
        finally:
            aclose = getattr(raw, "aclose", None)
            if aclose is not None:
                await aclose()

    return decoded()


class GeminiProvider(SDKProvider):
    """The Gemini Developer API provider (``Config(provider="gemini", model=...)``).

    Lifecycle, direct path, stream drain and batch glue are :class:`SDKProvider`'s; this class
    states the generateContent wire (compile, extract, stream mapping), its client and
    endpoint, its uploads and caches, and its errors.
    """

    name = PROVIDER
    CAPABILITIES = CAPABILITIES
    SDK_MODULES = ("google.genai", "google.genai.types")
    BATCHES = GeminiBatches

    def __init__(
        self, config: Config, *, client: Any = None, transport: Transport | None = None
    ) -> None:
        """Keep the config; the SDK client is built on first use.

        Args:
            config: The session's configuration (``api_key``, ``model``, timeouts).
            client: A ``genai.Client``-compatible client to use instead (tests); every call
                then goes through it.
            transport: The Session's transport (None: a private one, closed with the provider).
        """
        super().__init__(config, client=client, transport=transport)
        self.uploads: Any = self._new_uploads()
        self.caches: Any = self._new_caches()

    # ------------------------- client (hooks: what a Gemini-family endpoint changes)

    def _build_client(self) -> Any:
        """Hook: the ``genai.Client`` this provider sends through (the Developer API's)."""
        return build_client(self._config, http=self._http)

    def _new_uploads(self) -> Any:
        """Hook: the source preparer (``parts``, ``forget``, ``pin``, ``delete_all``)."""
        return UploadRegistry(self._sdk, timeout_s=self._config.request_timeout_s)

    def _new_caches(self) -> Any:
        """Hook: the context-cache resolver (``resolve``)."""
        return GeminiCaches(self._sdk, self.uploads, self._config)

    def _validate_sources(self, sources: Sequence[Source]) -> None:
        """Hook: refuse, with no I/O, a source this endpoint cannot take."""
        validate_sources(sources)

    def _model_resource(self, model: str) -> str:
        """Hook: the model's path under the direct base URL (``models/{model}``)."""
        return _model_path(model)

    def _direct_enabled(self) -> bool:
        return self._owns_client and DIRECT_REQUESTS

    def _direct_target(self, client: Any) -> tuple[str, dict[str, str]]:
        """The SDK's base URL and API version, and its headers (the key)."""
        options = client._api_client._http_options
        base = str(options.base_url or "").rstrip("/")
        if options.api_version:
            base = f"{base}/{options.api_version}"
        return base, sdk_headers(options.headers or {})

    def _status_error(
        self, client: Any
    ) -> Callable[[int, Mapping[str, str], bytes, str], BaseException]:
        return _genai_status_error

    def _model(self, request: ProviderRequest | None = None) -> str:
        model = (request.model if request is not None else None) or self._config.model
        if not model:
            raise ConfigurationError(
                f"provider={self.name!r} needs a model",
                hint=f"Pass Config(provider={self.name!r}, model='gemini-2.5-flash'), for example.",
            )
        return model

    async def _release_all(self, client: Any) -> None:
        """Delete this Session's uploads (best effort)."""
        if len(self.uploads):
            leftover = await self.uploads.delete_all()
            if leftover:
                _log.warning(
                    "could not delete %d uploaded Gemini file(s) %s; they expire after 48 h",
                    len(leftover),
                    ", ".join(leftover),
                )

    def _wrap(self, exc: BaseException, *, phase: str) -> PolluxError:
        """Hook: one exception around a call, as the pollux error to raise."""
        return wrap_gemini_error(exc, phase=phase, timeout_s=self._config.request_timeout_s)

    def _failed(self, exc: BaseException, *, phase: str, compiled: Any) -> PolluxError:
        self._note_failure(compiled, exc)
        return self._wrap(exc, phase=phase)

    # -------------------------------------------------------------- validation

    def validate(self, request: ProviderRequest) -> None:
        """Reject, before any I/O, what Gemini cannot honour."""
        requirements = request.requirements
        validate_options(
            model=self._model(request),
            reasoning_effort=requirements.reasoning_effort,
            reasoning_budget_tokens=requirements.reasoning_budget_tokens,
            provider_options=requirements.provider_options_for(self.name),
        )
        self._validate_sources(request.sources.sources)
        state = request.continuation_state
        if request.input.continuation is not None and not isinstance(
            (state or {}).get("contents"), list
        ):
            raise ConfigurationError(
                "This continuation carries no Gemini transcript",
                hint=f"Continue from the Output.continuation of a {self.name} interaction.",
            )
        # Compiling is pure: run it once here so schema/tool errors surface before I/O.
        self._compile(request, source_parts=())

    # ----------------------------------------------------------------- sources

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Inline text and small bytes, upload files once per Session (reused), link URIs."""
        parts = await self.uploads.parts(sources)
        return PreparedSources(sources=tuple(sources), parts=parts)

    async def prepare_cache(self, request: ProviderRequest, policy: CachePolicy) -> PreparedSources:
        """Find or create the ``cachedContents`` holding the environment (see :mod:`.caching`)."""
        entry, created = await self.caches.resolve(
            request, self._model(request), policy.ttl_seconds
        )
        return PreparedSources(
            sources=tuple(request.sources.sources),
            cache=CacheUse(
                name=entry.name,
                created=created,
                tokens=entry.tokens,
                ttl_seconds=(policy.ttl_seconds or DEFAULT_TTL_S) if created else None,
            ),
        )

    # ------------------------------------------------------------------ calls

    def _transcript(self, request: ProviderRequest) -> list[dict[str, Any]]:
        turn = request.input
        state = request.continuation_state or {}
        transcript = state.get("contents") if turn.continuation is not None else None
        return turn_contents(
            transcript=transcript,
            history=turn.history if turn.continuation is None else None,
            content=turn.content,
            tool_results=turn.tool_results,
            model=self._model(request),
        )

    def _compile(
        self, request: ProviderRequest, *, source_parts: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        requirements = request.requirements
        model = self._model(request)
        sources = request.sources
        cache_name = sources.cache.name if sources.cache is not None else None
        config = build_config(
            model=model,
            instructions=request.instructions,
            tools=request.tools,
            url_context=any(uses_url_context(s) for s in sources.sources),
            output_schema=requirements.output_schema_json(),
            temperature=requirements.temperature,
            top_p=requirements.top_p,
            max_tokens=requirements.max_tokens,
            seed=requirements.seed,
            reasoning_effort=requirements.reasoning_effort,
            reasoning_budget_tokens=requirements.reasoning_budget_tokens,
            tool_choice=requirements.tool_choice,
            cached_content=cache_name,
            provider_options=requirements.provider_options_for(self.name),
        )
        parts = () if cache_name is not None else source_parts
        contents = self._transcript(request)
        if not contents and not sources.sources and cache_name is None:
            raise ConfigurationError(
                "The request has nothing to send: no prompt, sources or tool results",
                hint="Pass a prompt, or sources to ask about.",
            )
        compiled: dict[str, Any] = {"model": model, "config": config}
        compiled["contents"] = payload_contents(contents, parts) if (contents or parts) else []
        return compiled

    def compile(self, request: ProviderRequest) -> dict[str, Any]:
        """The ``generate_content`` keyword arguments (``model``, ``contents``, ``config``)."""
        return self._compile(request, source_parts=request.sources.parts)

    def _note_failure(self, compiled: Mapping[str, Any], exc: BaseException) -> None:
        # A request naming a file or cache Gemini no longer has fails with 403/404: stop
        # reusing what it named, so the next call uploads (or creates) it again.
        if getattr(exc, "code", None) in (403, 404):
            cache = cache_names(compiled)
            if cache is not None:
                REGISTRY.forget(name=cache)
            uris = [
                uri
                for content in compiled.get("contents") or ()
                for uri in file_names(content.get("parts") or ())
            ]
            self.uploads.forget(uris)

    def _direct_request(self, compiled: Any, *, stream: bool) -> DirectRequest:
        """``:generateContent`` (``:streamGenerateContent?alt=sse``) with the REST body."""
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/{self._model_resource(compiled['model'])}:{method}", rest_request(compiled), None

    async def _sdk_call(self, client: Any, compiled: Any) -> Any:
        return await post_generate(client, compiled)

    async def _sdk_open_stream(self, client: Any, compiled: Any) -> AsyncIterator[Any]:
        return await open_stream(client, compiled)

    def _stream_mapper(self) -> GeminiStreamMapper:
        return GeminiStreamMapper()

    def _direct_feed(self, mapper: StreamMapper) -> Callable[[Any], StreamChunk | None]:
        feed = mapper.feed

        def checked(chunk: Any) -> StreamChunk | None:
            if chunk.__class__ is dict and "error" in chunk:
                # An in-band error, raised as the SDK raises it (after the chunks before it).
                error = _genai_event_error(chunk)
                raise self._wrap(error, phase="stream") from error
            return feed(chunk)

        return checked

    def _extract(self, data: Any) -> ProviderResponse:
        return extract_response(data)

    def continuation_state(
        self, request: ProviderRequest, response: ProviderResponse
    ) -> dict[str, Any]:
        """The transcript so far (without sources) plus the model's turn, as JSON."""
        contents = self._transcript(request)
        content = (response.provider_state or {}).get("gemini_content")
        if content is None:
            content = {"role": "model", "parts": [{"text": response.text}] if response.text else []}
        if content["parts"]:
            contents.append(content)
        return {"contents": contents}

    # ------------------------------------ readiness (deferred delivery: SDKProvider, BATCHES)

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Probe the model on the path calls use; ready when it answers.

        The probe is ``models/{model}:countTokens`` (free, no generation) at the configured
        base URL and API version, the ``models/{model}:...`` family every call posts to: a
        gateway that lists models on another route, or serves only another API version, is
        not reported ready while every call would fail.
        """
        target = model or self._config.model
        readiness = await model_readiness(
            target,
            lambda name: self._sdk().aio.models.count_tokens(model=name, contents="ready?"),
            wrap_gemini_error,
            provider=PROVIDER,
        )
        base, version = endpoint()
        where = f" at {base}/{version}"
        if readiness.ready:
            return replace(readiness, message=f"model {target!r} answers{where}")
        return replace(readiness, message=f"{readiness.message}{where}")


def _genai_event_error(payload: Mapping[str, Any]) -> Any:
    """The SDK's ``errors.APIError`` subclass for an in-band ``{"error": ...}`` stream chunk."""
    from google.genai import errors

    error = payload.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    status = code if isinstance(code, int) and not isinstance(code, bool) else 500
    try:
        errors.APIError.raise_error(status, dict(payload), None)
    except errors.APIError as exc:
        return exc
    return errors.APIError(status, dict(payload), None)  # pragma: no cover - always raises


def _genai_status_error(status: int, headers: Mapping[str, str], body: bytes, url: str) -> Any:
    """The SDK's ``errors.APIError`` subclass for an error answer, as its pipeline builds it."""
    from google.genai import errors

    try:
        payload = json.loads(body) if body else {}
    except ValueError:
        payload = {"error": {"code": status, "message": body.decode("utf-8", "replace")}}
    try:
        errors.APIError.raise_error(status, payload, None)
    except errors.APIError as exc:
        return exc
    return errors.APIError(status, payload, None)  # pragma: no cover - raise_error always raises
