"""The ``openrouter`` provider: Chat Completions plus the model catalog.

The catalog (``GET /models``) is read once per provider instance, that is once per Session (and
once per event loop for the module-level functions), and kept for :data:`CATALOG_TTL_S`. Every
request is checked against the model's entry before any upload or generation: unknown model,
missing ``tools`` / ``response_format`` / ``reasoning`` / ``seed`` support, or image input to a
text-only model raise ConfigurationError with a hint.

The API address is ``https://openrouter.ai/api/v1``; the ``OPENROUTER_BASE_URL`` environment
variable overrides it (proxies, tests against ``pollux.testing.Emulator``).
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pollux._transport import TransportError
from pollux.errors import APIError, ConfigurationError
from pollux.providers._errors import api_error, body_message, redirect_from
from pollux.providers.base import Capabilities, ProviderReadiness, ProviderRequest
from pollux.providers.openai_compat.provider import ChatCompletionsProvider

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.transport import Transport

__all__ = ["CAPABILITIES", "CATALOG_TTL_S", "DEFAULT_BASE_URL", "OpenRouterProvider"]

DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
CATALOG_TTL_S = 300.0

CAPABILITIES = Capabilities(
    streaming=True,
    structured_outputs=True,
    reasoning=True,
    reasoning_budget_tokens=False,
    tools=True,
    conversation=True,
    uploads=True,
    seed=True,
    tool_result_errors=True,
)

# Which catalog ``supported_parameters`` entry each request feature needs.
_PARAMETER_NEEDS = (
    ("tools", "tools", "tool calling"),
    ("response_format", "output", "structured output"),
    ("reasoning", "reasoning_effort", "reasoning_effort"),
    ("seed", "seed", "seed"),
    ("temperature", "temperature", "temperature"),
    ("top_p", "top_p", "top_p"),
    ("max_tokens", "max_tokens", "max_tokens"),
)


class OpenRouterProvider(ChatCompletionsProvider):
    """Chat Completions against OpenRouter, checked against its model catalog."""

    name = "openrouter"
    CAPABILITIES = CAPABILITIES
    ALLOW_PDF = True
    ALLOW_AUDIO = False

    def __init__(self, config: Config, *, transport: Transport | None = None) -> None:
        base_url = os.environ.get("OPENROUTER_BASE_URL") or DEFAULT_BASE_URL
        headers = {
            "Authorization": f"Bearer {config.api_key}",
            "X-Title": "pollux",
        }
        super().__init__(config, base_url=base_url, headers=headers, transport=transport)
        self._catalog: dict[str, Mapping[str, Any]] | None = None
        self._catalog_at = 0.0
        self._catalog_lock: asyncio.Lock | None = None
        self.catalog_fetches = 0

    def extra_payload(self, request: ProviderRequest) -> dict[str, Any] | None:
        """``reasoning: {effort}`` when reasoning_effort is set."""
        effort = request.requirements.reasoning_effort
        return {"reasoning": {"effort": effort}} if effort is not None else None

    async def catalog(self) -> dict[str, Mapping[str, Any]]:
        """The model catalog by id, fetched at most once per TTL (single-flight)."""
        if self._catalog is not None and time.monotonic() - self._catalog_at < CATALOG_TTL_S:
            return self._catalog
        if self._catalog_lock is None:
            self._catalog_lock = asyncio.Lock()
        async with self._catalog_lock:
            if self._catalog is not None and time.monotonic() - self._catalog_at < CATALOG_TTL_S:
                return self._catalog
            self.catalog_fetches += 1
            try:
                response = await self.pool.request("GET", "/models", timeout_s=self._timeout_s)
            except TransportError as exc:
                raise self._network_error(exc, "metadata") from exc
            redirect = redirect_from(
                provider=self.name,
                phase="metadata",
                status=response.status,
                headers=response.headers,
            )
            if redirect is not None:
                raise redirect
            if response.status >= 400:
                raise api_error(
                    provider=self.name,
                    phase="metadata",
                    status_code=response.status,
                    message=body_message(response.body),
                    headers=response.headers,
                )
            try:
                entries = json.loads(response.body).get("data", [])
            except (ValueError, AttributeError) as exc:
                raise APIError(
                    "openrouter returned a model catalog that is not JSON",
                    hint="Retry later; check OPENROUTER_BASE_URL if you set it.",
                    provider=self.name,
                    phase="metadata",
                    retryable=True,
                ) from exc
            self._catalog = {
                str(entry.get("id")): entry for entry in entries if isinstance(entry, Mapping)
            }
            self._catalog_at = time.monotonic()
            return self._catalog

    async def preflight(self, request: ProviderRequest) -> None:
        """Check the model and the request's features against the catalog."""
        catalog = await self.catalog()
        model = request.model or ""
        entry = catalog.get(model)
        if entry is None:
            raise ConfigurationError(
                f"OpenRouter does not list the model {model!r}",
                hint=_unknown_model_hint(model, catalog),
            )
        supported = entry.get("supported_parameters")
        params = set(supported) if isinstance(supported, list) else None
        req = request.requirements
        used = {
            "tools": bool(request.tools),
            "output": req.output_schema is not None,
            "reasoning_effort": req.reasoning_effort is not None,
            "seed": req.seed is not None,
            "temperature": req.temperature is not None,
            "top_p": req.top_p is not None,
            "max_tokens": req.max_tokens is not None,
        }
        if params is not None:
            for parameter, feature, label in _PARAMETER_NEEDS:
                if used[feature] and parameter not in params:
                    if parameter == "response_format" and "structured_outputs" in params:
                        continue
                    raise ConfigurationError(
                        f"OpenRouter model {model!r} does not support {label}",
                        hint="Pick a model whose supported_parameters include "
                        f"{parameter!r}, or drop the argument.",
                    )
        architecture = entry.get("architecture")
        modalities = (
            architecture.get("input_modalities") if isinstance(architecture, Mapping) else None
        )
        if isinstance(modalities, list):
            for source in request.sources.sources:
                if source.mime_type.startswith("image/") and "image" not in modalities:
                    raise ConfigurationError(
                        f"OpenRouter model {model!r} does not accept images",
                        hint="Pick a vision model, or drop the image sources.",
                    )

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Read the catalog and look the model up."""
        try:
            catalog = await self.catalog()
        except APIError as exc:
            return ProviderReadiness(
                ready=False,
                provider=self.name,
                status_code=exc.status_code,
                model=model,
                message=f"{exc} ({exc.hint})",
            )
        if model in catalog:
            return ProviderReadiness(
                ready=True,
                provider=self.name,
                status_code=200,
                model=model,
                model_verified=True,
                message=f"OpenRouter lists {model!r}.",
            )
        return ProviderReadiness(
            ready=False,
            provider=self.name,
            status_code=200,
            model=model,
            message=f"OpenRouter does not list {model!r}; check the model id.",
        )


def _unknown_model_hint(model: str, catalog: Mapping[str, Any]) -> str:
    """Name the listed ids closest to ``model``, or a few listed ones; never ``model`` itself."""
    # A fixed example would suggest the very model refused when the catalog (a gateway's, or
    # the emulator's through OPENROUTER_BASE_URL) does not list it.
    close = difflib.get_close_matches(model, list(catalog), n=3, cutoff=0.6)
    if close:
        return f"Did you mean {' or '.join(map(repr, close))}? The ids are case-sensitive."
    listed = ["openai/gpt-4o-mini"] if "openai/gpt-4o-mini" in catalog else sorted(catalog)[:3]
    if not listed:
        return "The model catalog is empty; check OPENROUTER_BASE_URL if you set it."
    more = ", ..." if len(catalog) > len(listed) else ""
    return (
        "Use a model id the catalog lists (https://openrouter.ai/models, or the catalog at "
        f"OPENROUTER_BASE_URL if you set it), such as {', '.join(map(repr, listed))}{more}."
    )
