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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pollux._scrub import scrub
from pollux.errors import APIError, ConfigurationError, PolluxError
from pollux.providers._delegation import model_readiness
from pollux.providers._sdk_provider import DirectRequest, SDKProvider, StreamMapper
from pollux.providers.base import (
    Capabilities,
    PreparedSources,
    ProviderReadiness,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
)

from .compile import compile_request, validate_options
from .deferred import OpenAIBatches
from .errors import PROVIDER, stream_error, wrap_openai_error
from .extract import extract_response
from .stream import ResponsesStreamMapper
from .uploads import UPLOAD_TTL_S, delete_files, prepare_parts, validate_sources

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.source import Source
    from pollux.transport import Transport

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


class OpenAIProvider(SDKProvider):
    """The OpenAI Responses API provider (``Config(provider="openai", model=...)``).

    Lifecycle, direct path, stream drain and batch glue are :class:`SDKProvider`'s; this class
    states the Responses wire (compile, extract, stream mapping), its client and its errors.
    """

    name = PROVIDER
    CAPABILITIES = CAPABILITIES
    SDK_MODULES = ("openai",)
    BATCHES = OpenAIBatches

    def __init__(
        self, config: Config, *, client: Any = None, transport: Transport | None = None
    ) -> None:
        """Keep the config; the SDK client is built on first use.

        Args:
            config: The session's configuration (``api_key``, ``model``, timeouts).
            client: An ``AsyncOpenAI``-compatible client to use instead (tests).
            transport: The Session's transport (None: a private one, closed with the provider).
        """
        super().__init__(config, client=client, transport=transport)
        #: ``POST`` path of the Responses API under the direct path's base URL.
        self._responses_path = "/responses"

    # ------------------------------------------------------------------ client

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

    def _wrap(self, exc: BaseException, *, phase: str) -> PolluxError:
        """The pollux error for an SDK or direct-path failure (subclasses relabel it)."""
        return wrap_openai_error(exc, phase=phase, timeout_s=self._config.request_timeout_s)

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

    def _direct_request(self, compiled: Any, *, stream: bool) -> DirectRequest:
        return self._responses_path, compiled, None

    async def _sdk_call(self, client: Any, compiled: Any) -> Any:
        return await _create(client, compiled, stream=False)

    async def _sdk_open_stream(self, client: Any, compiled: Any) -> AsyncIterator[Any]:
        events: AsyncIterator[Any] = await _create(client, compiled, stream=True)
        return events

    def _stream_mapper(self) -> ResponsesStreamMapper:
        return ResponsesStreamMapper()

    def _direct_feed(self, mapper: StreamMapper) -> Callable[[Any], StreamChunk | None]:
        feed = mapper.feed

        def checked(event: Any) -> StreamChunk | None:
            if event.__class__ is not dict:
                return None
            error = event.get("error")
            if error:
                # What the SDK raises for an event whose data carries an error object.
                raise _event_error(error)
            return feed(event)

        return checked

    def _extract(self, data: Any) -> ProviderResponse:
        return extract_response(data)

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

    # ------------------------------------ readiness (deferred delivery: SDKProvider, BATCHES)

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
