"""``local_reasoning``: the provider options that switch a local server's thinking mode."""

from __future__ import annotations

from typing import Any

__all__ = ["local_reasoning"]


def local_reasoning(*, enabled: bool = False) -> dict[str, dict[str, Any]]:
    """Return local provider options for servers with ``enable_thinking`` support.

    Servers such as llama.cpp and vLLM serving Qwen-style chat templates read
    ``chat_template_kwargs.enable_thinking``; pass the result as ``provider_options``.

    Args:
        enabled: Whether the model should think before answering.

    Returns:
        ``{"local": {"chat_template_kwargs": {"enable_thinking": enabled}}}``.

    Raises:
        TypeError: If ``enabled`` is not a bool.

    Example:
        >>> local_reasoning(enabled=True)
        {'local': {'chat_template_kwargs': {'enable_thinking': True}}}
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    return {"local": {"chat_template_kwargs": {"enable_thinking": enabled}}}
