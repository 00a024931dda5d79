"""What a provider over an official SDK with a direct path is, stated once.

The openai, anthropic and gemini providers (and azure_openai, over openai) share one shape:

* a lifecycle: the Session's :class:`~pollux.transport.Transport` (or a private one, closed with
  the provider), one SDK client built on first use over that transport (or an injected one,
  which is the caller's), the :class:`~pollux.providers._direct.DirectPost` for the hot calls
  built from the SDK client on first use, and closing (the provider's own clean-up first);
* a direct path for generate and stream: the compiled body goes through the transport's pool as
  JSON, an injected client (tests) goes through its SDK call instead, and every failure is
  mapped to a pollux error by the provider's mapping;
* the stream drain: batches of decoded events fed to the provider's stream mapper until its
  terminal event, the rest of the body read so the connection goes back to the pool, and the
  stream closed however the caller leaves;
* deferred delivery forwarded to the provider's batch backend (:class:`BatchDelegation`).

:class:`SDKProvider` holds all of that; a provider states only what differs, as hooks:

============================  ======================================================================
hook                          what the provider says
============================  ======================================================================
``SDK_MODULES``               the SDK modules ``warm`` imports off the event loop
``BATCHES``                   its batch backend class (or override ``_batch_backend``)
``_build_client``             its SDK client (auth, endpoint, retries off, the transport's httpx)
``_direct_target``            the direct path's base URL and default headers (default: a
                              Stainless client's ``base_url`` and auth headers)
``_status_error``             builds the SDK's exception for an error status (default: Stainless)
``_direct_enabled``           whether the direct path is on (default: the client is ours)
``_request_auth``             per-request auth headers (a refreshed token), or None
``_direct_request``           (path, JSON body, headers) of one compiled call
``_sdk_call``                 the same call through an injected client's SDK
``_sdk_open_stream``          the same stream through an injected client's SDK
``_stream_mapper``            a fresh stream mapper (``feed``, ``done``, ``finish``)
``_direct_feed``              the per-event feed (default ``mapper.feed``; a wrapper can raise
                              in-band error events)
``_extract``                  response JSON (or SDK object) -> :class:`ProviderResponse`
``_wrap``                     an SDK or direct-path failure -> the provider's pollux error
``_failed``                   the same for a request that failed, where the provider also
                              forgets what the request named (default ``_wrap``)
``_release_all``              clean-up before closing (the Session's uploads)
============================  ======================================================================
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pollux.errors import ConfigurationError, PolluxError
from pollux.providers._delegation import BatchDelegation
from pollux.providers._direct import DirectPost, sdk_headers, stainless_status_error
from pollux.providers._warm import import_off_loop
from pollux.providers.base import ProviderBase, ProviderResponse, StreamChunk
from pollux.transport import Transport

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.providers._deferred import DeferredBackend
    from pollux.providers.base import ProviderRequest

__all__ = ["BatchFactory", "DirectRequest", "SDKProvider", "StreamMapper", "TransportOwner"]

#: ``(path, JSON body, headers or None)`` of one call on the direct path.
DirectRequest = tuple[str, Any, Mapping[str, str] | None]


class StreamMapper(Protocol):
    """What the stream drain needs of a provider's stream mapper."""

    #: True once the terminal event was fed (nothing after it matters).
    done: bool

    def feed(self, event: Any) -> StreamChunk | None:
        """The neutral chunk for one event (None when it carries nothing to emit)."""
        ...

    def finish(self) -> StreamChunk | None:
        """Check the stream ended properly; the terminal chunk, if the mapper holds one back."""
        ...


class BatchFactory(Protocol):
    """A batch backend's constructor, as the SDK providers' backends share it."""

    def __call__(
        self,
        client: Callable[[], Any],
        compile_request: Callable[[ProviderRequest], Any],
        /,
        *,
        model: str,
        timeout_s: float,
    ) -> DeferredBackend:
        """Build the backend over the provider's lazily built client and its compile."""
        ...


class TransportOwner(ProviderBase):
    """The part every HTTP provider shares: its config and the transport it sends over.

    Args:
        config: The session's configuration.
        transport: The Session's transport (None: a private one, closed with the provider).
    """

    def __init__(self, config: Config, *, transport: Transport | None = None) -> None:
        self._config = config
        self._http = transport if transport is not None else Transport()
        self._owns_http = transport is None
        self._closed = False

    def _closed_error(self) -> ConfigurationError:
        return ConfigurationError(
            f"The {self.name} provider was used after it was closed",
            hint="Open a new Session (or call the module-level function again).",
        )

    async def aclose(self) -> None:
        """Close a private transport (a Session closes its own); idempotent."""
        self._closed = True
        if self._owns_http:
            await self._http.aclose()


class SDKProvider(BatchDelegation, TransportOwner):
    """A provider over an official SDK whose hot calls take the direct path (see the module).

    Args:
        config: The session's configuration (``api_key``, ``model``, timeouts).
        client: An SDK client to use instead (tests); every call then goes through it and the
            caller closes it.
        transport: The Session's transport (None: a private one, closed with the provider).
    """

    #: The SDK modules :meth:`warm` imports in a thread.
    SDK_MODULES: ClassVar[tuple[str, ...]] = ()
    #: The batch backend class (``deferred`` module), built over ``_sdk`` and ``compile``.
    BATCHES: ClassVar[BatchFactory | None] = None

    def __init__(
        self, config: Config, *, client: Any = None, transport: Transport | None = None
    ) -> None:
        super().__init__(config, transport=transport)
        self._client: Any = client
        self._owns_client = client is None
        self._direct: DirectPost | None = None
        #: Per-request auth headers (a refreshed token), or None when the defaults carry them.
        self._request_auth: Callable[[], Awaitable[Mapping[str, str]]] | None = None
        self._batches = self._batch_backend()

    # ------------------------------------------------------------------ client

    def _batch_backend(self) -> DeferredBackend:
        factory = type(self).BATCHES
        if factory is None:  # pragma: no cover - every SDK provider names its backend
            raise NotImplementedError(f"{type(self).__name__} names no batch backend")
        config = self._config
        return factory(
            self._sdk, self.compile, model=config.model or "", timeout_s=config.request_timeout_s
        )

    def _sdk(self) -> Any:
        """The SDK client (built on first use); refused after closing."""
        if self._closed:
            raise self._closed_error()
        if self._client is None:
            self._client = self._build_client()
        return self._client

    def _build_client(self) -> Any:
        """The SDK client this provider owns, over ``self._http``."""
        raise NotImplementedError

    def _direct_target(self, client: Any) -> tuple[str, dict[str, str]]:
        """Base URL and default headers of the direct path, read from the SDK client."""
        return str(client.base_url), sdk_headers({**client.default_headers, **client.auth_headers})

    def _status_error(
        self, client: Any
    ) -> Callable[[int, Mapping[str, str], bytes, str], BaseException]:
        """Builds the SDK's exception for an error answer on the direct path."""
        return stainless_status_error(client)

    def _direct_enabled(self) -> bool:
        return self._owns_client

    def _poster(self) -> DirectPost | None:
        """The direct path for the hot calls (None for an injected client)."""
        if not self._direct_enabled():
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
                status_error=self._status_error(client),
            )
        return self._direct

    async def warm(self) -> None:
        """Import the SDK in a thread before the first call's deadline starts."""
        if self._client is None:
            await import_off_loop(*self.SDK_MODULES)

    async def _release_all(self, client: Any) -> None:
        """Clean up what this provider left at the provider (its uploads); never raises."""

    async def aclose(self) -> None:
        """Release what the provider holds, then drop the SDK client (idempotent).

        A client built here sends over the transport's httpx client, which the transport closes;
        an injected client belongs to the caller.
        """
        if self._closed:
            return
        client = self._client
        try:
            if client is not None:
                await self._release_all(client)
        finally:
            self._client = None
            self._direct = None
            await super().aclose()

    # ----------------------------------------------------------------- errors

    def _wrap(self, exc: BaseException, *, phase: str) -> PolluxError:
        """The pollux error for an SDK or direct-path failure."""
        raise NotImplementedError

    def _failed(self, exc: BaseException, *, phase: str, compiled: Any) -> PolluxError:
        """The pollux error for a failed request (a provider may forget what it named)."""
        return self._wrap(exc, phase=phase)

    # ------------------------------------------------------------------ calls

    def compile(self, request: ProviderRequest) -> Any:
        """The provider's compiled call for one interaction (its wire JSON)."""
        raise NotImplementedError

    def _direct_request(self, compiled: Any, *, stream: bool) -> DirectRequest:
        raise NotImplementedError

    async def _sdk_call(self, client: Any, compiled: Any) -> Any:
        raise NotImplementedError

    async def _sdk_open_stream(self, client: Any, compiled: Any) -> AsyncIterator[Any]:
        raise NotImplementedError

    def _stream_mapper(self) -> StreamMapper:
        raise NotImplementedError

    def _direct_feed(self, mapper: StreamMapper) -> Callable[[Any], StreamChunk | None]:
        return mapper.feed

    def _extract(self, data: Any) -> ProviderResponse:
        raise NotImplementedError

    async def _headers(self, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
        auth = self._request_auth
        if auth is None:
            return headers
        fresh = await auth()
        return fresh if headers is None else {**headers, **fresh}

    async def execute(self, compiled: Any) -> ProviderResponse:
        """Make one call and normalize the answer.

        The compiled body is the wire JSON already: it goes through the transport's pool as it
        is (see :mod:`pollux.providers._direct`), or through an injected client's SDK call.
        """
        poster = self._poster()
        try:
            if poster is not None:
                path, payload, headers = self._direct_request(compiled, stream=False)
                body = poster.encode(payload)
                if self._request_auth is not None:
                    headers = await self._headers(headers)
                data = await poster.post(path, body, phase="generate", headers=headers)
            else:
                data = await self._sdk_call(self._sdk(), compiled)
        except Exception as exc:
            raise self._failed(exc, phase="generate", compiled=compiled) from exc
        return self._extract(data)

    async def stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        """Make one streamed call and yield neutral chunks.

        The compiled body goes through the transport's pool and the events are mapped from
        their JSON (see :meth:`pollux.providers._direct.DirectPost.stream`); an injected client
        streams through its SDK call. Either way the stream is closed when this ends.
        """
        poster = self._poster()
        if poster is None:
            async for sdk_chunk in self._sdk_stream(compiled):
                yield sdk_chunk
            return
        mapper = self._stream_mapper()
        feed = self._direct_feed(mapper)
        path, payload, headers = self._direct_request(compiled, stream=True)
        body = poster.encode(payload)
        if self._request_auth is not None:
            try:
                headers = await self._headers(headers)
            except Exception as exc:
                raise self._wrap(exc, phase="stream") from exc
        events = poster.stream(path, body, phase="stream", headers=headers)
        draining = False
        try:
            while True:
                try:
                    batch = await events.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._failed(exc, phase="stream", compiled=compiled) from exc
                if draining:
                    # Read to the end of the body (nothing follows the terminal event), so the
                    # connection goes back to the pool.
                    continue
                for event in batch:
                    chunk = feed(event)
                    if chunk is not None:
                        yield chunk
                    if mapper.done:
                        draining = True
                        break
            last = mapper.finish()
            if last is not None:
                yield last
        finally:
            await events.aclose()

    async def _sdk_stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        client = self._sdk()
        mapper = self._stream_mapper()
        try:
            events = await self._sdk_open_stream(client, compiled)
        except Exception as exc:
            raise self._failed(exc, phase="stream", compiled=compiled) from exc
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
            last = mapper.finish()
            if last is not None:
                yield last
        finally:
            # An SDK stream (Stainless) has ``close``; an async generator (google-genai) ``aclose``.
            close = getattr(events, "close", None) or getattr(events, "aclose", None)
            if close is not None:
                await close()
