"""`governed_stream`: the pollux Event timeline as one governed step, kept for replay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import pollux
from pollard.errors import PollardError
from pollux import Config, Environment, Event, Input, Output
from pollux.interaction import (
    CallDescription,
    GenerationSettings,
    ProviderCall,
    describe_call,
    generation_keywords,
    intercept_calls,
)

from ._cache_charges import cache_hold, charge_created_cache
from ._calls import check_config, check_run, step
from ._identity import output_from_node, request_identity, result_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pollard import AsyncRun, Run

__all__ = ["governed_stream"]


@generation_keywords(place_after={"attempt": "provider_options"})
async def governed_stream(
    run: AsyncRun | Run,
    environment: Environment,
    input: Input,
    *,
    config: Config,
    attempt: int = 0,
    **settings: Unpack[GenerationSettings],
) -> AsyncGenerator[Event, None]:
    """``pollux.stream`` as one governed ``model_call`` step: the same `pollux.Event` timeline.

    Events are yielded as the provider streams them and stored with the node (pollard's
    ``keep_chunks``), so hybrid and replay yield the recorded timeline without a provider call.
    The terminal ``done`` event carries the Output; charges settle once, after the stream ends.
    Closing the iterator early cancels the call (pollard records the cancelled dispatch).

    Args:
        run: The run to record into (an `AsyncRun`, or a sync `Run`; see the module docs).
        environment: The reusable model-facing setup.
        input: The turn.
        config: The pollux configuration.
        attempt: pollard's attempt number.
        **settings: pollux's generation keywords, each optional (``output=``,
            ``temperature=``, ``max_tokens=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Yields:
        Each event of the timeline, ending in ``done``.

    Raises:
        BudgetExceeded: A budget refused the call before any provider I/O.
        MissingRecording: Replay mode, and this turn was not recorded here.
        APIError: The provider call or stream failed (recorded and charged).
    """
    run = check_run(run, "governed_stream")
    config = check_config(config)
    call = describe_call(input=input, environment=environment, settings=settings)
    env, (turn,) = call.environment, call.inputs
    payload = request_identity("stream", config, env, turn, call.requirements)
    governor = _GovernedStream(run, payload, call, attempt, config)
    async with cache_hold(run, payload, config, env, attempt, observe=False):
        events = pollux.stream(env, turn, config=config, **settings)
        try:
            # pollux reads the seam when the stream starts, so the interceptor is installed
            # only while the first event is pulled: the consumer's own code between events
            # (which may call pollux itself) is never governed by this step.
            with intercept_calls(governor):
                try:
                    first = await events.__anext__()
                except StopAsyncIteration:  # pragma: no cover - pollux always yields done
                    return
            yield first
            async for event in events:
                yield event
        finally:
            await events.aclose()


class _GovernedStream:
    """The call interceptor of `governed_stream`: the streamed call is one pollard step.

    The provider's timeline (``proceed()``) is the step's chunk stream: each event is stored
    with the node (pollard's ``keep_chunks``), so hybrid and replay serve the recorded timeline
    without a provider call (and without preparing sources).
    """

    def __init__(
        self,
        run: AsyncRun,
        payload: dict[str, Any],
        call: CallDescription,
        attempt: int,
        config: Config,
    ) -> None:
        self.run = run
        self.config = config
        self.environment = call.environment
        self.payload = payload
        self.requirements = call.requirements
        self.attempt = attempt

    async def call(self, call: ProviderCall, proceed: Callable[[], Awaitable[Output]]) -> Output:
        # pollux.stream makes one streamed call, so this is unreachable; governed, not bypassed.
        return await step(
            self.run,
            self.payload,
            proceed,
            self.requirements,
            self.attempt,
            config=self.config,
            environment=self.environment,
        )

    async def stream(
        self, call: ProviderCall, proceed: Callable[[], AsyncIterator[Event]]
    ) -> AsyncGenerator[Event, None]:
        # One event in hand at a time: the consumer's pace drives the stream, as with
        # pollux.stream, and closing the iterator early cancels the call.
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=1)
        live: list[Output] = []

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            events = proceed()
            final: Output | None = None
            try:
                async for event in events:
                    if event.type == "done":
                        final = event.output
                    else:
                        # An empty delta leaves the settled result alone; the event rides along.
                        yield {"delta": {}, "event": event.to_jsonable()}
            finally:
                await _close(events)
            if final is None:
                raise PollardError(
                    "the pollux stream ended without a done event",
                    hint="this is a pollux bug; please report it",
                )
            live.append(final)
            yield {"result": result_of(final)}

        def fn(_payload: Any) -> AsyncIterator[dict[str, Any]]:
            return chunks()

        async def on_delta(chunk: Mapping[str, Any]) -> None:
            event = chunk.get("event")
            if isinstance(event, Mapping):
                await queue.put(Event.from_jsonable(event))

        task = asyncio.ensure_future(
            self.run.model_call(
                self.payload, fn=fn, attempt=self.attempt, on_delta=on_delta, keep_chunks=True
            )
        )
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                    continue
                getter.cancel()
                while not queue.empty():
                    yield queue.get_nowait()
                break
            node = task.result()
            if live:
                await charge_created_cache(
                    self.run, node.id, self.payload["provider"], self.payload["model"], live[0]
                )
            schema = self.requirements.output_schema
            final = live[0] if live else output_from_node(node, output=schema)
            yield Event(type="done", output=final)
        finally:
            if not task.done():
                task.cancel()
            # Let pollard record the cancelled (or failed) dispatch before the iterator closes;
            # a step error was raised by task.result() above.
            await asyncio.gather(task, return_exceptions=True)


async def _close(iterator: object) -> None:
    """Close an async iterator if it can be closed."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
