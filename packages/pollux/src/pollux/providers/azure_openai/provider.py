"""The ``azure_openai`` provider: the Responses API of an Azure OpenAI resource.

Azure serves the OpenAI models behind its own endpoint, deployment names and credentials; the
request and response bodies are OpenAI's. So :class:`AzureOpenAIProvider` is the OpenAI
provider (:class:`pollux.providers.openai.provider.OpenAIProvider`: compile, extract, stream
mapping, uploads, continuations, the direct path through the Session's transport) with only
what differs stated here:

* addressing: ``Config.base_url`` is the resource endpoint (``https://<resource>.openai.azure.com``)
  and ``Config.model`` the deployment name, which Azure's Responses API takes as ``model``.
  Without ``Config.api_version`` calls go to Azure's v1 API (``<endpoint>/openai/v1/responses``,
  no ``api-version``) through the SDK's ``AsyncOpenAI``; with one, to
  ``<endpoint>/openai/responses?api-version=...`` through the SDK's ``AsyncAzureOpenAI``.
* credentials: a resource key in the ``api-key`` header, or an Entra ID token provider
  (``Config(credentials=...)``) whose fresh token goes in ``Authorization: Bearer`` on every
  request (:mod:`.auth`).
* errors: the OpenAI mapping, relabelled, with hints that name the endpoint, deployment,
  api-version and credential (:mod:`.errors`).
* deferred delivery: Azure's global batch, on a Global-Batch deployment named by
  ``Config.model`` (:mod:`.deferred`).
* the served model: a response names the model behind the deployment
  (``"gpt-5-mini-2025-08-07"``); it is kept as ``artifacts["model_version"]`` (where Gemini keeps
  its own) and prices the call (:mod:`pollux._pricing`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pollux.errors import ConfigurationError, PolluxError
from pollux.providers._direct import sdk_headers
from pollux.providers.base import (
    Capabilities,
    PreparedSources,
    ProviderReadiness,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
)
from pollux.providers.openai.extract import extract_response
from pollux.providers.openai.provider import CAPABILITIES as OPENAI_CAPABILITIES
from pollux.providers.openai.provider import OpenAIProvider
from pollux.providers.openai.stream import ResponsesStreamMapper

from .auth import TokenHeaders
from .deferred import AzureBatches
from .errors import PROVIDER, AzureTarget, relabel, wrap_azure_error

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.source import Source
    from pollux.transport import Transport

__all__ = ["CAPABILITIES", "AzureOpenAIProvider", "endpoint_of"]

#: The OpenAI table (deferred delivery is Azure's global batch: see :mod:`.deferred`).
CAPABILITIES: Capabilities = OPENAI_CAPABILITIES


def endpoint_of(base_url: str) -> str:
    """The resource endpoint of ``base_url``, whether or not it ends in ``/openai[/v1]``."""
    endpoint = base_url.rstrip("/")
    for suffix in ("/openai/v1", "/openai"):
        if endpoint.endswith(suffix):
            return endpoint[: -len(suffix)]
    return endpoint


class AzureOpenAIProvider(OpenAIProvider):
    """Azure OpenAI's Responses API (``Config(provider="azure_openai", model=<deployment>)``)."""

    name = PROVIDER
    CAPABILITIES = CAPABILITIES

    def __init__(
        self, config: Config, *, client: Any = None, transport: Transport | None = None
    ) -> None:
        """Keep the config; the SDK client is built on first use.

        Args:
            config: The session's configuration (endpoint in ``base_url``, deployment in
                ``model``, ``api_version``, ``api_key`` or ``credentials``).
            client: An ``AsyncOpenAI``-compatible client to use instead (tests).
            transport: The Session's transport (None: a private one, closed with the provider).
        """
        super().__init__(config, client=client, transport=transport)
        self._endpoint = endpoint_of(config.base_url or "")
        self._version = config.api_version
        self._tokens = TokenHeaders(config.credentials) if config.credentials is not None else None
        self._target = AzureTarget(
            self._endpoint, config.model or "", self._version, self._tokens is not None
        )
        if self._tokens is not None:
            self._request_auth = self._tokens.headers
        if self._version is not None:
            self._responses_path = f"/responses?api-version={quote(self._version, safe='')}"

    # ------------------------------------------------------------------ client

    def _batch_backend(self) -> AzureBatches:
        # Built before ``__init__`` above sets the target: the backend reads it when it needs it.
        return AzureBatches(
            self._sdk,
            self.compile,
            target=lambda: self._target,
            model=self._config.model or "",
            timeout_s=self._config.request_timeout_s,
        )

    def _build_client(self) -> Any:
        try:
            from openai import AsyncAzureOpenAI, AsyncOpenAI
        except ImportError as exc:  # pragma: no cover - openai is a pollux dependency
            raise ConfigurationError(
                "provider='azure_openai' needs the openai package",
                hint='Install it: pip install "openai>=2"',
            ) from exc
        common: dict[str, Any] = {
            "max_retries": 0,
            "timeout": self._config.request_timeout_s,
            "http_client": self._http.httpx_client(),
        }
        tokens = self._tokens
        if self._version is None:
            # Azure's v1 API is OpenAI's client on the resource's /openai/v1, with the key or
            # the token as the bearer credential (Microsoft's documented use of it).
            credential: Any = tokens.token if tokens is not None else self._config.api_key
            return AsyncOpenAI(api_key=credential, base_url=f"{self._endpoint}/openai/v1", **common)
        if tokens is not None:
            common["azure_ad_token_provider"] = tokens.token
        else:
            common["api_key"] = self._config.api_key
        return AsyncAzureOpenAI(azure_endpoint=self._endpoint, api_version=self._version, **common)

    def _extract(self, data: Any) -> ProviderResponse:
        return extract_response(data, served_model=True)

    def _stream_mapper(self) -> ResponsesStreamMapper:
        return ResponsesStreamMapper(served_model=True)

    def _direct_target(self, client: Any) -> tuple[str, dict[str, str]]:
        # The SDK client's own headers, so both paths authenticate alike: a key as the bearer
        # credential on the v1 API, in ``api-key`` on a dated one. A token is not read from the
        # client: it is fetched for every request (``_request_auth``).
        headers = sdk_headers({**client.default_headers, **client.auth_headers})
        if self._tokens is not None:
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        base = (
            f"{self._endpoint}/openai/v1" if self._version is None else f"{self._endpoint}/openai"
        )
        return base, headers

    def _wrap(self, exc: BaseException, *, phase: str) -> PolluxError:
        return wrap_azure_error(
            exc, target=self._target, phase=phase, timeout_s=self._config.request_timeout_s
        )

    # -------------------------------------------------------- relabelled checks

    def validate(self, request: ProviderRequest) -> None:
        """Reject, before any I/O, what Azure's Responses API cannot honour."""
        try:
            super().validate(request)
        except PolluxError as exc:
            relabel(exc)
            raise

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Inline text, upload files (the resource's Files API), link URLs."""
        try:
            return await super().prepare_sources(sources)
        except PolluxError as exc:
            relabel(exc, self._target)
            raise

    async def execute(self, compiled: Any) -> ProviderResponse:
        """Create one response (the OpenAI provider's call; its errors relabelled)."""
        try:
            return await super().execute(compiled)
        except PolluxError as exc:
            relabel(exc, self._target)
            raise

    async def stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        """Stream one response (the OpenAI provider's stream; its errors relabelled)."""
        inner = super().stream(compiled)
        try:
            async for chunk in inner:
                yield chunk
        except PolluxError as exc:
            # The stream mapper reports a failed response in OpenAI's name.
            relabel(exc, self._target)
            raise
        finally:
            # Leaving early closes the OpenAI stream now (its connection), not at collection.
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Ask the resource for its model list: the endpoint, version and credentials answer.

        Azure lists models, not deployments, so the deployment itself is not verified
        (``model_verified`` stays False); the first call reports a missing one, with a hint.
        """
        target = model or self._config.model
        try:
            await self._sdk().models.list()
        except Exception as exc:
            error = self._wrap(exc, phase="metadata")
            return ProviderReadiness(
                ready=False,
                provider=PROVIDER,
                status_code=getattr(error, "status_code", None),
                message=f"{error} ({error.hint})" if error.hint else str(error),
                model=target,
            )
        return ProviderReadiness(
            ready=True,
            provider=PROVIDER,
            status_code=200,
            message=f"{self._endpoint} answered with these credentials; deployment {target!r} "
            "is not verified (Azure lists models, not deployments)",
            model=target,
        )
