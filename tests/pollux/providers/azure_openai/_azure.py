"""What the Azure tests share: the resource's key, an api-version and the Config they build."""

from __future__ import annotations

from typing import Any

import pytest

from pollux import Config, RetryPolicy
from pollux.testing import Emulator

KEY = "azure-key-0123456789abcdef"
VERSION = "2025-04-01-preview"
ONCE = RetryPolicy(max_attempts=1, max_elapsed_s=None)


def without_azure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset the variables the Azure provider reads, so only what a test configures counts."""
    for name in (
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "OPENAI_API_VERSION",
        "POLLUX_AZURE_PRICING_MODEL",
    ):
        monkeypatch.delenv(name, raising=False)


def azure_config(emu: Emulator, deployment: str, **fields: Any) -> Config:
    """``provider="azure_openai"`` at the emulator's resource, with the key unless a token."""
    options: dict[str, Any] = {
        "provider": "azure_openai",
        "model": deployment,
        "base_url": emu.base_url("azure_openai"),
        "retry": ONCE,
        "request_timeout_s": 5.0,
    }
    options.update(fields)
    if "credentials" not in options:
        options.setdefault("api_key", KEY)
    return Config(**options)


async def async_token() -> str:
    """An async Entra ID token provider (the emulator takes the key as the token)."""
    return KEY


#: (id, Config fields): each API surface with each kind of credential.
SURFACES: list[tuple[str, dict[str, Any]]] = [
    ("v1-key", {}),
    ("dated-key", {"api_version": VERSION}),
    ("v1-token", {"credentials": lambda: KEY}),
    ("dated-async-token", {"api_version": VERSION, "credentials": async_token}),
]
