"""The ``azure_openai`` provider: OpenAI models deployed in an Azure OpenAI resource.

Modules, one job each: :mod:`.auth` (API key or Entra ID token provider -> request headers),
:mod:`.errors` (the OpenAI provider's errors, relabelled with hints that name Azure's settings)
and :mod:`.provider` (endpoint, deployment and ``api-version`` over the OpenAI provider's
request mapping, which it reuses unchanged).
"""

from __future__ import annotations

from .provider import CAPABILITIES, AzureOpenAIProvider

__all__ = ["CAPABILITIES", "AzureOpenAIProvider"]
