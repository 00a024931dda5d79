"""Session: one provider's clients, limiter and caches, for as long as you need them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pollux._engine import deferred as _deferred
from pollux._engine.execute import (
    Failure,
    Runtime,
    collect_outputs,
    prepare_cache,
    run_calls,
    stream_call,
)
from pollux._engine.plan import plan_calls
from pollux._engine.prepared import KeptSourcesProvider, PreparedEnvironments
from pollux._engine.retry import Pacer, raise_stamped, with_retries
from pollux._scrub import install_log_filter
from pollux.config import Config
from pollux.errors import ConfigurationError
from pollux.interaction.call import describe_call
from pollux.interaction.environment import CachePolicy, Environment
from pollux.interaction.input import Input
from pollux.interaction.output import Output, OutputCollection
from pollux.interaction.requirements import OutputRequirements
from pollux.interaction.settings import DeferredSettings, generation_keywords
from pollux.interaction.tools import ToolDeclaration
from pollux.providers._registry import build_provider
from pollux.source import Source
from pollux.transport import Transport

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pollux.interaction.call import CallDescription
    from pollux.interaction.deferred import DeferredHandle, DeferredSnapshot
    from pollux.interaction.environment import CacheSetting
    from pollux.interaction.events import Event
    from pollux.interaction.settings import GenerationSettings
    from pollux.providers.base import Provider, ProviderReadiness

__all__ = ["Session"]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Session:
    """An async context manager that owns one provider's clients for its lifetime.

    Reuse a Session for many calls: connections stay open (keep-alive), the provider's
    concurrency limiter is shared by every call (``Config.request_concurrency`` bounds the
    calls in flight across all of them), a rate limit's ``Retry-After`` pauses every call of
    the session rather than one, and metadata such as OpenRouter's model catalog is fetched
    once. The module-level functions (:func:`pollux.run`, ...) do the same behind the
    scenes. Using a Session after it was closed raises ConfigurationError.

    Args:
        config: The provider, model and limits to use.
        transport: The HTTP transport every request goes through (proxy, CA bundle, pools;
            see :class:`pollux.transport.Transport`). By default the Session builds one from
            the environment and closes it with the Session; one you pass stays open (you
            close it), so Sessions of one event loop can share it.

    Example:
        async with Session(config) as session:
            first = await session.interact(env, Input("Hello"))
            answers = await session.run_many(["Q1?", "Q2?"], sources=[source])
    """

    def __init__(self, config: Config, *, transport: Transport | None = None) -> None:
        if not isinstance(config, Config):
            raise ConfigurationError(
                f"Session needs a Config, got {type(config).__name__}",
                hint="Pass Config(provider=..., model=...).",
            )
        if transport is not None and not isinstance(transport, Transport):
            raise ConfigurationError(
                f"transport must be a pollux.transport.Transport, got {type(transport).__name__}",
                hint="Pass Transport(proxy=..., ca_bundle=...), or leave it out.",
            )
        self.config = config
        self._transport = transport
        self._owns_transport = transport is None
        self._provider: Provider | None = None
        self._limiter: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pacer = Pacer()
        self._closed = False
        # Environments built by prepare_environment(): their sources stay prepared until close.
        self._prepared = PreparedEnvironments()

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Session:
        self._runtime()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran."""
        return self._closed

    async def aclose(self) -> None:
        """Close the provider's clients and the Session's own transport (idempotent)."""
        self._closed = True
        provider, self._provider = self._provider, None
        if provider is None:
            return
        kept = self._prepared.drain()
        if self._loop is not None and self._loop.is_closed():
            # Its connections died with the loop that opened them; nothing is left to close.
            return
        try:
            for prepared in kept:
                await provider.release_sources(prepared)
        finally:
            try:
                await provider.aclose()
            finally:
                if self._owns_transport and self._transport is not None:
                    await self._transport.aclose()

    def _runtime(self) -> Runtime:
        if self._closed:
            raise ConfigurationError(
                "Session is closed",
                hint="Open a new Session (async with Session(config) as session: ...).",
            )
        loop = _running_loop()
        if self._provider is None:
            if self._transport is None:
                self._transport = Transport()
            self._provider = build_provider(self.config, self._transport)
            install_log_filter()  # the SDK's and HTTP stack's DEBUG records quote headers
            self._limiter = asyncio.Semaphore(self.config.request_concurrency)
            self._loop = loop
        elif loop is not self._loop and loop is not None and self._loop is not None:
            # Connections, the limiter and the pacer belong to the loop that opened them.
            raise ConfigurationError(
                "This Session was opened in another event loop",
                hint="Use a Session inside the asyncio.run() (or loop) that created it: open "
                "one Session per event loop, or call the module-level functions.",
            )
        assert self._limiter is not None
        return Runtime(self._provider, self.config, self._limiter, self._pacer)

    def _runtime_for(self, environment: Environment) -> Runtime:
        # A prepared environment's calls reuse its kept sources instead of uploading again.
        rt = self._runtime()
        kept = self._prepared.lookup(environment)
        if kept is not None:
            rt = Runtime(KeptSourcesProvider(rt.provider, kept), rt.config, rt.limiter, rt.pacer)
        return rt

    # -- calls -------------------------------------------------------------------------------

    @generation_keywords(place_after={"tools": "tool_choice"})
    async def run_many(
        self,
        prompts: str | Sequence[str | None] | None = None,
        *,
        sources: Sequence[Source] = (),
        environment: Environment | None = None,
        instructions: str | None = None,
        tools: Sequence[ToolDeclaration] | None = None,
        **settings: Unpack[GenerationSettings],
    ) -> OutputCollection:
        """Run many prompts over shared sources; see :func:`pollux.run_many`.

        Takes :func:`pollux.run_many`'s arguments except ``config`` (the generation keywords
        are :class:`~pollux.interaction.GenerationSettings`). A failed prompt yields
        an Output with ``metrics.completion_status == "error"`` and the error in
        ``diagnostics.error``; the other answers are kept.
        """
        call = describe_call(
            prompts,
            environment=environment,
            sources=sources,
            instructions=instructions,
            tools=tools,
            settings=settings,
        )
        outputs = await self.run_call(call, raise_errors=False)
        return OutputCollection(outputs=tuple(outputs), prompt_indexes=tuple(range(len(outputs))))

    async def run_call(self, call: CallDescription, *, raise_errors: bool) -> list[Output]:
        """Run a :class:`pollux.interaction.CallDescription`: one Output per input, in order.

        Args:
            call: The validated call (see :func:`pollux.interaction.describe_call`).
            raise_errors: Raise the first failed call's error instead of returning it as an
                error Output.

        Returns:
            The Outputs, in input order.
        """
        self._runtime()
        rt = self._runtime_for(call.environment)
        results = await run_calls(rt, call.environment, call.inputs, call.requirements)
        if raise_errors:
            for result in results:
                if isinstance(result, Failure):
                    raise result.error
        return collect_outputs(results)

    @generation_keywords()
    async def interact(
        self,
        environment: Environment,
        input: Input,
        **settings: Unpack[GenerationSettings],
    ) -> Output:
        """Run one interaction; see :func:`pollux.interact`. Raises the call's error."""
        call = describe_call(input=input, environment=environment, settings=settings)
        self._runtime()
        rt = self._runtime_for(call.environment)
        (result,) = await run_calls(rt, call.environment, call.inputs, call.requirements)
        if isinstance(result, Failure):
            raise result.error
        return result

    @generation_keywords()
    def stream(
        self,
        environment: Environment,
        input: Input,
        **settings: Unpack[GenerationSettings],
    ) -> AsyncGenerator[Event, None]:
        """Stream one interaction as Events; see :func:`pollux.stream`.

        Returns the event iterator directly (no extra generator layer per event); arguments
        are checked now, capabilities when iteration starts. Close it (``aclose()``) when you
        stop early, or iterate it to the end.
        """
        call = describe_call(input=input, environment=environment, settings=settings)
        self._runtime()
        rt = self._runtime_for(call.environment)
        return stream_call(rt, call.environment, call.inputs[0], call.requirements)

    async def check_ready(self) -> ProviderReadiness:
        """Probe the provider; see :func:`pollux.check_ready`."""
        rt = self._runtime()
        return await rt.provider.check_ready(self.config.model)

    # -- prepared environments ---------------------------------------------------------------

    async def prepare_environment(
        self,
        *,
        sources: Sequence[Source] = (),
        instructions: str | None = None,
        tools: Sequence[ToolDeclaration] | None = None,
        cache: CacheSetting = None,
        metadata: dict[str, Any] | None = None,
    ) -> Environment:
        """Build an Environment and prepare its sources now; see :func:`pollux.prepare_environment`.

        The environment is checked against the provider first (no I/O): an unsupported source,
        tool or cache preference raises ConfigurationError here, not at the first call. Then
        its sources are prepared (uploaded where the provider uploads) once; every later call
        of this Session over the returned Environment reuses them. They are released when the
        Session closes.
        """
        rt = self._runtime()
        if isinstance(sources, Source):
            raise ConfigurationError(
                "sources must be a sequence of Source values, got one Source",
                hint="Pass sources=[source].",
            )
        env = Environment(
            instructions=instructions,
            sources=tuple(sources),
            tools=tuple(tools or ()),
            cache=cache,
            metadata=metadata,
        )
        # The same checks as a real call, with a placeholder turn: capabilities (cache,
        # uploads, tools), then the provider's own source and tool checks.
        plan = plan_calls(
            rt.provider, self.config, env, [Input(content="prepare_environment")], _NO_OUTPUT
        )
        if (
            isinstance(cache, CachePolicy)
            and rt.provider.capabilities_for(self.config.model).persistent_cache
        ):
            # The persistent cache is created (or found) now; later calls over this
            # Environment find it again by identity, in this process or another.
            await prepare_cache(rt, plan.requests[0], cache)
            return env
        if not env.sources:
            return env
        try:
            prepared = await with_retries(
                lambda: rt.provider.prepare_sources(env.sources), self.config.retry
            )
        except Exception as exc:
            raise_stamped(exc, provider=rt.provider.name, phase="upload", call_idx=None)
        self._prepared.keep(env, prepared)
        return env

    # -- deferred delivery -------------------------------------------------------------------

    @generation_keywords(DeferredSettings)
    async def defer(
        self,
        prompts: str | Sequence[str | None] | None = None,
        *,
        sources: Sequence[Source] = (),
        instructions: str | None = None,
        **settings: Unpack[DeferredSettings],
    ) -> DeferredHandle:
        """Submit prompts as one provider-side job; see :func:`pollux.defer`."""
        rt = self._runtime()
        if isinstance(prompts, (list, tuple)) and not prompts:
            raise ConfigurationError(
                "defer() requires at least one prompt",
                hint="Pass one or more prompts to submit for deferred collection.",
            )
        call = describe_call(prompts, sources=sources, instructions=instructions, settings=settings)
        return await _deferred.submit(rt, call.environment, list(call.inputs), call.requirements)

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """The job's normalized status; see :func:`pollux.inspect_deferred`."""
        return await _deferred.inspect(self._runtime(), handle)

    async def collect_deferred(
        self,
        handle: DeferredHandle,
        *,
        response_schema: type[Any] | dict[str, Any] | None = None,
    ) -> OutputCollection:
        """Collect a terminal job; see :func:`pollux.collect_deferred`."""
        return await _deferred.collect(self._runtime(), handle, response_schema)

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """Request provider-side cancellation; see :func:`pollux.cancel_deferred`."""
        await _deferred.cancel(self._runtime(), handle)


_NO_OUTPUT = OutputRequirements()
