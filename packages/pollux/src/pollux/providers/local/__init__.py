"""Any OpenAI-compatible server (llama.cpp, vLLM, Ollama, LM Studio, ...) through ``base_url``."""

from __future__ import annotations

from .provider import CAPABILITIES as CAPABILITIES
from .provider import LocalProvider as LocalProvider

__all__ = ["CAPABILITIES", "LocalProvider"]
