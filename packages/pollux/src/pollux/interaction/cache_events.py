"""Persistent-cache lifecycle events: a hook for code that bills or audits provider caches.

A persistent provider cache (Gemini's ``cachedContents``, made by a ``CachePolicy``) is billed
apart from the calls that read it: its tokens once when it is created, then storage for as long
as it lives. How long it lives changes after the call that created it: a refresh moves its
expiry, a delete ends it early. pollux reports each of those moments as a :class:`CacheEvent`
to the observers installed with :func:`observe_caches`, so a ledger (pollard's bridge, your
own) can charge storage for the time the provider actually holds the cache.

Events, in order of a cache's life:

* ``"created"``: a call created the cache (the same facts the call reports in
  ``Output.diagnostics.raw["cache"]``), emitted whether or not the call then succeeded;
* ``"refreshed"``: :func:`pollux.providers.gemini.refresh_context_cache` (or Vertex AI's,
  :func:`pollux.providers.vertex.refresh_context_cache`) moved its expiry
  (``previous_expires_at`` -> ``expires_at``; earlier when the new TTL is shorter than what was
  left);
* ``"deleted"``: :func:`pollux.providers.gemini.delete_context_cache` (or Vertex AI's) deleted
  it at ``at``, before ``expires_at`` (the expiry it had).

Times are seconds since the epoch **on the provider's clock** (read from the cache resource's
``createTime``/``updateTime``/``expireTime``; a delete's time is pollux's clock moved by the
offset measured on the last create or update), so ``expires_at - at`` is the storage the
provider no longer bills. A cache that simply expires emits nothing: storage to its expiry is
what the ``created`` and ``refreshed`` events already stated. A cache deleted outside pollux
(another tool, the console) is not seen.

Observers are installed for a block of code, like :func:`pollux.intercept_calls`; events of
caches created, refreshed or deleted inside the block (in this task and the tasks it starts)
reach them. An observer is a callable taking the event; it may be ``async``. An exception it
raises propagates to the pollux call that emitted the event, after the provider operation has
happened (so a ledger that cannot record fails loudly rather than silently losing a charge).

Example:
    >>> from pollux.interaction import CacheEvent, observe_caches
    >>> seen = []
    >>> with observe_caches(seen.append):
    ...     pass  # refresh_context_cache(...) / delete_context_cache(...) / a CachePolicy call
    >>> seen
    []
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from pollux.errors import ConfigurationError

__all__ = [
    "CacheEvent",
    "CacheEventKind",
    "CacheObserver",
    "emit_cache_event",
    "observe_caches",
]

CacheEventKind = Literal["created", "refreshed", "deleted"]
"""What happened to a persistent cache."""


@dataclass(frozen=True, slots=True)
class CacheEvent:
    """One moment in a persistent provider cache's life (see the module docs).

    Attributes:
        kind: ``"created"``, ``"refreshed"`` or ``"deleted"``.
        provider: The provider name (``"gemini"``, or ``"vertex"`` for Gemini's caches on
            Vertex AI).
        model: The model the cache belongs to.
        name: The provider's resource name (``cachedContents/...``).
        tokens: The tokens the cache stores (what storage is billed on), when reported.
        at: When it happened, seconds since the epoch on the provider's clock.
        expires_at: The expiry after the event (``"deleted"``: the expiry the cache had).
        previous_expires_at: ``"refreshed"`` only: the expiry before the refresh.
        ttl_seconds: ``"created"`` and ``"refreshed"``: the TTL that was set.
    """

    kind: CacheEventKind
    provider: str
    model: str
    name: str
    tokens: int | None
    at: float
    expires_at: float | None
    previous_expires_at: float | None = None
    ttl_seconds: int | None = None


CacheObserver = Callable[[CacheEvent], "Awaitable[None] | None"]
"""A callable that takes a :class:`CacheEvent`; it may be a coroutine function."""

_ACTIVE: contextvars.ContextVar[tuple[CacheObserver, ...]] = contextvars.ContextVar(
    "pollux_cache_observers", default=()
)


@contextmanager
def observe_caches(*observers: CacheObserver) -> Iterator[None]:
    """Send every persistent-cache event of the block to ``observers`` (see the module docs).

    Nested blocks stack: the outer observers see each event first.

    Args:
        *observers: Callables taking a :class:`CacheEvent` (sync or async).

    Raises:
        ConfigurationError: An argument is not callable.
    """
    for observer in observers:
        if not callable(observer):
            raise ConfigurationError(
                f"a cache observer must be callable, got {type(observer).__name__}",
                hint="Pass a function (sync or async) that takes a CacheEvent.",
            )
    token = _ACTIVE.set(_ACTIVE.get() + tuple(observers))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


async def emit_cache_event(event: CacheEvent) -> None:
    """Give ``event`` to every observer installed around the current code, outermost first."""
    for observer in _ACTIVE.get():
        answer = observer(event)
        if inspect.isawaitable(answer):
            await answer
