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
from pollux.providers._delegation import model_readiness
from pollux.providers._sdk_provider import DirectRequest, SDKProvider
from pollux.providers.base import (
    Capabilities,
    PreparedSources,
    ProviderReadiness,
    ProviderRequest,
    ProviderResponse,
)

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
    from pollux.transport import Transport

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


class AnthropicProvider(SDKProvider):
    """The Anthropic Messages API provider (``Config(provider="anthropic", model=...)``).

    Lifecycle, direct path, stream drain and batch glue are :class:`SDKProvider`'s; this class
    states the Messages wire (compile, extract, stream mapping, caching), its client, its
    Session-long uploads and its errors.
    """

    name = PROVIDER
    CAPABILITIES = CAPABILITIES
    SDK_MODULES = ("anthropic",)
    BATCHES = MessageBatches

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
        super().__init__(config, client=client, transport=transport)
        self._uploads = UploadRegistry(self._sdk, timeout_s=config.request_timeout_s)
        self._validated: tuple[Any, ...] | None = None
        self._implicit_caching = self.capabilities_for(config.model).implicit_caching

    # ------------------------------------------------------------------ client

    def _build_client(self) -> Any:
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - anthropic is a pollux dependency
            raise ConfigurationError(
                "provider='anthropic' needs the anthropic package",
                hint='Install it: pip install "anthropic"',
            ) from exc
        return anthropic.AsyncAnthropic(
            api_key=self._config.api_key,
            max_retries=0,
            timeout=self._config.request_timeout_s,
            http_client=self._http.httpx_client("httpx2"),
        )

    async def _release_all(self, client: Any) -> None:
        """Delete the Session's uploads (the SDK client is closed with the transport)."""
        leftover = await self._uploads.aclose(client)
        if leftover:
            _log.warning(
                "could not delete %d uploaded Anthropic file(s): %s",
                len(leftover),
                ", ".join(leftover),
            )

    def _wrap(self, exc: BaseException, *, phase: str) -> PolluxError:
        return wrap_anthropic_error(exc, phase=phase, timeout_s=self._config.request_timeout_s)

    def _failed(self, exc: BaseException, *, phase: str, compiled: Any) -> PolluxError:
        return self._note_failure(self._wrap(exc, phase=phase))

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

    def _direct_request(self, compiled: Any, *, stream: bool) -> DirectRequest:
        call: AnthropicCall = compiled
        return "/v1/messages", call.kwargs, call.headers()

    async def _sdk_call(self, client: Any, compiled: Any) -> Any:
        call: AnthropicCall = compiled
        return await client.messages.create(**call.kwargs, extra_headers=call.headers())

    async def _sdk_open_stream(self, client: Any, compiled: Any) -> AsyncIterator[Any]:
        events: AsyncIterator[Any] = await self._sdk_call(client, compiled)
        return events

    def _stream_mapper(self) -> MessagesStreamMapper:
        # An ``error`` event raises from the mapper, as the SDK raises it.
        return MessagesStreamMapper()

    def _extract(self, data: Any) -> ProviderResponse:
        return extract_response(data)

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

    # ------------------------------------ readiness (deferred delivery: SDKProvider, BATCHES)

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
