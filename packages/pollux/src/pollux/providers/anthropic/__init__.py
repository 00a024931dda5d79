"""The ``anthropic`` provider: Anthropic's Messages API through the official ``anthropic`` SDK.

Modules, one job each: :mod:`.compile` (neutral request -> ``messages.create`` kwargs),
:mod:`.extract` (message -> neutral), :mod:`.stream` (stream events -> neutral chunks),
:mod:`.uploads` (sources -> content blocks via the Files API), :mod:`.caching` (prompt-cache
breakpoints), :mod:`.deferred` (Message Batches), :mod:`.models` (model-family rules),
:mod:`.errors` (SDK exceptions -> pollux errors) and :mod:`.provider` (the client, the
capability table, the Provider protocol).
The SDK itself is imported only when the first client is built.
"""

from __future__ import annotations

from .provider import CAPABILITIES, AnthropicProvider

__all__ = ["CAPABILITIES", "AnthropicProvider"]
