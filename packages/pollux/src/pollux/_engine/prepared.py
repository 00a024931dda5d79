"""Prepared environments: sources uploaded once by ``prepare_environment`` and reused per call.

A Session keeps the :class:`~pollux.providers.base.PreparedSources` of every Environment that
:func:`pollux.prepare_environment` built through it, keyed by the Environment object itself. A
later call over that same Environment runs with :class:`KeptSourcesProvider`, a view of the
provider whose ``prepare_sources`` hands back the kept parts (no upload) and whose
``release_sources`` leaves them alone; everything else goes to the provider unchanged. The kept
uploads are released when the Session closes.

Kept parts are used for at most :data:`MAX_AGE_S` seconds: provider uploads expire server-side
(OpenAI's after 24 hours), so an older entry is ignored and calls upload for themselves again,
exactly as if the environment had not been prepared.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pollux.interaction.environment import CachePolicy, Environment
    from pollux.providers.base import (
        Capabilities,
        PreparedSources,
        Provider,
        ProviderReadiness,
        ProviderRequest,
        ProviderResponse,
        StreamChunk,
    )
    from pollux.source import Source

__all__ = ["MAX_AGE_S", "KeptSourcesProvider", "PreparedEnvironments"]

#: How long kept uploads are reused (well inside OpenAI's 24 hour upload expiry).
MAX_AGE_S = 20 * 3600.0


@dataclass(frozen=True, slots=True)
class _Entry:
    environment: Environment
    prepared: PreparedSources
    at: float


class PreparedEnvironments:
    """The prepared environments of one Session (strong references until :meth:`drain`)."""

    __slots__ = ("_clock", "_entries")

    def __init__(self, *, clock: Any = time.monotonic) -> None:
        self._entries: dict[int, _Entry] = {}
        self._clock = clock

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, environment: Environment, prepared: PreparedSources) -> None:
        """Remember the prepared sources of ``environment``."""
        self._entries[id(environment)] = _Entry(environment, prepared, self._clock())

    def lookup(self, environment: Environment) -> PreparedSources | None:
        """The kept sources of this very Environment object, while they are fresh."""
        entry = self._entries.get(id(environment))
        if entry is None or entry.environment is not environment:
            return None
        if self._clock() - entry.at > MAX_AGE_S:
            return None
        return entry.prepared

    def drain(self) -> list[PreparedSources]:
        """Forget every entry and return their sources, for release."""
        entries = list(self._entries.values())
        self._entries.clear()
        return [entry.prepared for entry in entries]


class KeptSourcesProvider:
    """A provider view that serves one environment's kept sources instead of uploading.

    Implements :class:`~pollux.providers.base.Provider` by delegation.
    """

    __slots__ = ("_kept", "_provider", "name")

    def __init__(self, provider: Provider, kept: PreparedSources) -> None:
        self._provider = provider
        self._kept = kept
        self.name = provider.name

    def __getattr__(self, name: str) -> Any:
        # Anything beyond the protocol (provider extras the engine may grow to use) is the
        # provider's own.
        return getattr(self._provider, name)

    @property
    def wrapped(self) -> Provider:
        """The provider behind this view."""
        return self._provider

    def capabilities_for(self, model: str | None) -> Capabilities:
        """Delegated."""
        return self._provider.capabilities_for(model)

    def validate(self, request: ProviderRequest) -> None:
        """Delegated."""
        self._provider.validate(request)

    async def preflight(self, request: ProviderRequest) -> None:
        """Delegated."""
        await self._provider.preflight(request)

    def needs_sources(self, request: ProviderRequest) -> bool:
        """Delegated."""
        return self._provider.needs_sources(request)

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """The kept sources when asked for exactly them; otherwise the provider prepares."""
        kept = self._kept.sources
        if len(sources) == len(kept) and all(a is b for a, b in zip(sources, kept, strict=True)):
            return self._kept
        return await self._provider.prepare_sources(sources)

    async def release_sources(self, prepared: PreparedSources) -> None:
        """Kept sources stay until the Session closes; others are released now."""
        if prepared is self._kept:
            return
        await self._provider.release_sources(prepared)

    async def prepare_cache(self, request: ProviderRequest, policy: CachePolicy) -> PreparedSources:
        """Delegated: persistent caches are the provider's own."""
        return await self._provider.prepare_cache(request, policy)

    def compile(self, request: ProviderRequest) -> Any:
        """Delegated."""
        return self._provider.compile(request)

    async def execute(self, compiled: Any) -> ProviderResponse:
        """Delegated."""
        return await self._provider.execute(compiled)

    def stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        """Delegated."""
        return self._provider.stream(compiled)

    def continuation_state(
        self, request: ProviderRequest, response: ProviderResponse
    ) -> dict[str, Any]:
        """Delegated."""
        return self._provider.continuation_state(request, response)

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Delegated."""
        return await self._provider.check_ready(model)

    async def aclose(self) -> None:
        """Never closes the provider: the Session owns it."""
