"""OpenRouter: Chat Completions plus a model catalog cached per Session."""

from __future__ import annotations

from .provider import CAPABILITIES as CAPABILITIES
from .provider import OpenRouterProvider as OpenRouterProvider

__all__ = ["CAPABILITIES", "OpenRouterProvider"]
