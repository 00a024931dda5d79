"""The module-level entry points: thin shells over a Session that is reused, not rebuilt.

Each event loop keeps one Session per distinct Config, so back-to-back ``interact()`` calls share
keep-alive connections, the provider's limiter and cached metadata instead of paying for new
clients every call. The shared Sessions close when their loop shuts down: ``asyncio.run`` (and
``asyncio.Runner``) cancel the loop's remaining tasks on exit, and a small keeper task closes every
shared Session when it is cancelled, so no socket outlives its loop.

At most ``_MAX_SHARED`` idle Sessions are kept per loop (least recently used go first); a Session
with a call in flight is never closed under it. The state of a loop that was closed without
cancelling its tasks (``loop.run_until_complete`` then ``loop.close()``) is dropped the next time
a new loop asks for a Session, so such loops do not pile up.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from pollux._engine.execute import close_async_iterator
from pollux._session import Session
from pollux.config import Config
from pollux.errors import ConfigurationError
from pollux.interaction.call import describe_call
from pollux.interaction.settings import generation_keywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pollux.interaction.environment import CacheSetting, Environment
    from pollux.interaction.events import Event
    from pollux.interaction.input import Input
    from pollux.interaction.output import Output, OutputCollection
    from pollux.interaction.settings import GenerationSettings
    from pollux.interaction.tools import ToolDeclaration
    from pollux.providers.base import ProviderReadiness
    from pollux.source import Source

__all__ = ["check_ready", "interact", "prepare_environment", "run", "run_many", "stream"]

_MAX_SHARED = 16


class _LoopSessions:
    """The shared Sessions of one event loop, closed when the loop shuts down."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sessions: OrderedDict[Config, Session] = OrderedDict()
        # Calls in flight per Session: a busy Session is never evicted.
        self.calls: dict[Session, int] = {}
        self.stopped = asyncio.Event()
        self.keeper = loop.create_task(self._keep(), name="pollux-shared-sessions")
        # The keeper waits for the loop's shutdown on purpose; a loop closed without cancelling
        # its tasks is not worth an error log about it.
        self.keeper._log_destroy_pending = False  # type: ignore[attr-defined]

    async def _keep(self) -> None:
        try:
            await self.stopped.wait()
        finally:
            sessions = list(self.sessions.values())
            self.sessions.clear()
            for session in sessions:
                await session.aclose()

    def acquire(self, config: Config) -> Session:
        """The Session for ``config``, counted as busy until :meth:`release`."""
        session = self.sessions.get(config)
        if session is None or session.closed:
            session = Session(config)
            self.sessions[config] = session
        else:
            self.sessions.move_to_end(config)
        self.calls[session] = self.calls.get(session, 0) + 1
        if len(self.sessions) > _MAX_SHARED:
            self._evict()
        return session

    def release(self, session: Session) -> None:
        """One call on ``session`` ended."""
        left = self.calls.pop(session, 1) - 1
        if left > 0:
            self.calls[session] = left
        if len(self.sessions) > _MAX_SHARED:
            self._evict()

    def _evict(self) -> None:
        # Close the least recently used idle Sessions beyond the cap; busy ones wait their turn
        # (the next release trims again).
        excess = len(self.sessions) - _MAX_SHARED
        for config, session in list(self.sessions.items()):
            if excess <= 0:
                break
            if session in self.calls:
                continue
            del self.sessions[config]
            excess -= 1
            task = asyncio.ensure_future(session.aclose())
            _BACKGROUND.add(task)
            task.add_done_callback(_BACKGROUND.discard)


_BACKGROUND: set[asyncio.Future[None]] = set()
_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopSessions] = (
    weakref.WeakKeyDictionary()
)


# Guards changes to _BY_LOOP: each thread may run its own loop (asyncio.run per request).
_BY_LOOP_LOCK = threading.Lock()


def _forget(loop: asyncio.AbstractEventLoop) -> Callable[[object], None]:
    def callback(_task: object) -> None:
        with _BY_LOOP_LOCK:
            _BY_LOOP.pop(loop, None)

    return callback


def _loop_sessions(config: Config) -> _LoopSessions:
    if not isinstance(config, Config):
        raise ConfigurationError(
            f"config must be a Config, got {type(config).__name__}",
            hint="Pass config=Config(provider=..., model=...).",
        )
    loop = asyncio.get_running_loop()
    state = _BY_LOOP.get(loop)
    if state is None or state.keeper.done():
        with _BY_LOOP_LOCK:
            # A loop closed without cancelling its tasks never ran its keeper: drop its state
            # (the keeper task references the loop, so the weak key alone never lets it go).
            for old in [old for old in list(_BY_LOOP.keys()) if old.is_closed()]:
                _BY_LOOP.pop(old, None)
            state = _LoopSessions(loop)
            _BY_LOOP[loop] = state
        # Drop the entry once the keeper ends so a closed loop is not kept alive by its state.
        state.keeper.add_done_callback(_forget(loop))
    return state


def _shared_session(config: Config) -> Session:
    """The shared Session for ``config`` on the running loop (not counted as busy)."""
    state = _loop_sessions(config)
    session = state.acquire(config)
    state.release(session)
    return session


@generation_keywords(place_after={"tools": "tool_choice"})
async def run(
    prompt: str | None = None,
    *,
    source: Source | None = None,
    sources: Sequence[Source] = (),
    config: Config,
    environment: Environment | None = None,
    instructions: str | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    **settings: Unpack[GenerationSettings],
) -> Output:
    """Run a single prompt, optionally with sources for context.

    The simple facade: returns an :class:`Output` with named facets (``text``, ``structured``,
    ``reasoning``, ``usage``, ``metrics``, ...). For stable environments, continuation, or tool
    loops, use :func:`interact`. Unlike :func:`run_many`, a failed call raises its error.

    Args:
        prompt: The prompt to run.
        source: A single source for context (convenience for ``sources=[source]``).
        sources: Stable sources for context.
        config: Configuration specifying provider and model.
        environment: Optional prepared :class:`Environment` carrying instructions, sources,
            tools, and cache preference. Cannot be combined with inline
            ``instructions``/``source``/``sources``/``tools``.
        instructions: Optional system-level instruction.
        tools: Optional tool declarations.
        **settings: The generation keywords, each optional (``output=`` for structured output,
            ``temperature=``, ``max_tokens=``, ``tool_choice=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Returns:
        The completed :class:`Output`.

    Raises:
        ConfigurationError: Invalid or unsupported arguments (before any I/O).
        APIError: The provider call failed after the configured retries.

    Example:
        config = Config(provider="openai", model="gpt-5-nano")
        result = await run("Summarize.", source=Source.from_file("doc.pdf"), config=config)
        print(result.text)
    """
    if prompt is not None and not isinstance(prompt, str):
        # A list would run every prompt (and bill it) but return only the first answer.
        raise ConfigurationError(
            f"run() takes one prompt as a string, got {type(prompt).__name__}",
            hint="Pass one string; for several prompts use run_many(prompts, ...).",
        )
    call = describe_call(
        prompt,
        environment=environment,
        source=source,
        sources=sources,
        instructions=instructions,
        tools=tools,
        settings=settings,
    )
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        outputs = await session.run_call(call, raise_errors=True)
    finally:
        state.release(session)
    return outputs[0]


@generation_keywords(place_after={"tools": "tool_choice"})
async def run_many(
    prompts: str | Sequence[str | None] | None = None,
    *,
    sources: Sequence[Source] = (),
    config: Config,
    environment: Environment | None = None,
    instructions: str | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    **settings: Unpack[GenerationSettings],
) -> OutputCollection:
    """Run multiple prompts with shared sources for source-pattern execution.

    Returns an :class:`OutputCollection` whose ``outputs`` preserve input order; ``.answers`` /
    ``.structured`` give ergonomic per-prompt lists. Shared sources are prepared once for the
    whole call, and ``Config.request_concurrency`` calls stay in flight until the prompts run
    out. A failed prompt does not discard the others: its Output has
    ``metrics.completion_status == "error"`` and the error in ``diagnostics.error``, and the
    collection's ``status`` is ``"partial"``.

    Args:
        prompts: One or more prompts to run.
        sources: Stable sources shared across the prompts.
        config: Configuration specifying provider and model.
        environment: Optional prepared :class:`Environment` carrying instructions, sources,
            tools, and cache preference. Cannot be combined with inline
            ``instructions``/``sources``/``tools``.
        instructions: Optional system-level instruction.
        tools: Optional tool declarations.
        **settings: The generation keywords, each optional (``output=`` for structured output,
            ``temperature=``, ``max_tokens=``, ``tool_choice=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Returns:
        The :class:`OutputCollection` for the source pattern.

    Raises:
        ConfigurationError: Invalid or unsupported arguments (before any I/O).

    Example:
        config = Config(provider="openai", model="gpt-5-nano")
        results = await run_many(
            ["Question 1?", "Question 2?"],
            sources=[Source.from_text("Context...")],
            config=config,
        )
        for answer in results.answers:
            print(answer)
    """
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        return await session.run_many(
            prompts,
            sources=sources,
            environment=environment,
            instructions=instructions,
            tools=tools,
            **settings,
        )
    finally:
        state.release(session)


@generation_keywords()
async def interact(
    environment: Environment,
    input: Input,
    *,
    config: Config,
    **settings: Unpack[GenerationSettings],
) -> Output:
    """Run one explicit interaction over an environment and input.

    Build an :class:`Environment` once (instructions, sources, tools, cache preference), then
    send :class:`Input` turns. Returns an :class:`Output` with named facets (``text``,
    ``structured``, ``reasoning``, ``tool_calls``, ``continuation``, ``usage``, ``metrics``,
    ``diagnostics``). Continue by passing the prior output's ``continuation`` and any
    ``tool_results`` in the next ``Input``.

    Args:
        environment: Reusable model-facing setup for the interaction.
        input: The per-turn payload (user content, continuation, tool results).
        config: Configuration specifying provider and model.
        **settings: The generation keywords, each optional (``output=`` for structured output,
            ``temperature=``, ``max_tokens=``, ``tool_choice=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Returns:
        The completed :class:`Output` for the interaction.

    Raises:
        ConfigurationError: Invalid or unsupported arguments (before any I/O).
        APIError: The provider call failed after the configured retries.

    Example:
        environment = Environment(instructions=system_prompt, tools=tool_decls)
        result = await interact(environment, Input("Inspect the repo."), config=cfg)
        while result.tool_calls:
            results = [ToolResult(call_id=c.id, content=run_tool(c)) for c in result.tool_calls]
            result = await interact(
                environment,
                Input(continuation=result.continuation, tool_results=results),
                config=cfg,
            )
    """
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        return await session.interact(
            environment,
            input,
            **settings,
        )
    finally:
        state.release(session)


@generation_keywords()
async def stream(
    environment: Environment,
    input: Input,
    *,
    config: Config,
    **settings: Unpack[GenerationSettings],
) -> AsyncGenerator[Event, None]:
    """Stream one explicit interaction as :class:`Event` objects.

    The streaming sibling of :func:`interact`: same environment/input/config and the same
    completed result, observed as a timeline. Iterate the events (``start``, ``text_delta``,
    ``reasoning_delta``, ``tool_call_delta``, ``tool_call``, ``usage``, ``finish``) and read the
    final assembled :class:`Output` from the terminal ``done`` event, whose ``output`` matches
    what :func:`interact` would return for the same interaction. Consumers never parse SSE or
    provider chunks.

    A provider that does not support streaming raises ``ConfigurationError``. A mid-stream
    provider failure raises from the iterator rather than emitting a ``done`` event, so a
    failed interaction never yields a final output. A failure before the first chunk is
    retried like any call.

    Args:
        environment: Reusable model-facing setup for the interaction.
        input: The per-turn payload (user content, continuation, tool results).
        config: Configuration specifying provider and model.
        **settings: The generation keywords, each optional (``output=`` for structured output,
            ``temperature=``, ``max_tokens=``, ``tool_choice=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Yields:
        Each :class:`Event` in the interaction's timeline, ending in ``done``.

    Example:
        async for event in stream(environment, Input("Inspect the repo."), config=cfg):
            if event.type == "text_delta":
                print(event.text, end="")
            elif event.type == "done":
                result = event.output
    """
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        events = session.stream(
            environment,
            input,
            **settings,
        )
        try:
            async for event in events:
                yield event
        finally:
            await close_async_iterator(events)
    finally:
        state.release(session)


async def check_ready(config: Config) -> ProviderReadiness:
    """Check that ``config`` can reach its provider right now.

    For ``provider="local"`` this asks the server to answer (``GET /models``) and checks that
    the configured model is listed; for cloud providers it reads the model catalog where one
    exists (OpenRouter) and otherwise reports ready without a probe
    (``model_verified=False``). It never raises for an unreachable server: the result says
    what is wrong and how to fix it.

    Args:
        config: The configuration to check.

    Returns:
        A :class:`ProviderReadiness`.

    Example:
        status = await check_ready(Config(provider="local", base_url="http://localhost:8080/v1"))
        if not status.ready:
            print(status.message)
    """
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        return await session.check_ready()
    finally:
        state.release(session)


async def prepare_environment(
    *,
    sources: Sequence[Source] = (),
    config: Config,
    instructions: str | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    cache: CacheSetting = None,
    metadata: dict[str, Any] | None = None,
) -> Environment:
    """Prepare a reusable :class:`Environment`, front-loading cache/upload I/O.

    Build the stable model-facing setup once and reuse it across :func:`interact`,
    :func:`run`, :func:`run_many` and :func:`stream` calls. The environment is checked against
    the provider now (an unsupported source, tool or cache preference raises here, before any
    I/O), then its sources are prepared once: files are uploaded where the provider uploads
    them, text files are read. Later calls with the same ``config`` in the same event loop
    reuse those uploads by the environment's identity instead of uploading per call; they are
    released when the loop's shared Session closes (``asyncio.run`` ends). Inside a
    :class:`Session`, use :meth:`Session.prepare_environment`.

    A :class:`CachePolicy` asks for a persistent provider cache. On Gemini it is created now (one
    ``cachedContents`` resource holding the sources, instructions and tools) and later calls
    over the Environment send the cache instead of the sources, finding it again by identity
    (in another process too); on Anthropic it picks the prompt-cache TTL (300 or 3600 seconds);
    other providers raise ConfigurationError with a hint instead of dropping it. ``"auto"``
    keeps the provider's automatic prompt caching (OpenAI caches long shared prefixes by
    itself, Anthropic gets ``cache_control`` breakpoints on the stable prefix).

    Args:
        sources: Stable sources to bake into the environment (and its cache).
        config: Configuration specifying provider and model.
        instructions: Optional system-level instruction.
        tools: Optional tool declarations.
        cache: Cache preference: a :class:`CachePolicy` for persistent caching, ``"auto"`` for
            provider-managed caching, ``"none"`` to disable, or ``None`` for the default.
        metadata: Optional provider-neutral metadata for planning.

    Returns:
        The prepared :class:`Environment`.

    Raises:
        ConfigurationError: Unsupported sources, tools or cache preference (before any I/O).
        APIError: An upload failed after the configured retries.

    Example:
        environment = await prepare_environment(
            sources=[Source.from_file("paper.pdf")],
            instructions=system_prompt,
            config=config,
        )
        results = await run_many(prompts, environment=environment, config=config)
    """
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        return await session.prepare_environment(
            sources=sources,
            instructions=instructions,
            tools=tools,
            cache=cache,
            metadata=metadata,
        )
    finally:
        state.release(session)
