"""Chat Completions, shared by the ``local`` and ``openrouter`` providers.

``compile`` builds the JSON payload, ``extract`` maps responses and stream chunks to neutral
values, and ``provider`` holds :class:`ChatCompletionsProvider`, which sends them over pollux's
own keep-alive transport.
"""

from __future__ import annotations

from .provider import ChatCompletionsProvider as ChatCompletionsProvider

__all__ = ["ChatCompletionsProvider"]
