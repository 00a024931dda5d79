"""The ``anthropic`` provider: the Messages API through the official SDK.

One :class:`AnthropicProvider` per Session owns one ``AsyncAnthropic`` client (built on first use,
the SDK imported lazily), created with ``max_retries=0`` because the engine owns the only retry
loop, and with ``timeout=Config.request_timeout_s``. The SDK sends over the Session's
:class:`pollux.transport.Transport` (its shared httpx client, ``http_client=``), and
``messages.create`` goes straight through the transport's keep-alive pool with the body
``compile`` built, parsed as plain JSON, and so do streams, their events mapped from JSON
(:mod:`pollux.providers._direct`; error statuses still raise the SDK's exceptions): the SDK's
pydantic models cost more client CPU per call than a 32-wide fan-out leaves (``python -m bench
anthropic_fanout``), and about 7x a bare socket's per streamed chunk (``python -m bench
streaming``). The client honours
the SDK's own environment variables, notably ``ANTHROPIC_BASE_URL``: that is how tests and
proxies point pollux at :class:`pollux.testing.Emulator`, since ``Config`` keeps ``base_url``
for local servers.

The work is split by job: :mod:`.compile` (request kwargs), :mod:`.extract` (message ->
neutral), :mod:`.stream` (events -> chunks), :mod:`.uploads` (sources -> blocks, Files API),
:mod:`.caching` (prompt-cache breakpoints), :mod:`.deferred` (Message Batches), :mod:`.models`
(model families) and :mod:`.errors`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pollux.errors import APIError, ConfigurationError, PolluxError
from pollux.interaction.environment import CachePolicy
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

from .caching import cache_control, prefix_cacheable, validate_cache
from .compile import AnthropicCall, compile_request, conversation, validate_options
from .deferred import MessageBatches
from .errors import PROVIDER, wrap_anthropic_error
from .extract import extract_response
from .stream import MessagesStreamMapper
from .uploads import UploadRegistry, validate_sources

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.source import Source

__all__ = ["CAPABILITIES", "AnthropicProvider"]

_log = logging.getLogger("pollux.providers.anthropic")

#: What the Messages API path supports (checked by the engine before any I/O; model-family
#: limits, such as no thinking on Claude 3.5, are checked in ``validate``).
CAPABILITIES = Capabilities(
    streaming=True,
    structured_outputs=True,
    reasoning=True,
    reasoning_budget_tokens=True,
    tools=True,
    conversation=True,
    uploads=True,
    persistent_cache=False,
    implicit_caching=True,
    prompt_cache_ttl=True,
    deferred_delivery=True,
    temperature=True,
    top_p=True,
    seed=False,
    max_tokens=True,
    tool_result_errors=True,
)


class AnthropicProvider(BatchDelegation, ProviderBase):
    """The Anthropic Messages API provider (``Config(provider="anthropic", model=...)``)."""

    name = PROVIDER
    CAPABILITIES = CAPABILITIES

    def __init__(
        self, config: Config, *, client: Any = None, transport: Transport | None = None
    ) -> None:
        """Keep the config; the SDK client is built on first use.

        Args:
            config: The session's configuration (``api_key``, ``model``, timeouts).
            client: An ``AsyncAnthropic``-compatible client to use instead (tests); every call
                then goes through it.
            transport: The Session's transport (None: a private one, closed with the provider).
        """
        self._config = config
        self._client: Any = client
        self._owns_client = client is None
        self._http = transport if transport is not None else Transport()
        self._owns_http = transport is None
        self._direct: DirectPost | None = None
        self._closed = False
        self._uploads = UploadRegistry(self._sdk, timeout_s=config.request_timeout_s)
        self._validated: tuple[Any, ...] | None = None
        self._implicit_caching = self.capabilities_for(config.model).implicit_caching
        self._batches = MessageBatches(
            self._sdk, self.compile, model=config.model or "", timeout_s=config.request_timeout_s
        )

    # ------------------------------------------------------------------ client

    def _sdk(self) -> Any:
        if self._closed:
            raise ConfigurationError(
                "The anthropic provider was used after it was closed",
                hint="Open a new Session (or call the module-level function again).",
            )
        if self._client is None:
            try:
                import anthropic
            except ImportError as exc:  # pragma: no cover - anthropic is a pollux dependency
                raise ConfigurationError(
                    "provider='anthropic' needs the anthropic package",
                    hint='Install it: pip install "anthropic"',
                ) from exc
            self._client = anthropic.AsyncAnthropic(
                api_key=self._config.api_key,
                max_retries=0,
                timeout=self._config.request_timeout_s,
                http_client=self._http.httpx_client("httpx2"),
            )
        return self._client

    def _poster(self) -> DirectPost | None:
        """The direct path for ``messages.create`` (None for an injected client)."""
        if not self._owns_client:
            return None
        if self._direct is None:
            client = self._sdk()
            headers = sdk_headers({**client.default_headers, **client.auth_headers})
            self._direct = DirectPost(
                self._http,
                provider=PROVIDER,
                base_url=str(client.base_url),
                headers=headers,
                timeout_s=self._config.request_timeout_s,
                status_error=stainless_status_error(client),
            )
        return self._direct

    async def warm(self) -> None:
        """Import the anthropic SDK in a thread before the first call's deadline starts."""
        if self._client is None:
            await import_off_loop("anthropic")

    async def aclose(self) -> None:
        """Delete the Session's uploads, then close the SDK client (idempotent)."""
        if self._closed:
            return
        client = self._client
        try:
            if client is not None:
                leftover = await self._uploads.aclose(client)
                if leftover:
                    _log.warning(
                        "could not delete %d uploaded Anthropic file(s): %s",
                        len(leftover),
                        ", ".join(leftover),
                    )
        finally:
            self._closed = True
            self._client = None
            self._direct = None
            # An SDK client built here sends over the transport's httpx client, which the
            # transport closes; an injected client belongs to the caller.
            if self._owns_http:
                await self._http.aclose()

    # -------------------------------------------------------------- validation

    def capabilities_for(self, model: str | None) -> Capabilities:
        """The static table, with ``Config.capabilities`` overrides applied."""
        return self.CAPABILITIES.with_overrides(self._config.capabilities)

    def validate(self, request: ProviderRequest) -> None:
        """Reject, before any I/O, what the Messages API (or this model) cannot honour."""
        requirements = request.requirements
        validate_options(
            model=request.model or self._config.model,
            reasoning_effort=requirements.reasoning_effort,
            reasoning_budget_tokens=requirements.reasoning_budget_tokens,
            max_tokens=requirements.max_tokens,
            temperature=requirements.temperature,
            top_p=requirements.top_p,
            tool_choice=requirements.tool_choice,
            has_schema=requirements.output_schema is not None,
            provider_options=requirements.provider_options_for(PROVIDER),
            has_tools=bool(request.tools),
        )
        validate_sources(request.sources.sources)
        validate_cache(request.cache)
        if request.input.continuation is not None:
            messages = (request.continuation_state or {}).get("messages")
            if not isinstance(messages, (list, tuple)) or not messages:
                raise ConfigurationError(
                    "This continuation carries no Anthropic conversation",
                    hint="Continue from the Output.continuation of an anthropic interaction.",
                )
        # Compiling is pure: run it once here so schema and tool errors surface before I/O. The
        # inputs of one fan-out share everything that can fail to compile, so once is enough.
        key = (request.requirements, request.tools, request.model, request.cache)
        if request.input.continuation is None and not request.input.history:
            if self._validated is not None and all(
                a is b for a, b in zip(self._validated, key, strict=True)
            ):
                return
            self._validated = key
        self._compile(request, source_blocks=())

    # ----------------------------------------------------------------- sources

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Inline text, upload files once per Session (Files API), link URLs.

        Nothing is listed as owned: uploads stay for the Session's later calls (reused by
        content hash) and are deleted when it closes.
        """
        blocks = await self._uploads.blocks(sources)
        return PreparedSources(sources=tuple(sources), parts=blocks)

    # ------------------------------------------------------------------ calls

    def _cache_control(self, request: ProviderRequest) -> dict[str, str] | None:
        # ``None``/``"auto"`` is provider-managed caching, which ``Config(capabilities=
        # {"implicit_caching": False})`` turns off (a gateway that rejects cache_control, or a
        # user who will not pay write premiums); an explicit CachePolicy is always honoured.
        if not isinstance(request.cache, CachePolicy) and not self._implicit_caching:
            return None
        return cache_control(request.cache)

    def _cache(self, request: ProviderRequest) -> dict[str, str] | None:
        control = self._cache_control(request)
        if control is None:
            return None
        if request.fanout > 1 and not self._prefix_cacheable(request):
            # A small prefix in a fan-out: nothing to share, and no write premium to pay.
            return None
        return control

    def _prefix_cacheable(self, request: ProviderRequest) -> bool:
        return prefix_cacheable(
            request.model or self._config.model,
            request.instructions,
            request.tools,
            request.sources.sources,
        )

    def warm_up_first(self, requests: Sequence[ProviderRequest]) -> bool:
        """Whether a fan-out should run its first call alone to write the prompt cache."""
        first = requests[0]
        return self._cache_control(first) is not None and self._prefix_cacheable(first)

    def _compile(
        self, request: ProviderRequest, *, source_blocks: Sequence[Mapping[str, Any]]
    ) -> AnthropicCall:
        requirements = request.requirements
        turn = request.input
        prior = _prior(request)
        messages = conversation(
            prior=prior,
            history=turn.history if turn.continuation is None else None,
            tool_results=turn.tool_results,
            content=turn.content,
        )
        # The last replayed assistant turn ends the stable part of the conversation.
        conversation_end = None
        if len(messages) > 1 and messages[-2]["role"] == "assistant":
            conversation_end = len(messages) - 2
        return compile_request(
            model=request.model or self._config.model or "",
            instructions=request.instructions,
            source_blocks=source_blocks,
            messages=messages,
            tools=request.tools,
            output_schema=requirements.output_schema_json(),
            temperature=requirements.temperature,
            top_p=requirements.top_p,
            max_tokens=requirements.max_tokens,
            reasoning_effort=requirements.reasoning_effort,
            reasoning_budget_tokens=requirements.reasoning_budget_tokens,
            tool_choice=requirements.tool_choice,
            provider_options=requirements.provider_options_for(PROVIDER),
            cache=self._cache(request),
            conversation_end=conversation_end,
            uses_files=any(_is_file_block(block) for block in source_blocks),
            stream=request.stream,
        )

    def compile(self, request: ProviderRequest) -> AnthropicCall:
        """The ``messages.create`` call for one interaction."""
        return self._compile(request, source_blocks=request.sources.parts)

    async def execute(self, compiled: Any) -> ProviderResponse:
        """Create one message and normalize it."""
        call: AnthropicCall = compiled
        poster = self._poster()
        try:
            if poster is not None:
                body = poster.encode(call.kwargs)
                message = await poster.post(
                    "/v1/messages", body, phase="generate", headers=call.headers()
                )
            else:
                client = self._sdk()
                message = await client.messages.create(**call.kwargs, extra_headers=call.headers())
        except Exception as exc:
            raise self._note_failure(
                wrap_anthropic_error(
                    exc, phase="generate", timeout_s=self._config.request_timeout_s
                )
            ) from exc
        return extract_response(message)

    def _note_failure(self, error: PolluxError) -> PolluxError:
        # A request naming an upload that was deleted elsewhere fails with 400/404 quoting
        # its id: stop reusing that file, so the next call uploads the content again.
        if (
            isinstance(error, APIError)
            and error.status_code in (400, 404)
            and self._uploads.forget_gone(str(error))
        ):
            error.hint = (
                "The uploaded file this request named is gone (deleted outside this Session); "
                "pollux uploads it again on the next call."
            )
        return error

    async def stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        """Create one streamed message and yield neutral chunks.

        The compiled body goes through the transport's pool and the events are mapped from
        their JSON (see :meth:`pollux.providers._direct.DirectPost.stream`); an injected client
        streams through its SDK call. Either way the stream is closed when this ends.
        """
        call: AnthropicCall = compiled
        poster = self._poster()
        if poster is None:
            async for sdk_chunk in self._sdk_stream(call):
                yield sdk_chunk
            return
        timeout_s = self._config.request_timeout_s
        mapper = MessagesStreamMapper()
        feed = mapper.feed
        body = poster.encode(call.kwargs)
        events = poster.stream("/v1/messages", body, phase="stream", headers=call.headers())
        draining = False
        try:
            while True:
                try:
                    batch = await events.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._note_failure(
                        wrap_anthropic_error(exc, phase="stream", timeout_s=timeout_s)
                    ) from exc
                if draining:
                    # Read to the end of the body (nothing follows the terminal event), so the
                    # connection goes back to the pool.
                    continue
                for event in batch:
                    # An ``error`` event raises from the mapper, as the SDK raises it.
                    chunk = feed(event)
                    if chunk is not None:
                        yield chunk
                    if mapper.done:
                        draining = True
                        break
            mapper.finish()
        finally:
            await events.aclose()

    async def _sdk_stream(self, call: AnthropicCall) -> AsyncIterator[StreamChunk]:
        client = self._sdk()
        mapper = MessagesStreamMapper()
        timeout_s = self._config.request_timeout_s
        try:
            events = await client.messages.create(**call.kwargs, extra_headers=call.headers())
        except Exception as exc:
            raise self._note_failure(
                wrap_anthropic_error(exc, phase="stream", timeout_s=timeout_s)
            ) from exc
        try:
            while True:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise wrap_anthropic_error(exc, phase="stream", timeout_s=timeout_s) from exc
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
        """The conversation so far (sources excluded), ending with the assistant's content.

        The assistant content is the wire blocks the response carried, signed thinking and
        redacted thinking included, so the next turn replays them byte for byte.
        """
        turn = request.input
        messages = conversation(
            prior=_prior(request),
            history=turn.history if turn.continuation is None else None,
            tool_results=turn.tool_results,
            content=turn.content,
        )
        content = (response.provider_state or {}).get("anthropic_content")
        if not content:
            content = [{"type": "text", "text": response.text}] if response.text else []
        if content:
            messages.append({"role": "assistant", "content": list(content)})
        return {"messages": messages}

    # ------------------------------- readiness (deferred delivery: BatchDelegation, self._batches)

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Ask the API for the model; ready when it answers."""
        return await model_readiness(
            model or self._config.model,
            lambda target: self._sdk().models.retrieve(target),
            wrap_anthropic_error,
            provider=PROVIDER,
        )


def _prior(request: ProviderRequest) -> Sequence[Mapping[str, Any]] | None:
    if request.input.continuation is None or not request.continuation_state:
        return None
    messages = request.continuation_state.get("messages")
    return messages if isinstance(messages, (list, tuple)) else None


def _is_file_block(block: Mapping[str, Any]) -> bool:
    source = block.get("source")
    return isinstance(source, Mapping) and source.get("type") == "file"
