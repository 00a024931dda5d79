"""Delete or refresh an Environment's Vertex AI context cache, outside any Session.

The Gemini provider's helpers (:mod:`pollux.providers.gemini.caching`), addressed as the
Vertex provider addresses caches: a provider is built for the config (credentials, project and
location settled as for a call), the cache is found by its identity, and the provider is
closed. Its own module so that :mod:`.caching` and :mod:`.provider` do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError, PolluxError
from pollux.providers.gemini.caching import (
    DEFAULT_TTL_S,
    REGISTRY,
    CacheEntry,
    _entry,
    _locate,
    cache_identity,
    check_ttl,
)
from pollux.providers.gemini.errors import is_not_found

from .errors import PROVIDER, relabel
from .provider import VertexProvider

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.environment import Environment

__all__ = ["delete_context_cache", "refresh_context_cache"]


async def _with_provider(
    environment: Environment, config: Config, work: Callable[[Any, str, str], Any]
) -> Any:
    """Run ``work(client, identity, model)`` with a provider for ``config``, then close it."""
    if config.provider != PROVIDER or not config.model:
        raise ConfigurationError(
            "Vertex AI context caches need Config(provider='vertex', model=...)",
            hint="Pass the config the cache was created with (project, location, model).",
        )
    provider = VertexProvider(config)
    try:
        await provider._ready("cache")
        await provider._auth.token()
        identity = cache_identity(
            model=config.model,
            api_key=provider._account(),
            instructions=environment.instructions,
            tools=environment.tools,
            sources=environment.sources,
        )
        try:
            return await work(provider._sdk(), identity, config.model)
        except PolluxError as exc:
            relabel(exc, provider._target())
            raise
        except Exception as exc:
            raise provider._wrap(exc, phase="cache") from exc
    finally:
        await provider.aclose()


async def delete_context_cache(environment: Environment, *, config: Config) -> bool:
    """Delete the Vertex AI context cache of ``environment``, if one exists.

    Args:
        environment: The Environment whose ``CachePolicy`` created the cache.
        config: The config it was created with (project, location, model and endpoint are
            the identity).

    Returns:
        True when a cache was deleted, False when none was found.

    Raises:
        APIError: Vertex AI refused the deletion.
    """

    async def work(client: Any, identity: str, model: str) -> bool:
        entry = await _locate(client, identity, model, config)
        REGISTRY.forget(identity=identity)
        if entry is None:
            return False
        try:
            await client.aio.caches.delete(name=entry.name)
        except Exception as exc:
            if is_not_found(exc):
                return False
            raise
        return True

    result: bool = await _with_provider(environment, config, work)
    return result


async def refresh_context_cache(
    environment: Environment, *, config: Config, ttl_seconds: int = DEFAULT_TTL_S
) -> float | None:
    """Extend the TTL of ``environment``'s Vertex AI context cache to ``ttl_seconds`` from now.

    Returns:
        The new expiry (seconds since the epoch), or None when no cache was found.

    Raises:
        ConfigurationError: ``ttl_seconds`` is not a positive integer.
        APIError: Vertex AI refused the update.
    """
    check_ttl(ttl_seconds)

    async def work(client: Any, identity: str, model: str) -> float | None:
        entry = await _locate(client, identity, model, config)
        if entry is None:
            return None
        try:
            updated = await client.aio.caches.update(
                name=entry.name, config={"ttl": f"{ttl_seconds}s"}
            )
        except Exception as exc:
            if is_not_found(exc):
                REGISTRY.forget(identity=identity)
                return None
            raise
        fresh = _entry(updated, REGISTRY.clock())
        if fresh.expires_at is None:
            fresh = CacheEntry(entry.name, REGISTRY.clock() + ttl_seconds)
        REGISTRY.put(identity, fresh)
        return fresh.expires_at

    result: float | None = await _with_provider(environment, config, work)
    return result
