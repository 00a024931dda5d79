"""The ``gemini`` provider: the Gemini Developer API through the official ``google-genai`` SDK.

Modules, one job each: :mod:`.compile` (neutral request -> ``generate_content`` arguments),
:mod:`.extract` (response -> neutral), :mod:`.stream` (stream chunks -> neutral chunks),
:mod:`.uploads` (sources -> parts via the Files API, reused per Session), :mod:`.caching`
(persistent context caches: :func:`delete_context_cache`, :func:`refresh_context_cache`,
:func:`known_context_cache`),
:mod:`.schema` (JSON
Schema -> Gemini's subset), :mod:`.errors` (SDK exceptions -> pollux errors),
:mod:`.client` (the ``genai.Client`` builder, shared by the provider and the caches) and
:mod:`.provider` (the capability table, the Provider protocol).
The SDK itself is imported only when the first client is built.
"""

from __future__ import annotations

from .caching import delete_context_cache, known_context_cache, refresh_context_cache
from .provider import CAPABILITIES, GeminiProvider

__all__ = [
    "CAPABILITIES",
    "GeminiProvider",
    "delete_context_cache",
    "known_context_cache",
    "refresh_context_cache",
]
