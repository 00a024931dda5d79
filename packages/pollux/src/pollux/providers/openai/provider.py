"""The ``openai`` provider: the Responses API through the official SDK.

One :class:`OpenAIProvider` per Session owns one ``AsyncOpenAI`` client (built on first use, the
SDK imported lazily), created with ``max_retries=0`` because the engine owns the only retry loop,
and with ``timeout=Config.request_timeout_s``, sending over the Session's
:class:`pollux.transport.Transport` (its shared httpx client, ``http_client=``); ``responses``
calls and streams go through the transport's keep-alive pool as JSON
(:mod:`pollux.providers._direct`). The client
honours the SDK's own environment variables, notably ``OPENAI_BASE_URL``: that is how tests (and
proxies) point pollux at :class:`pollux.testing.Emulator` or another Responses-compatible
endpoint, since ``Config`` keeps ``base_url`` for local servers.

The work is split by job: ``compile`` (request kwargs), ``extract`` (response -> neutral),
``stream`` (events -> chunks), ``uploads`` (sources -> parts, Files API) and ``errors``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pollux._scrub import scrub
from pollux.errors import APIError, ConfigurationError, PolluxError
from pollux.providers._delegation import BatchDelegation, model_readiness
from pollux.providers._direct import DirectPost, sdk_headers, stainless_status_error
from pollux.providers._warm import import_off_loop
from pollux.providers.base import (
    Capabilities,
    PreparedSources,
    ProviderBase,
    ProviderReadiness,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
)
from pollux.transport import Transport

from .compile import compile_request, validate_options
from .deferred import OpenAIBatches
from .errors import PROVIDER, stream_error, wrap_openai_error
from .extract import extract_response
from .stream import ResponsesStreamMapper
from .uploads import UPLOAD_TTL_S, delete_files, prepare_parts, validate_sources

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.source import Source

_log = logging.getLogger("pollux.providers.openai")

#: What the Responses API path supports (checked by the engine before any I/O).
CAPABILITIES = Capabilities(
    streaming=True,
    structured_outputs=True,
    reasoning=True,
    reasoning_budget_tokens=False,
    tools=True,
    conversation=True,
    uploads=True,
    persistent_cache=False,
    implicit_caching=False,
    deferred_delivery=True,
    temperature=True,
    top_p=True,
    seed=False,
    max_tokens=True,
    tool_result_errors=True,
)


class OpenAIProvider(BatchDelegation, ProviderBase):
    """The OpenAI Responses API provider (``Config(provider="openai", model=...)``)."""

    name = PROVIDER
    CAPABILITIES = CAPABILITIES

    def __init__(
        self, config: Config, *, client: Any = None, transport: Transport | None = None
    ) -> None:
        """Keep the config; the SDK client is built on first use.

        Args:
            config: The session's configuration (``api_key``, ``model``, timeouts).
            client: An ``AsyncOpenAI``-compatible client to use instead (tests).
            transport: The Session's transport (None: a private one, closed with the provider).
        """
        self._config = config
        self._http = transport if transport is not None else Transport()
        self._owns_http = transport is None
        self._direct: DirectPost | None = None
        self._client: Any = client
        self._owns_client = client is None
        self._closed = False
        #: ``POST`` path of the Responses API under the direct path's base URL.
        self._responses_path = "/responses"
        #: Per-request auth headers (a refreshed token), or None when the defaults carry them.
        self._request_auth: Callable[[], Awaitable[Mapping[str, str]]] | None = None
        self._batches = OpenAIBatches(
            self._sdk,
            self.compile,
            model=config.model or "",
            timeout_s=config.request_timeout_s,
        )

    # ------------------------------------------------------------------ client

    def _sdk(self) -> Any:
        if self._closed:
            raise ConfigurationError(
                f"The {self.name} provider was used after it was closed",
                hint="Open a new Session (or call the module-level function again).",
            )
        if self._client is None:
            self._client = self._build_client()
        return self._client

    def _build_client(self) -> Any:
        """The SDK client this provider owns (subclasses build theirs: Azure's)."""
        try:
            from openai import AsyncOpenAI
        except ImportError as exc:  # pragma: no cover - openai is a pollux dependency
            raise ConfigurationError(
                "provider='openai' needs the openai package",
                hint='Install it: pip install "openai>=2"',
            ) from exc
        return AsyncOpenAI(
            api_key=self._config.api_key,
            max_retries=0,
            timeout=self._config.request_timeout_s,
            http_client=self._http.httpx_client(),
        )

    def _direct_target(self, client: Any) -> tuple[str, dict[str, str]]:
        """Base URL and default headers of the direct path, read from the SDK client."""
        return str(client.base_url), sdk_headers({**client.default_headers, **client.auth_headers})

    def _poster(self) -> DirectPost | None:
        """The direct path for ``responses.create`` (None for an injected client)."""
        if not self._owns_client:
            return None
        if self._direct is None:
            client = self._sdk()
            base_url, headers = self._direct_target(client)
            self._direct = DirectPost(
                self._http,
                provider=self.name,
                base_url=base_url,
                headers=headers,
                timeout_s=self._config.request_timeout_s,
                status_error=stainless_status_error(client),
            )
        return self._direct

    async def warm(self) -> None:
        """Import the openai SDK in a thread before the first call's deadline starts."""
        if self._client is None:
            await import_off_loop("openai")

    def _wrap(self, exc: BaseException, *, phase: str) -> PolluxError:
        """The pollux error for an SDK or direct-path failure (subclasses relabel it)."""
        return wrap_openai_error(exc, phase=phase, timeout_s=self._config.request_timeout_s)

    async def aclose(self) -> None:
        """Close the SDK client (idempotent)."""
        self._closed = True
        self._client = None
        self._direct = None
        # A client built here sends over the transport's httpx client, which the transport
        # closes; an injected client belongs to the caller.
        if self._owns_http:
            await self._http.aclose()

    # -------------------------------------------------------------- validation

    def validate(self, request: ProviderRequest) -> None:
        """Reject, before any I/O, what the Responses API cannot honour."""
        requirements = request.requirements
        validate_options(
            seed=requirements.seed,
            reasoning_effort=requirements.reasoning_effort,
            reasoning_budget_tokens=requirements.reasoning_budget_tokens,
            provider_options=requirements.provider_options_for(self.name),
        )
        validate_sources(request.sources.sources)
        state = request.continuation_state
        if request.input.continuation is not None:
            if not _response_id(state):
                raise ConfigurationError(
                    "This continuation carries no OpenAI response id",
                    hint="Continue from the Output.continuation of an openai interaction.",
                )
            if state is not None and state.get("sources") != _sources_digest(
                request.sources.sources
            ):
                raise ConfigurationError(
                    "The Environment's sources changed since the turn this continuation comes "
                    "from; OpenAI continues from its stored copy of the earlier ones and would "
                    "not see the change",
                    hint="Keep the Environment's sources the same across the turns of one "
                    "conversation, or start a new conversation (an Input without continuation) "
                    "with the new sources.",
                )
            if state is not None and state.get("stored") is False:
                raise ConfigurationError(
                    "This continuation comes from a response created with store=False, which "
                    "OpenAI cannot continue through previous_response_id",
                    hint="Drop provider_options store=False, or replay the turns with "
                    "Input(history=...).",
                )
        turn = request.input
        if turn.tool_results and turn.continuation is None and not turn.history:
            raise ConfigurationError(
                "tool_results need the turn that requested them",
                hint="Pass Input(continuation=previous_output.continuation, tool_results=...).",
            )
        # Compiling is pure: run it once here so schema/tool errors surface before I/O.
        compile_request(**self._compile_args(request, source_parts=()))

    # ----------------------------------------------------------------- sources

    def needs_sources(self, request: ProviderRequest) -> bool:
        """A continuation turn sends no sources: OpenAI keeps them with the previous response."""
        return _response_id(request.continuation_state) is None

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Inline text, upload files (Files API, ``purpose="user_data"``), link URLs."""
        prepared = await prepare_parts(
            self._sdk(), sources, timeout_s=self._config.request_timeout_s
        )
        return PreparedSources(sources=tuple(sources), parts=prepared.parts, owned=prepared.owned)

    async def release_sources(self, prepared: PreparedSources) -> None:
        """Delete the files uploaded for this call (best effort, never raises)."""
        if prepared.owned and self._client is not None:
            leftover = await delete_files(self._client, list(prepared.owned))
            if leftover:
                _log.warning(
                    "could not delete %d uploaded OpenAI file(s) %s; they expire after %d h",
                    len(leftover),
                    scrub(", ".join(leftover)),
                    UPLOAD_TTL_S // 3600,
                )

    # ------------------------------------------------------------------ calls

    def _compile_args(
        self, request: ProviderRequest, *, source_parts: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        requirements = request.requirements
        turn = request.input
        history = turn.history if turn.continuation is None else None
        return {
            "model": request.model or self._config.model or "",
            "instructions": request.instructions,
            "source_parts": source_parts,
            "content": turn.content,
            "tools": request.tools,
            "output_schema": requirements.output_schema_json(),
            "temperature": requirements.temperature,
            "top_p": requirements.top_p,
            "max_tokens": requirements.max_tokens,
            "reasoning_effort": requirements.reasoning_effort,
            "tool_choice": requirements.tool_choice,
            "previous_response_id": _response_id(request.continuation_state),
            "history": history,
            "tool_results": turn.tool_results,
            "provider_options": requirements.provider_options_for(self.name),
            "stream": request.stream,
        }

    def compile(self, request: ProviderRequest) -> dict[str, Any]:
        """The ``responses.create`` keyword arguments for one interaction."""
        return compile_request(**self._compile_args(request, source_parts=request.sources.parts))

    async def execute(self, compiled: Any) -> ProviderResponse:
        """Create one response and normalize it.

        The compiled body is the wire JSON already: it goes through the transport's pool as it
        is (see :mod:`pollux.providers._direct`), or through an injected client's SDK call.
        """
        poster = self._poster()
        try:
            if poster is not None:
                body = poster.encode(compiled)
                auth = self._request_auth
                response = await poster.post(
                    self._responses_path,
                    body,
                    phase="generate",
                    headers=None if auth is None else await auth(),
                )
            else:
                response = await _create(self._sdk(), compiled, stream=False)
        except Exception as exc:
            raise self._wrap(exc, phase="generate") from exc
        return extract_response(response)

    async def stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        """Create one streamed response and yield neutral chunks.

        The compiled body goes through the transport's pool and the events are mapped from
        their JSON (see :meth:`pollux.providers._direct.DirectPost.stream`); an injected client
        streams through its SDK call. Either way the stream is closed when this ends.
        """
        poster = self._poster()
        if poster is None:
            async for sdk_chunk in self._sdk_stream(compiled):
                yield sdk_chunk
            return
        wrap = self._wrap
        mapper = ResponsesStreamMapper()
        feed = mapper.feed
        body = poster.encode(compiled)
        auth = self._request_auth
        try:
            headers = None if auth is None else await auth()
        except Exception as exc:
            raise wrap(exc, phase="stream") from exc
        events = poster.stream(self._responses_path, body, phase="stream", headers=headers)
        draining = False
        try:
            while True:
                try:
                    batch = await events.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise wrap(exc, phase="stream") from exc
                if draining:
                    # Read to the end of the body (nothing follows the terminal event), so the
                    # connection goes back to the pool.
                    continue
                for event in batch:
                    if event.__class__ is not dict:
                        continue
                    error = event.get("error")
                    if error:
                        # What the SDK raises for an event whose data carries an error object.
                        raise _event_error(error)
                    chunk = feed(event)
                    if chunk is not None:
                        yield chunk
                    if mapper.done:
                        draining = True
                        break
            mapper.finish()
        finally:
            await events.aclose()

    async def _sdk_stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        client = self._sdk()
        mapper = ResponsesStreamMapper()
        try:
            events = await _create(client, compiled, stream=True)
        except Exception as exc:
            raise self._wrap(exc, phase="stream") from exc
        try:
            while True:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._wrap(exc, phase="stream") from exc
                chunk = mapper.feed(event)
                if chunk is not None:
                    yield chunk
                if mapper.done:
                    break
            mapper.finish()
        finally:
            await events.close()

    def continuation_state(
        self, request: ProviderRequest, response: ProviderResponse
    ) -> dict[str, Any]:
        """Continuations replay through ``previous_response_id`` (server-side state)."""
        if not response.response_id:
            return {}
        state: dict[str, Any] = {"response_id": response.response_id}
        digest = _sources_digest(request.sources.sources)
        if digest is not None:
            # The next turn sends no sources (the server keeps them): remember which they were.
            state["sources"] = digest
        options = request.requirements.provider_options_for(self.name) or {}
        if options.get("store") is False:
            state["stored"] = False
        return state

    # ------------------------------- readiness (deferred delivery: BatchDelegation, self._batches)

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Ask the API for the model; ready when it answers."""
        return await model_readiness(
            model or self._config.model,
            lambda target: self._sdk().models.retrieve(target),
            wrap_openai_error,
            provider=PROVIDER,
        )


def _create(client: Any, compiled: Mapping[str, Any], *, stream: bool) -> Any:
    """Call ``responses.create`` with the compiled body.

    Only ``model`` and ``stream`` go through the SDK's keyword arguments; the rest travels as
    ``extra_body``, which the SDK sends as is. The body is plain JSON that ``compile`` built to
    the wire format already, and skipping the SDK's recursive TypedDict transform of ``input``
    saves about a third of the client CPU per call (see ``bench/bench_openai_overhead.py``).
    """
    body = {key: value for key, value in compiled.items() if key not in ("model", "stream")}
    if stream:
        return client.responses.create(model=compiled["model"], stream=True, extra_body=body)
    return client.responses.create(model=compiled["model"], extra_body=body)


def _event_error(error: Any) -> APIError:
    message = error.get("message") if isinstance(error, Mapping) else None
    code = error.get("code") if isinstance(error, Mapping) else None
    return stream_error(
        message if isinstance(message, str) and message else "An error occurred during streaming",
        code=str(code) if code is not None else None,
    )


def _sources_digest(sources: Sequence[Source]) -> str | None:
    """A short content identity of the environment's sources (None when there are none)."""
    if not sources:
        return None
    identities = [source._environment_identity(provider=PROVIDER) for source in sources]
    encoded = json.dumps(identities, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()[:32]


def _response_id(state: Mapping[str, Any] | None) -> str | None:
    if not state:
        return None
    value = state.get("response_id")
    return value if isinstance(value, str) and value else None


__all__ = ["CAPABILITIES", "OpenAIProvider"]
