"""The ``openai`` provider: OpenAI's Responses API through the official ``openai`` SDK.

Modules, one job each: :mod:`.compile` (neutral request -> ``responses.create`` kwargs),
:mod:`.extract` (response -> neutral), :mod:`.stream` (stream events -> neutral chunks),
:mod:`.uploads` (sources -> input parts via the Files API), :mod:`.deferred` (deferred delivery
on the Batch API), :mod:`.errors` (SDK exceptions -> pollux errors) and :mod:`.provider` (the
client, the capability table, the Provider protocol).
The SDK itself is imported only when the first client is built.
"""

from __future__ import annotations

from .provider import CAPABILITIES, OpenAIProvider

__all__ = ["CAPABILITIES", "OpenAIProvider"]
