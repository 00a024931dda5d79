"""The shared Chat Completions provider: compile, execute, stream and errors over our transport.

Local servers and OpenRouter subclass :class:`ChatCompletionsProvider` and add their own
validation, capability table and pre-flight. Requests go through the Session's
:class:`pollux.transport.Transport` (pollux's keep-alive pool for the base URL's origin, with the
transport's proxy and TLS settings); a provider built without one owns a private transport and
closes it in :meth:`aclose`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pollux._transport import ConnectionPool, SSEDecoder, TransportError
from pollux.errors import APIError, ConfigurationError, ToolCallParseError
from pollux.providers._errors import api_error, body_message, network_error, redirect_error
from pollux.providers._sdk_provider import TransportOwner
from pollux.providers.base import (
    Capabilities,
    PreparedSources,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
)
from pollux.providers.openai_compat.compile import (
    audio_format,
    build_payload,
    check_provider_options,
    encode,
    is_text_like,
    pollux_keys,
    prior_messages,
    shared_sources,
    source_part,
    turn_messages,
)
from pollux.providers.openai_compat.extract import chunk_from, response_from
from pollux.transport import Transport

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.source import Source

__all__ = ["ChatCompletionsProvider", "CompiledChat"]

# Encoded source sets kept per provider instance (per Session); small, since each may be large.
_PREPARED_MAX = 8
# File sources larger than this (in total) are read and encoded in a worker thread.
_OFF_LOOP_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class CompiledChat:
    """A compiled request: the encoded body plus whether it streams."""

    body: bytes
    stream: bool


class ChatCompletionsProvider(TransportOwner):
    """Chat Completions over an OpenAI-compatible HTTP API.

    Subclasses set ``name``, ``CAPABILITIES``, ``ALLOW_PDF`` and ``ALLOW_AUDIO`` and may override
    :meth:`validate`, :meth:`preflight` and :meth:`extra_payload`.
    """

    CAPABILITIES: ClassVar[Capabilities] = Capabilities()
    ALLOW_PDF: ClassVar[bool] = False
    ALLOW_AUDIO: ClassVar[bool] = True

    def __init__(
        self,
        config: Config,
        *,
        base_url: str,
        headers: Mapping[str, str],
        transport: Transport | None = None,
    ) -> None:
        super().__init__(config, transport=transport)
        self.config = config
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers)
        self._timeout_s = float(config.request_timeout_s)
        self._pool: ConnectionPool | None = None
        self._prepared: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.prepared_hits = 0

    # -- plumbing ----------------------------------------------------------------------------

    @property
    def pool(self) -> ConnectionPool:
        """The keep-alive connection pool (created on first use)."""
        if self._pool is None:
            if self._closed:
                raise ConfigurationError(
                    f"{self.name} provider used after close",
                    hint="Open a new Session (or call the module-level function) instead.",
                )
            self._pool = self._http.pool(self.base_url, self._headers)
        return self._pool

    async def aclose(self) -> None:
        """Close the private transport's connections (a Session closes its own transport)."""
        self._pool = None
        await super().aclose()

    def capabilities_for(self, model: str | None) -> Capabilities:
        """The static table with ``Config.capabilities`` overrides applied."""
        return self.CAPABILITIES.with_overrides(self.config.capabilities)

    # -- validation --------------------------------------------------------------------------

    def validate(self, request: ProviderRequest) -> None:
        """Reject sources and provider_options the Chat Completions path cannot take (no I/O)."""
        for source in request.sources.sources:
            self._check_source(source)
        options = request.requirements.provider_options_for(self.name)
        if options:
            keys = pollux_keys(request, self.extra_payload(request))
            check_provider_options(options, keys, self.name)

    def _check_source(self, source: Source) -> None:
        mime = source.mime_type
        remote = source._remote_uri
        if remote is not None:
            supported = mime.startswith("image/") or (self.ALLOW_PDF and mime == "application/pdf")
            if supported and remote.startswith(("http://", "https://")):
                return
            raise ConfigurationError(
                f"{self.name} cannot read the remote source {remote} ({mime})",
                hint="Remote image URLs are supported"
                + (" (and PDF URLs)" if self.ALLOW_PDF else "")
                + "; download other content and pass Source.from_file(...).",
            )
        if is_text_like(mime) or mime.startswith("image/"):
            return
        if self.ALLOW_PDF and mime == "application/pdf":
            return
        if self.ALLOW_AUDIO and audio_format(mime) is not None:
            return
        kinds = "text, images" + (", audio" if self.ALLOW_AUDIO else "")
        kinds += ", PDF" if self.ALLOW_PDF else ""
        raise ConfigurationError(
            f"{self.name} cannot send {source.identifier!r} ({mime})",
            hint=f"Supported here: {kinds}. Convert the file, or use a provider with "
            "native file support (openai, gemini, anthropic).",
        )

    # -- sources -----------------------------------------------------------------------------

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Encode the sources once per call (text inline, media as data URLs).

        The encoding is also kept for the provider's lifetime (one Session), keyed by the
        sources and, for files, their size and modification time: the turns of a tool loop
        or repeated ``run_many`` calls over the same document do not re-read and re-encode it.
        """
        key = _sources_key(sources)
        parts = self._prepared.get(key) if key is not None else None
        if parts is None:
            if sum(s.size_bytes for s in sources if s._path is not None) > _OFF_LOOP_BYTES:
                # Reading and base64-encoding large files would stall every other call of the
                # event loop: do it in a worker thread.
                parts = await asyncio.to_thread(self._encode, sources)
            else:
                parts = self._encode(sources)
            if key is not None:
                self._prepared[key] = parts
                while len(self._prepared) > _PREPARED_MAX:
                    self._prepared.pop(next(iter(self._prepared)))
        else:
            self.prepared_hits += 1
        return PreparedSources(sources=tuple(sources), parts=parts)

    def _encode(self, sources: Sequence[Source]) -> tuple[Any, ...]:
        return shared_sources([source_part(s, allow_pdf=self.ALLOW_PDF) for s in sources])

    # -- compile / execute -------------------------------------------------------------------

    def extra_payload(self, request: ProviderRequest) -> dict[str, Any] | None:
        """Provider-specific payload keys (for example OpenRouter's ``reasoning``)."""
        return None

    def compile(self, request: ProviderRequest) -> CompiledChat:
        """Encode the request body once; retries resend the same bytes."""
        payload = build_payload(request, provider=self.name, extra=self.extra_payload(request))
        return CompiledChat(body=encode(payload, request.sources.parts), stream=request.stream)

    async def execute(self, compiled: CompiledChat) -> ProviderResponse:
        """POST ``/chat/completions`` and extract the response."""
        try:
            response = await self.pool.request(
                "POST", "/chat/completions", body=compiled.body, timeout_s=self._timeout_s
            )
        except TransportError as exc:
            raise self._network_error(exc, "generate") from exc
        if response.status >= 300:
            if response.status < 400:
                raise redirect_error(
                    provider=self.name,
                    phase="generate",
                    status=response.status,
                    location=response.headers.get("location"),
                )
            raise self._status_error(response.status, response.body, response.headers, "generate")
        try:
            data = json.loads(response.body)
        except ValueError as exc:
            # As on the SDK wires: a cut or garbled body (often a proxy) is retried; a server
            # that is not OpenAI-compatible fails every attempt with the same message.
            raise APIError(
                f"{self.name} generate failed: the response could not be decoded (a "
                f"{response.status} whose body is not JSON)",
                hint="The body was cut or garbled on the way (often a proxy); retrying usually "
                "helps. If it persists, check that base_url points at an OpenAI-compatible /v1 "
                "endpoint.",
                provider=self.name,
                phase="generate",
                status_code=response.status,
                retryable=True,
                error_category="malformed_response",
            ) from exc
        if isinstance(data, Mapping) and "error" in data and "choices" not in data:
            status = _embedded_status(data, response.status)
            raise self._status_error(status, data, response.headers, "generate")
        return response_from(data)

    async def stream(self, compiled: CompiledChat) -> AsyncIterator[StreamChunk]:
        """POST with ``stream: true`` and map each SSE event to a neutral chunk."""
        try:
            async with self.pool.stream(
                "POST", "/chat/completions", body=compiled.body, timeout_s=self._timeout_s
            ) as response:
                if 300 <= response.status < 400:
                    raise redirect_error(
                        provider=self.name,
                        phase="stream",
                        status=response.status,
                        location=response.headers.get("location"),
                    )
                if response.status >= 400:
                    body = await response.read()
                    raise self._status_error(response.status, body, response.headers, "stream")
                finished = False
                decoder = SSEDecoder()
                async for block in response.iter_bytes():
                    for data in decoder.feed(block):
                        if data == b"[DONE]":
                            finished = True
                            continue
                        if not data.strip():
                            continue  # an empty keep-alive event carries nothing
                        try:
                            event = json.loads(data.decode("utf-8"))
                        except ValueError as exc:
                            # Skipping it would drop part of the answer and still report a
                            # clean finish; the SDKs and the other providers raise here too.
                            raise APIError(
                                f"{self.name} stream failed: the response could not be decoded "
                                f"({exc})",
                                hint="The body was cut or garbled on the way (often a proxy); "
                                "retrying usually helps.",
                                provider=self.name,
                                phase="stream",
                                retryable=True,
                                error_category="malformed_response",
                            ) from exc
                        if not isinstance(event, dict):
                            continue
                        if "error" in event and not event.get("choices"):
                            status = _embedded_status(event, None)
                            raise self._status_error(status, event, None, "stream")
                        chunk = chunk_from(event)
                        if chunk.finish_reason is not None:
                            finished = True
                        yield chunk
                if not finished:
                    raise APIError(
                        f"{self.name} stream ended before the response was complete",
                        hint="The server closed the stream early; check its logs, or retry.",
                        provider=self.name,
                        phase="stream",
                        retryable=True,
                        error_category="network",
                    )
        except TransportError as exc:
            raise self._network_error(exc, "stream") from exc

    def continuation_state(
        self, request: ProviderRequest, response: ProviderResponse
    ) -> dict[str, Any]:
        """The transcript after this turn, without system message or sources."""
        assistant: dict[str, Any] = {"role": "assistant", "content": response.text or None}
        if response.tool_calls:
            assistant["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text},
                }
                for call in response.tool_calls
            ]
        if response.provider_state and "reasoning_details" in response.provider_state:
            assistant["reasoning_details"] = response.provider_state["reasoning_details"]
        if assistant["content"] is None and not response.tool_calls:
            assistant["content"] = ""
        messages = [*prior_messages(request), *turn_messages(request), assistant]
        return {"messages": messages}

    # -- errors ------------------------------------------------------------------------------

    def _network_error(self, exc: TransportError, phase: str) -> APIError:
        return network_error(
            provider=self.name,
            phase=phase,
            kind=exc.kind,
            message=str(exc),
            base_url=self.base_url,
            timeout_s=self._timeout_s,
        )

    def _status_error(
        self, status: int | None, body: Any, headers: Mapping[str, str] | None, phase: str
    ) -> Exception:
        message = body_message(body)
        low = message.lower()
        # llama.cpp and vLLM report a model's malformed tool-call JSON as a 400/500 (or an SSE
        # error) such as "Failed to parse tool call arguments as JSON".
        tool_call = "tool call" in low or "tool_call" in low or "function call" in low
        if tool_call and "pars" in low and status in (None, 400, 500):
            return ToolCallParseError(
                f"{self.name} could not parse the model's tool-call arguments: {message}",
                hint="The model produced malformed tool JSON; retry, simplify the tool "
                "schema, or use a model better at tool calling.",
            )
        return api_error(
            provider=self.name, phase=phase, status_code=status, message=message, headers=headers
        )


def _embedded_status(body: Mapping[str, Any], default: int | None) -> int | None:
    # OpenRouter (and some proxies) report upstream failures inside a 200 body or an SSE event
    # as {"error": {"code": 429, ...}}; the code is the status that decides retries.
    error = body.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        return code
    return default


def _sources_key(sources: Sequence[Source]) -> tuple[Any, ...] | None:
    # Sources compare by content (in-memory) or path (files); a file's size and mtime make an
    # edited file a different key. None (no caching) when a file cannot be stat'ed: encoding it
    # will raise the proper SourceError.
    key: list[Any] = []
    for source in sources:
        path = source._path
        if path is None:
            key.append((source, None))
            continue
        try:
            stat = path.stat()
        except OSError:
            return None
        key.append((source, (stat.st_size, stat.st_mtime_ns)))
    return tuple(key)
