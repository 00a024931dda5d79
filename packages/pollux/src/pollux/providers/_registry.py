"""Which class serves which provider; modules are imported only when first used.

A provider class is constructed as ``cls(config, transport=...)`` (the Session's
:class:`pollux.transport.Transport`) and implements
:class:`pollux.providers.base.Provider`. ``Config(use_mock=True)`` always gets the mock provider.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pollux.errors import ConfigurationError

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.providers.base import Provider
    from pollux.transport import Transport

__all__ = ["PROVIDERS", "build_provider"]

#: provider name -> (module, class name). Adding a provider is one line here.
PROVIDERS: dict[str, tuple[str, str]] = {
    "anthropic": ("pollux.providers.anthropic", "AnthropicProvider"),
    "azure_openai": ("pollux.providers.azure_openai", "AzureOpenAIProvider"),
    "local": ("pollux.providers.local", "LocalProvider"),
    "openrouter": ("pollux.providers.openrouter", "OpenRouterProvider"),
    "openai": ("pollux.providers.openai", "OpenAIProvider"),
    "gemini": ("pollux.providers.gemini", "GeminiProvider"),
    "vertex": ("pollux.providers.vertex", "VertexProvider"),
}


def build_provider(config: Config, transport: Transport | None = None) -> Provider:
    """Construct the provider for ``config`` (the mock provider when ``use_mock`` is set).

    ``transport`` carries every request of the provider; None lets it build a private one.
    """
    if config.use_mock:
        from pollux.providers.mock import MockProvider

        return MockProvider(config)
    entry = PROVIDERS.get(config.provider)
    if entry is None:
        raise ConfigurationError(
            f"Provider {config.provider!r} is not available in this build",
            hint="Available providers: "
            + ", ".join(sorted(PROVIDERS))
            + "; use Config(use_mock=True) to run offline.",
        )
    module_name, class_name = entry
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("pollux"):
            raise ConfigurationError(
                f"Provider {config.provider!r} is not available in this build",
                hint="Use Config(use_mock=True) to run offline, or another provider.",
            ) from exc
        raise
    cls = getattr(module, class_name)
    provider: Provider = cls(config, transport=transport)
    return provider
