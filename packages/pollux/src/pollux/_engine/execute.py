"""The engine's two paths: a bounded fan-out of calls, and one streamed call.

Both follow the same order: plan (validate, no I/O) -> provider pre-flight -> prepare the shared
sources once -> compile -> execute under the retry loop and the provider's limiter -> assemble
-> release what was prepared (always, in ``finally``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pollux._engine.assemble import StreamAccumulator, assemble
from pollux._engine.cache_miss import PREFIXES, prefix_parts
from pollux._engine.plan import plan_calls
from pollux._engine.quota import QuotaGate
from pollux._engine.retry import Pacer, raise_stamped, with_retries
from pollux._engine.schedule import run_bounded
from pollux._telemetry import start_call_span
from pollux.errors import APIError, ConfigurationError, InternalError, ToolCallParseError
from pollux.interaction.environment import CachePolicy
from pollux.interaction.events import Event
from pollux.interaction.intercept import ProviderCall, active_interceptors
from pollux.interaction.output import Diagnostics, Output, error_output
from pollux.providers.base import PreparedSources

if TYPE_CHECKING:
    from pollux._engine.plan import Plan
    from pollux.config import Config
    from pollux.interaction.environment import Environment
    from pollux.interaction.input import Input
    from pollux.interaction.intercept import CallInterceptor
    from pollux.interaction.requirements import OutputRequirements
    from pollux.providers.base import Provider, ProviderRequest, StreamChunk

__all__ = [
    "Failure",
    "Runtime",
    "close_async_iterator",
    "collect_outputs",
    "prepare_cache",
    "run_calls",
    "stream_call",
]


@dataclass(slots=True)
class Runtime:
    """What a Session lends the engine: the provider, its config, its limiter and pacer."""

    provider: Provider
    config: Config
    limiter: asyncio.Semaphore
    pacer: Pacer = field(default_factory=Pacer)


async def close_async_iterator(iterator: object) -> None:
    """Close an async iterator if it can be closed (async generators, streams)."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


@dataclass(frozen=True, slots=True)
class Failure:
    """A call that failed after its retries: the error, and how long the call ran."""

    error: Exception
    duration_s: float


async def _preflight(rt: Runtime, request: ProviderRequest) -> None:
    # The SDK a first call needs is imported before RetryPolicy.max_elapsed_s starts, in a
    # thread: imported inside the attempt, it blocked the loop and spent the deadline.
    warm = getattr(rt.provider, "warm", None)
    if warm is not None:
        await warm()
    # Metadata reads (the OpenRouter catalog) have no side effect, so they retry like calls.
    try:
        await with_retries(
            lambda: rt.provider.preflight(request),
            rt.config.retry,
            deadline_for=f"{rt.provider.name} metadata",
        )
    except Exception as exc:
        raise_stamped(exc, provider=rt.provider.name, phase="metadata", call_idx=None)


async def _prepare(
    rt: Runtime, environment: Environment, requests: Sequence[ProviderRequest]
) -> PreparedSources:
    if not any(rt.provider.needs_sources(request) for request in requests):
        # Every call continues provider-side state that already holds the sources: no upload.
        return PreparedSources(sources=tuple(environment.sources))
    policy = environment.cache
    if isinstance(policy, CachePolicy) and requests and _persistent(rt, requests[0]):
        return await prepare_cache(rt, requests[0], policy)
    # Uploads are side effects: retried only when the provider flags the failure as retryable
    # (the default rule of the retry loop), never on bare exceptions.
    try:
        return await with_retries(
            lambda: rt.provider.prepare_sources(environment.sources), rt.config.retry
        )
    except Exception as exc:
        raise_stamped(exc, provider=rt.provider.name, phase="upload", call_idx=None)


def _persistent(rt: Runtime, request: ProviderRequest) -> bool:
    # A CachePolicy means a persistent cache only where the provider keeps one (Gemini); on a
    # provider with managed prompt caching (Anthropic) it only picks the TTL, and the sources
    # are prepared as usual.
    return rt.provider.capabilities_for(request.model).persistent_cache


async def prepare_cache(
    rt: Runtime, request: ProviderRequest, policy: CachePolicy
) -> PreparedSources:
    """Find or create the persistent cache holding ``request``'s environment (phase ``cache``).

    Creating a cache is a side effect: retried only when the provider flags the failure as
    retryable, like uploads.
    """
    try:
        return await with_retries(
            lambda: rt.provider.prepare_cache(request, policy), rt.config.retry
        )
    except Exception as exc:
        raise_stamped(exc, provider=rt.provider.name, phase="cache", call_idx=None)


async def run_calls(
    rt: Runtime,
    environment: Environment,
    inputs: Sequence[Input],
    requirements: OutputRequirements,
) -> list[Output | Failure]:
    """Run every input; return an Output or a Failure (attributed error) per input, in order.

    Configuration errors are raised before any I/O. API failures of single calls come back in
    their slot, so the caller can keep the other answers.
    """
    provider = rt.provider
    config = rt.config
    plan = plan_calls(provider, config, environment, inputs, requirements)
    if not plan.requests:
        return []
    interceptors = active_interceptors()
    if interceptors:
        return await _run_intercepted(rt, environment, inputs, plan, interceptors)
    await _preflight(rt, plan.requests[0])
    prepared = await _prepare(rt, environment, plan.requests)
    try:
        continuable = len(plan.requests) == 1 and plan.capabilities.conversation

        async def call(index: int) -> Output | Failure:
            start = time.perf_counter()
            try:
                # Each request gets its prepared sources as its call starts, not all before the
                # first one: 10,000 copies up front would delay the whole fan-out's first send.
                request = replace(plan.requests[index], sources=prepared)
                return await _call_one(rt, request, index, continuable)
            except Exception as exc:
                return Failure(exc, time.perf_counter() - start)

        results = await _fan_out(rt, plan.requests, call)
        return [Failure(r, 0.0) if isinstance(r, Exception) else r for r in results]
    finally:
        await provider.release_sources(prepared)


async def _run_intercepted(
    rt: Runtime,
    environment: Environment,
    inputs: Sequence[Input],
    plan: Plan,
    interceptors: tuple[CallInterceptor, ...],
) -> list[Output | Failure]:
    # The seam: each planned call goes through the interceptors. Pre-flight and source
    # preparation happen once, when the first call proceeds, so a call whose every request is
    # served (a replay) reads and uploads nothing.
    provider = rt.provider
    config = rt.config
    count = len(plan.requests)
    continuable = count == 1 and plan.capabilities.conversation
    ready = asyncio.Lock()
    prepared: list[PreparedSources] = []

    async def sources() -> PreparedSources:
        async with ready:
            if not prepared:
                await _preflight(rt, plan.requests[0])
                prepared.append(await _prepare(rt, environment, plan.requests))
            return prepared[0]

    def through(index: int, depth: int) -> Callable[[], Awaitable[Output]]:
        async def proceed() -> Output:
            if depth < len(interceptors):
                output = await interceptors[depth].call(described[index], through(index, depth + 1))
                if not isinstance(output, Output):
                    raise InternalError(
                        f"interceptor {type(interceptors[depth]).__name__} returned "
                        f"{type(output).__name__}, not an Output",
                        hint="An interceptor returns await proceed() or an Output it serves.",
                    )
                return output
            request = replace(plan.requests[index], sources=await sources())
            return await _call_one(rt, request, index, continuable)

        return proceed

    described = [
        ProviderCall(
            provider=provider.name,
            model=request.model,
            use_mock=config.use_mock,
            environment=environment,
            input=turn,
            requirements=request.requirements,
            index=index,
            count=count,
        )
        for index, (turn, request) in enumerate(zip(inputs, plan.requests, strict=True))
    ]

    async def call(index: int) -> Output | Failure:
        start = time.perf_counter()
        try:
            return await through(index, 0)()
        except Exception as exc:
            return Failure(exc, time.perf_counter() - start)

    try:
        results = await _fan_out(rt, plan.requests, call)
        return [Failure(r, 0.0) if isinstance(r, Exception) else r for r in results]
    finally:
        if prepared:
            await provider.release_sources(prepared[0])


async def _fan_out(
    rt: Runtime,
    requests: Sequence[ProviderRequest],
    call: Callable[[int], Awaitable[Output | Failure]],
) -> list[Output | Failure | Exception]:
    warm_up_first = getattr(rt.provider, "warm_up_first", None)
    concurrency = rt.config.request_concurrency
    if len(requests) > 1 and warm_up_first is not None and warm_up_first(requests):
        # The first call writes the provider's prompt cache; the rest then read it.
        first = await call(0)
        rest = await run_bounded(len(requests) - 1, lambda i: call(i + 1), concurrency=concurrency)
        return [first, *rest]
    return list(await run_bounded(len(requests), call, concurrency=concurrency))


async def _call_one(rt: Runtime, request: ProviderRequest, index: int, continuable: bool) -> Output:
    span = start_call_span(rt.provider.name, request)
    try:
        output = explain_miss(
            rt.provider.name, request, await _call_provider(rt, request, index, continuable)
        )
    except BaseException as exc:
        span.fail(exc)
        raise
    span.succeed(output)
    return output


def explain_miss(provider: str, request: ProviderRequest, output: Output) -> Output:
    """``output`` with ``diagnostics.raw["cache_miss"]`` when a cache hit was expected.

    See :mod:`pollux._engine.cache_miss`.
    """
    policy = request.cache
    ttl = policy.ttl_seconds if isinstance(policy, CachePolicy) else None
    miss = PREFIXES.observe(provider, lambda: prefix_parts(provider, request), output.usage, ttl)
    if miss is None:
        return output
    raw = {**output.diagnostics.raw, "cache_miss": miss}
    return replace(output, diagnostics=Diagnostics(raw=raw))


async def _call_provider(
    rt: Runtime, request: ProviderRequest, index: int, continuable: bool
) -> Output:
    provider = rt.provider
    async with rt.limiter:
        start = time.perf_counter()
        compiled = provider.compile(request)
        attempts = 0

        pacer = rt.pacer
        gate = QuotaGate.for_call(rt.config, request)

        async def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            await pacer.wait(rt.config.retry.max_elapsed_s)
            if gate is not None:
                await gate.admit()
            try:
                response = await provider.execute(compiled)
            except BaseException as exc:
                if isinstance(exc, Exception):
                    pacer.note(exc)
                if gate is not None:
                    await gate.failed(exc)
                raise
            if gate is not None:
                await gate.settle(response.usage)
            return response

        try:
            response = await with_retries(
                attempt, rt.config.retry, deadline_for=f"{provider.name} generate"
            )
        except Exception as exc:
            raise_stamped(exc, provider=provider.name, phase="generate", call_idx=index)
        output = assemble(
            provider,
            request,
            response,
            model=rt.config.model,
            pricing_model=rt.config.pricing_model,
            duration_s=time.perf_counter() - start,
            attempts=attempts,
            continuable=continuable,
        )
        if gate is not None:
            output.diagnostics.raw["quota"] = gate.diagnostic()
        return output


def collect_outputs(results: Sequence[Output | Failure]) -> list[Output]:
    """Partial results: failures of single calls become error Outputs; anything else raises.

    A provider failure (APIError) or a model's malformed tool-call JSON (ToolCallParseError)
    belongs to one prompt; a bug (InternalError) or a configuration mistake belongs to all.
    """
    for result in results:
        if isinstance(result, Failure) and not isinstance(
            result.error, (APIError, ToolCallParseError)
        ):
            raise result.error
    return [
        error_output(result.error, duration_s=result.duration_s)
        if isinstance(result, Failure)
        else result
        for result in results
    ]


async def _open_stream(
    provider: Provider,
    compiled: Any,
    pacer: Pacer,
    max_pause_s: float | None,
    gate: QuotaGate | None = None,
) -> tuple[AsyncIterator[StreamChunk], StreamChunk | None]:
    # Pull the first chunk inside the retry loop: a stream that fails before producing anything
    # (429, 503, connection refused) is retried like any call; once a chunk is out, it is not.
    await pacer.wait(max_pause_s)
    if gate is not None:
        await gate.admit()
    iterator = provider.stream(compiled)
    try:
        first = await iterator.__anext__()
    except StopAsyncIteration:
        await close_async_iterator(iterator)
        return iterator, None
    except BaseException as exc:
        if isinstance(exc, Exception):
            pacer.note(exc)
        if gate is not None:
            await gate.failed(exc)
        await close_async_iterator(iterator)
        raise
    return iterator, first


def _events(chunk: StreamChunk) -> list[Event]:
    events: list[Event] = []
    if chunk.reasoning:
        events.append(Event(type="reasoning_delta", text=chunk.reasoning))
    if chunk.text:
        events.append(Event(type="text_delta", text=chunk.text))
    events.extend(Event(type="tool_call_delta", delta=delta) for delta in chunk.tool_call_deltas)
    if chunk.usage is not None:
        events.append(Event(type="usage", usage=chunk.usage))
    return events


async def stream_call(
    rt: Runtime,
    environment: Environment,
    item: Input,
    requirements: OutputRequirements,
) -> AsyncGenerator[Event, None]:
    """Stream one interaction: start, deltas, tool calls, finish, then done (or raise).

    With interceptors installed (the call seam), the timeline passes through their ``stream``
    methods; pre-flight and source preparation happen only when the innermost one proceeds.
    """
    plan = plan_calls(rt.provider, rt.config, environment, [item], requirements, stream=True)
    interceptors = active_interceptors()
    if not interceptors:
        async for event in _stream_provider(rt, environment, plan):
            yield event
        return
    described = ProviderCall(
        provider=rt.provider.name,
        model=plan.requests[0].model,
        use_mock=rt.config.use_mock,
        environment=environment,
        input=item,
        requirements=plan.requests[0].requirements,
        index=0,
        count=1,
    )

    def through(depth: int) -> Callable[[], AsyncIterator[Event]]:
        def proceed() -> AsyncIterator[Event]:
            if depth == len(interceptors):
                return _stream_provider(rt, environment, plan)
            return _checked(interceptors[depth], described, through(depth + 1))

        return proceed

    events = through(0)()
    try:
        async for event in events:
            yield event
    finally:
        await close_async_iterator(events)


async def _checked(
    interceptor: CallInterceptor,
    call: ProviderCall,
    proceed: Callable[[], AsyncIterator[Event]],
) -> AsyncGenerator[Event, None]:
    # One interceptor's timeline, checked: Events only, ending in exactly one done with an Output.
    name = type(interceptor).__name__
    method = getattr(interceptor, "stream", None)
    if method is None:
        raise ConfigurationError(
            f"interceptor {name} has no stream(call, proceed) method, so it cannot see a "
            "streamed call",
            hint="Add async def stream(self, call, proceed) to the interceptor (return "
            "proceed() to call through), or call pollux.stream outside intercept_calls.",
        )
    events = method(call, proceed)
    done = False
    try:
        async for event in events:
            if done or not isinstance(event, Event):
                what = "an event after done" if done else type(event).__name__
                raise InternalError(
                    f"interceptor {name} streamed {what}, not a timeline of Events",
                    hint="An interceptor's stream yields Events and ends with one done Event.",
                )
            if event.type == "done":
                if not isinstance(event.output, Output):
                    raise InternalError(
                        f"interceptor {name} streamed a done event without an Output",
                        hint="End the timeline with Event(type='done', output=...).",
                    )
                done = True
            yield event
    finally:
        await close_async_iterator(events)
    if not done:
        raise InternalError(
            f"interceptor {name}'s stream ended without a done event",
            hint="End the timeline with Event(type='done', output=...).",
        )


async def _stream_provider(
    rt: Runtime, environment: Environment, plan: Plan
) -> AsyncGenerator[Event, None]:
    provider = rt.provider
    await _preflight(rt, plan.requests[0])
    prepared = await _prepare(rt, environment, plan.requests)
    try:
        request = replace(plan.requests[0], sources=prepared)
        span = start_call_span(provider.name, request)
        try:
            compiled = provider.compile(request)
            yield Event(type="start")
            accumulator = StreamAccumulator()
            gate = QuotaGate.for_call(rt.config, request)
            async with rt.limiter:
                start = time.perf_counter()
                attempts = 0

                def open_stream() -> Awaitable[
                    tuple[AsyncIterator[StreamChunk], StreamChunk | None]
                ]:
                    # Counted like interact's attempts, so done.output carries the same diagnostics.
                    nonlocal attempts
                    attempts += 1
                    return _open_stream(
                        provider, compiled, rt.pacer, rt.config.retry.max_elapsed_s, gate
                    )

                try:
                    # The deadline bounds opening the stream (up to its first chunk), where a
                    # retry is still possible; after that each chunk wait is bounded by
                    # Config.request_timeout_s (see docs/pollux/engine.md).
                    iterator, first = await with_retries(
                        open_stream, rt.config.retry, deadline_for=f"{provider.name} stream"
                    )
                except Exception as exc:
                    raise_stamped(exc, provider=provider.name, phase="stream", call_idx=0)
                try:
                    if first is not None:
                        span.first_token()
                        accumulator.add(first)
                        for event in _events(first):
                            yield event
                        add = accumulator.add
                        async for chunk in iterator:
                            add(chunk)
                            # Inlined _events() for the common one-text-delta chunk: this loop
                            # runs once per streamed token.
                            if chunk.reasoning:
                                yield Event(type="reasoning_delta", text=chunk.reasoning)
                            if chunk.text:
                                yield Event(type="text_delta", text=chunk.text)
                            for delta in chunk.tool_call_deltas:
                                yield Event(type="tool_call_delta", delta=delta)
                            if chunk.usage is not None:
                                yield Event(type="usage", usage=chunk.usage)
                except BaseException as exc:
                    if gate is not None:
                        # Cut mid-body: the provider may have done the work, so the worst case
                        # stays counted (a 429 cannot come after the first chunk).
                        await gate.failed(exc)
                    if isinstance(exc, Exception):
                        raise_stamped(exc, provider=provider.name, phase="stream", call_idx=0)
                    raise
                finally:
                    await close_async_iterator(iterator)
                duration = time.perf_counter() - start
            response = accumulator.response()
            if gate is not None:
                await gate.settle(response.usage)
            for call in response.tool_calls:
                yield Event(type="tool_call", tool_call=call)
            if response.finish_reason is not None:
                yield Event(type="finish", finish_reason=response.finish_reason)
            output = assemble(
                provider,
                request,
                response,
                model=rt.config.model,
                pricing_model=rt.config.pricing_model,
                duration_s=duration,
                attempts=attempts,
                continuable=plan.capabilities.conversation,
            )
            if gate is not None:
                output.diagnostics.raw["quota"] = gate.diagnostic()
            output = explain_miss(provider.name, request, output)
            span.succeed(output)
            yield Event(type="done", output=output)
        except BaseException as exc:
            span.fail(exc)
            raise
    finally:
        await provider.release_sources(prepared)
