"""pollux: one async API over Gemini, OpenAI, Anthropic, OpenRouter and local servers.

Layering (each layer imports only the ones below it):

1. ``pollux/__init__.py``: the public door, explicit re-exports and a sorted ``__all__``.
2. ``Session``: owns provider clients, concurrency limiters, upload and cache registries.
3. The engine: plan, schedule, retry, assemble.
4. Providers: one small package each under ``pollux.providers``.
5. Pure value types with no I/O: sources, config, errors, ``pollux.interaction``.
6. ``pollux.testing``: the public test toolkit (provider emulator, scripted provider).

Provider SDKs are imported lazily, so ``import pollux`` stays fast.
"""

from __future__ import annotations

from ._version import __version__ as __version__

__all__ = ["__version__"]
