"""The ``local`` provider: an OpenAI-compatible server at ``Config.base_url``.

Text-like files are inlined, images and audio go as data URLs, tools and tool messages,
``json_schema`` structured output, streaming with usage and ``reasoning_content`` all follow the
Chat Completions conventions. Reasoning controls differ per server, so they are not declared:
send the server's own option through ``provider_options={"local": {...}}``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pollux._transport import TransportError
from pollux.config import LOCAL_BASE_URL_ENV_VAR
from pollux.errors import APIError, ConfigurationError
from pollux.providers._errors import is_unknown_model, readiness_message
from pollux.providers.base import Capabilities, ProviderReadiness
from pollux.providers.openai_compat.provider import ChatCompletionsProvider

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.transport import Transport

__all__ = ["CAPABILITIES", "LocalProvider"]

#: What a typical OpenAI-compatible server accepts. ``Config.capabilities`` overrides it.
CAPABILITIES = Capabilities(
    streaming=True,
    structured_outputs=True,
    reasoning=False,
    reasoning_budget_tokens=False,
    tools=True,
    conversation=True,
    uploads=True,
    seed=True,
    tool_result_errors=True,
)


class LocalProvider(ChatCompletionsProvider):
    """Chat Completions against a self-hosted server."""

    name = "local"
    CAPABILITIES = CAPABILITIES
    ALLOW_PDF = False
    ALLOW_AUDIO = True

    def __init__(self, config: Config, *, transport: Transport | None = None) -> None:
        if not config.base_url:
            raise ConfigurationError(
                "base_url required for provider='local'",
                hint=f"Pass base_url='http://localhost:8080/v1' or set {LOCAL_BASE_URL_ENV_VAR}.",
            )
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        super().__init__(config, base_url=config.base_url, headers=headers, transport=transport)

    def _status_error(self, status: int | None, body: Any, headers: Any, phase: str) -> Exception:
        error = super()._status_error(status, body, headers, phase)
        if (
            isinstance(error, APIError)
            and status is not None
            and (
                is_unknown_model(status, error.message)
                or (error.error_category == "not_found" and "model" in error.message.lower())
            )
        ):
            error.hint = (
                f"The server does not serve model {self.config.model!r}: list its models with "
                f"GET {self.base_url}/models, fix Config.model (ollama: `ollama pull "
                f"{self.config.model}`)."
            )
        return error

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """GET ``/models``: the server answers, and lists the configured model."""
        try:
            response = await self.pool.request(
                "GET", "/models", timeout_s=min(self._timeout_s, 10.0)
            )
        except TransportError as exc:
            return ProviderReadiness(
                ready=False,
                provider=self.name,
                model=model,
                message=f"No answer from {self.base_url} ({exc}). Start the server, or point "
                f"Config.base_url / {LOCAL_BASE_URL_ENV_VAR} at it.",
            )
        if response.status >= 400:
            return ProviderReadiness(
                ready=False,
                provider=self.name,
                status_code=response.status,
                model=model,
                message=readiness_message(
                    provider=self.name,
                    url=f"{self.base_url}/models",
                    status=response.status,
                    body=response.body,
                ),
            )
        try:
            data = json.loads(response.body)
            ids = [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            ids = []
        if model is None:
            return ProviderReadiness(
                ready=True,
                provider=self.name,
                status_code=response.status,
                message=f"{self.base_url} answers; no model configured, so none was checked.",
            )
        if model in ids:
            return ProviderReadiness(
                ready=True,
                provider=self.name,
                status_code=response.status,
                model=model,
                model_verified=True,
                message=f"{self.base_url} serves {model!r}.",
            )
        listed = ", ".join(ids[:10]) or "none"
        return ProviderReadiness(
            ready=False,
            provider=self.name,
            status_code=response.status,
            model=model,
            message=f"{self.base_url} answers but does not list {model!r} (models: {listed}). "
            "Fix Config.model or load the model on the server.",
        )
