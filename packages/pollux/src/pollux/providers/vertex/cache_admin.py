"""Delete, refresh or know an Environment's Vertex AI context cache, outside any Session.

The Gemini provider's helpers (:func:`pollux.providers.gemini.caching.delete_located`,
:func:`~pollux.providers.gemini.caching.refresh_located`), addressed as the Vertex provider
addresses caches: a provider is built for the config (credentials, project and location
settled as for a call), the cache is found by its identity, and the provider is closed. A
refresh or delete is reported to :func:`pollux.interaction.observe_caches` as Gemini's is, with
``provider="vertex"``. Its own module so that :mod:`.caching` and :mod:`.provider` do not
import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError, PolluxError
from pollux.interaction.cache_events import CacheEvent
from pollux.providers.gemini.caching import (
    DEFAULT_TTL_S,
    REGISTRY,
    cache_identity,
    check_ttl,
    delete_located,
    refresh_located,
    reported,
)

from .errors import PROVIDER, relabel
from .provider import VertexProvider, cache_account

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.environment import Environment

__all__ = ["delete_context_cache", "known_context_cache", "refresh_context_cache"]


def _check(config: Config) -> str:
    if config.provider != PROVIDER or not config.model:
        raise ConfigurationError(
            "Vertex AI context caches need Config(provider='vertex', model=...)",
            hint="Pass the config the cache was created with (project, location, model).",
        )
    return config.model


async def _with_provider(
    environment: Environment, config: Config, work: Callable[[Any, str, str], Any]
) -> Any:
    """Run ``work(client, identity, model)`` with a provider for ``config``, then close it."""
    model = _check(config)
    provider = VertexProvider(config)
    try:
        await provider._ready("cache")
        await provider._auth.token()
        identity = cache_identity(
            model=model,
            api_key=provider._account(),
            instructions=environment.instructions,
            tools=environment.tools,
            sources=environment.sources,
        )
        try:
            return await work(provider._sdk(), identity, model)
        except PolluxError as exc:
            relabel(exc, provider._target())
            raise
        except Exception as exc:
            raise provider._wrap(exc, phase="cache") from exc
    finally:
        await provider.aclose()


def known_context_cache(environment: Environment, *, config: Config) -> float | None:
    """The local expiry of ``environment``'s Vertex AI cache when this process knows it alive.

    No I/O: only pollux's process-wide registry is read, under the identity a call would use
    (the project, location and endpoint are the account). None means "not known": a cache
    another process made, one about to expire, or a project not settled without I/O (no
    ``Config.project`` or ``GOOGLE_CLOUD_PROJECT``, and injected credentials that name none:
    the Application Default Credentials would have to be read). A caller that budgets for a
    cache the next call may create (pollard's bridge) treats None as "this call may create it".

    Args:
        environment: The Environment whose ``CachePolicy`` creates the cache.
        config: The config of the calls (project, location, endpoint and model are the
            identity).

    Raises:
        ConfigurationError: ``config`` is not a Vertex AI config with a model.
    """
    model = _check(config)
    project = config.project
    if project is None and config.credentials is not None:
        # What the provider settles on without reading anything (see VertexAuth).
        named = getattr(config.credentials, "project_id", None) or getattr(
            config.credentials, "quota_project_id", None
        )
        project = named if isinstance(named, str) and named else None
    if project is None:
        return None
    identity = cache_identity(
        model=model,
        api_key=cache_account(project, config),
        instructions=environment.instructions,
        tools=environment.tools,
        sources=environment.sources,
    )
    entry = REGISTRY.get(identity)
    return None if entry is None else entry.expires_at


async def delete_context_cache(environment: Environment, *, config: Config) -> bool:
    """Delete the Vertex AI context cache of ``environment``, if one exists.

    Reported to :func:`pollux.interaction.observe_caches` as a ``deleted``
    :class:`~pollux.interaction.CacheEvent` (``provider="vertex"``).

    Args:
        environment: The Environment whose ``CachePolicy`` created the cache.
        config: The config it was created with (project, location, model and endpoint are
            the identity).

    Returns:
        True when a cache was deleted, False when none was found.

    Raises:
        APIError: Vertex AI refused the deletion.
    """

    async def work(client: Any, identity: str, model: str) -> tuple[bool, CacheEvent | None]:
        return await delete_located(client, identity, model, config, provider=PROVIDER)

    deleted: tuple[bool, CacheEvent | None] = await _with_provider(environment, config, work)
    return await reported(deleted)


async def refresh_context_cache(
    environment: Environment, *, config: Config, ttl_seconds: int = DEFAULT_TTL_S
) -> float | None:
    """Extend the TTL of ``environment``'s Vertex AI context cache to ``ttl_seconds`` from now.

    Reported to :func:`pollux.interaction.observe_caches` as a ``refreshed``
    :class:`~pollux.interaction.CacheEvent` (``provider="vertex"``).

    Returns:
        The new expiry (seconds since the epoch), or None when no cache was found.

    Raises:
        ConfigurationError: ``ttl_seconds`` is not a positive integer.
        APIError: Vertex AI refused the update.
    """
    check_ttl(ttl_seconds)

    async def work(
        client: Any, identity: str, model: str
    ) -> tuple[float | None, CacheEvent | None]:
        return await refresh_located(
            client, identity, model, config, provider=PROVIDER, ttl_seconds=ttl_seconds
        )

    refreshed: tuple[float | None, CacheEvent | None] = await _with_provider(
        environment, config, work
    )
    return await reported(refreshed)
