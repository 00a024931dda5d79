"""The ``vertex`` provider: Gemini models on Vertex AI.

Modules, one job each: :mod:`.auth` (Application Default Credentials or injected
``google.auth`` credentials -> bearer tokens, scrubbed), :mod:`.sources` (inline local files,
``gs://`` and web URIs by reference; Vertex has no Files API), :mod:`.caching` (context caches
under the project and location), :mod:`.cache_admin` (delete, refresh or know one),
:mod:`.batches` and :mod:`.storage` (batch prediction staged in Cloud Storage),
:mod:`.errors` (the Gemini provider's errors, relabelled with hints that name the project,
location, model and credentials) and :mod:`.provider` (the Gemini provider's request mapping,
which it reuses unchanged, on Vertex's endpoints).
"""

from __future__ import annotations

from .cache_admin import delete_context_cache, known_context_cache, refresh_context_cache
from .provider import CAPABILITIES, VertexProvider

__all__ = [
    "CAPABILITIES",
    "VertexProvider",
    "delete_context_cache",
    "known_context_cache",
    "refresh_context_cache",
]
