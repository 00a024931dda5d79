"""The call seam: middleware around each provider call, after planning.

An interceptor sees the model-visible request of one provider call (:class:`ProviderCall`) and
decides what happens, like an httpx transport or a pydantic-ai wrapper model:

* **call through**: ``return await proceed()`` (the provider call, with pollux's retries);
* **serve** an :class:`Output` without a provider call (a recording, a cache, a refusal as an
  error Output);
* **refuse**: raise. An :class:`pollux.APIError` stays with its prompt (``run_many`` keeps the
  other answers); any other exception ends the whole call.

A streamed call (``pollux.stream``) goes through the interceptor's optional ``stream(call,
proceed)`` method instead: an async iterator of :class:`Event` ending in one ``done`` event that
carries the Output. ``proceed()`` returns the provider's timeline (retries happen before its
first chunk, as without the seam); the interceptor can forward and observe it, serve a recorded
timeline without a provider call, or raise. An interceptor without ``stream`` refuses streamed
calls with a :class:`pollux.ConfigurationError` (it is never bypassed silently).

Interceptors are installed for a block of code with :func:`intercept_calls`; every provider
call of every front door started inside the block (in this task and the tasks it starts) goes
through them. Sources are prepared once per front-door call, when the first call proceeds: a
call whose every request is served uploads nothing.

Example:
    >>> import asyncio
    >>> from pollux import Config, Output, intercept_calls, run_many
    >>> class Canned:
    ...     async def call(self, call, proceed):
    ...         if call.index == 1:
    ...             return Output(text="served")
    ...         return await proceed()
    >>> async def main():
    ...     config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
    ...     with intercept_calls(Canned()):
    ...         return (await run_many(["A?", "B?"], config=config)).answers[1]
    >>> asyncio.run(main())
    'served'
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pollux.errors import ConfigurationError

if TYPE_CHECKING:
    from .environment import Environment
    from .events import Event
    from .input import Input
    from .output import Output
    from .requirements import OutputRequirements

__all__ = [
    "CallInterceptor",
    "ProviderCall",
    "StreamInterceptor",
    "active_interceptors",
    "intercept_calls",
]


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """What the model is asked in one provider call (planned and validated, not yet sent).

    Attributes:
        provider: The provider name (``"openai"``, ...).
        model: The model name (None where the provider picks it, e.g. a local server).
        use_mock: True when the call goes to pollux's offline mock.
        environment: The model-facing setup (instructions, sources, tools, cache preference).
        input: This call's turn.
        requirements: The validated generation settings.
        index: The call's position among the calls of its front-door call (prompt order).
        count: How many calls that front-door call makes.
    """

    provider: str
    model: str | None
    use_mock: bool
    environment: Environment
    input: Input
    requirements: OutputRequirements
    index: int
    count: int


@runtime_checkable
class CallInterceptor(Protocol):
    """Middleware around one provider call (see the module docs)."""

    async def call(self, call: ProviderCall, proceed: Callable[[], Awaitable[Output]]) -> Output:
        """Return the call's Output: ``await proceed()``, a served Output, or raise."""
        ...


@runtime_checkable
class StreamInterceptor(CallInterceptor, Protocol):
    """A `CallInterceptor` that also sees streamed calls (see the module docs)."""

    def stream(
        self, call: ProviderCall, proceed: Callable[[], AsyncIterator[Event]]
    ) -> AsyncIterator[Event]:
        """Return the call's timeline: ``proceed()``, a served timeline, or raise.

        The timeline ends with one ``done`` event carrying the Output.
        """
        ...


_ACTIVE: contextvars.ContextVar[tuple[CallInterceptor, ...]] = contextvars.ContextVar(
    "pollux_interceptors", default=()
)


def active_interceptors() -> tuple[CallInterceptor, ...]:
    """The interceptors installed around the current code, outermost first."""
    return _ACTIVE.get()


@contextmanager
def intercept_calls(*interceptors: CallInterceptor) -> Iterator[None]:
    """Route every provider call started inside the block through ``interceptors``.

    Nested blocks stack: the outer interceptor sees the call first, and its ``proceed`` runs
    the inner ones.

    Args:
        *interceptors: Objects with an async ``call(call, proceed)`` method.

    Raises:
        ConfigurationError: An argument has no ``call`` method.
    """
    for interceptor in interceptors:
        if not callable(getattr(interceptor, "call", None)):
            raise ConfigurationError(
                f"an interceptor needs an async call(call, proceed) method, "
                f"got {type(interceptor).__name__}",
                hint="Pass an object with async def call(self, call, proceed) -> Output.",
            )
    token = _ACTIVE.set(_ACTIVE.get() + tuple(interceptors))
    try:
        yield
    finally:
        _ACTIVE.reset(token)
