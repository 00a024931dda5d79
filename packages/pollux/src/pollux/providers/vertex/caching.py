"""Explicit context caches on Vertex AI: the Gemini provider's, under a project and location.

Vertex keeps ``cachedContents`` under ``projects/{project}/locations/{location}/``; the SDK
addresses them there when its client is a Vertex one, so resolution (registry, ``list`` by
display name, single-flight create with the minimum-size check) is the Gemini provider's
(:class:`pollux.providers.gemini.caching.GeminiCaches`). Only the account in the cache's
identity differs: it is the project, location and endpoint, not an API key, so two projects
(or the emulator and Vertex AI) never share a cache; and its
:class:`~pollux.interaction.CacheEvent` carry ``provider="vertex"``. Deleting, refreshing and
knowing a cache by its Environment are in :mod:`.cache_admin`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pollux.providers.gemini.caching import GeminiCaches, cache_identity

from .errors import PROVIDER

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.providers.base import ProviderRequest

__all__ = ["VertexCaches"]


class VertexCaches(GeminiCaches):
    """Gemini's cache resolution, with the Vertex project and location as the account.

    Args:
        client: Returns the provider's (Vertex) ``genai.Client``.
        uploads: The provider's source preparer.
        config: The session config.
        account: Returns ``"vertex|<project>|<location>|<endpoint>"`` once the project is
            settled.
    """

    provider = PROVIDER  # its ``created`` events say Vertex AI, so a ledger prices them so

    def __init__(
        self, client: Callable[[], Any], uploads: Any, config: Config, account: Callable[[], str]
    ) -> None:
        super().__init__(client, uploads, config)
        self._account = account

    def identity(self, request: ProviderRequest, model: str) -> str:
        """The cache identity for one request's environment in this project and location."""
        return cache_identity(
            model=model,
            api_key=self._account(),
            instructions=request.instructions,
            tools=request.tools,
            sources=request.sources.sources,
        )
