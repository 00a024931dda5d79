"""The ``vertex`` provider: Gemini models on Vertex AI, through ``google-genai`` (Vertex mode).

Vertex AI serves the Gemini models behind its own endpoints, paths, credentials and quotas; the
request and response bodies are the Gemini API's. So :class:`VertexProvider` is the Gemini
provider (:class:`pollux.providers.gemini.provider.GeminiProvider`: compile, extract, stream
mapping, continuations, context caches, the direct path through the Session's transport) with
only what differs stated here, through the Gemini provider's named hooks:

* addressing (``_build_client``, ``_model_resource``): ``genai.Client(vertexai=True, project,
  location)``; calls go to ``{base}/v1beta1/projects/{project}/locations/{location}/publishers/
  google/models/{model}:generateContent``. The base URL is ``Config.base_url``, else
  ``GOOGLE_VERTEX_BASE_URL`` (which the SDK reads too), else the SDK's regional endpoint
  (``https://{location}-aiplatform.googleapis.com``, ``https://aiplatform.googleapis.com``
  for ``global``). A full resource name as the model (``projects/.../models/...``) is used
  as it is.
* credentials (``_request_auth``, :mod:`.auth`): the Application Default Credentials or
  ``Config(credentials=...)``, one object shared with the SDK client, its token sent as
  ``Authorization: Bearer`` and registered with the scrubber.
* sources (``_new_uploads``, ``_validate_sources``, :mod:`.sources`): no Files API; local files
  go inline up to a size limit, ``gs://`` and web URIs by reference.
* caches (``_new_caches``, :mod:`.caching`): ``cachedContents`` under the project and location.
* errors (``_wrap``, :mod:`.errors`): the Gemini mapping, relabelled, with hints that name the
  project, location, model and credentials.
* deferred delivery (:mod:`.batches`, :mod:`.storage`): Vertex AI batch prediction, its JSONL
  staged under ``Config.staging_uri`` in Cloud Storage. Without a staging URI ``defer`` is
  refused before any I/O, with a hint; inspecting, collecting and cancelling need none.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError, PolluxError
from pollux.providers.base import (
    Capabilities,
    PreparedSources,
    ProviderReadiness,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
)
from pollux.providers.gemini.provider import CAPABILITIES as GEMINI_CAPABILITIES
from pollux.providers.gemini.provider import GeminiProvider

from .auth import VertexAuth
from .batches import VertexBatches
from .caching import VertexCaches
from .errors import PROVIDER, VertexTarget, relabel, wrap_vertex_error
from .sources import VertexSources, validate_sources
from .storage import CloudStorage

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.environment import CachePolicy
    from pollux.source import Source
    from pollux.transport import Transport

__all__ = ["CAPABILITIES", "VertexProvider", "cache_account", "default_endpoint"]

#: Gemini's table (checked before I/O); ``defer`` needs ``Config.staging_uri`` too.
CAPABILITIES: Capabilities = GEMINI_CAPABILITIES


def default_endpoint(location: str) -> str:
    """Vertex AI's endpoint for ``location``, as the SDK builds it."""
    if location == "global":
        return "https://aiplatform.googleapis.com"
    return f"https://{location}-aiplatform.googleapis.com"


def cache_account(project: str, config: Config) -> str:
    """The account in a Vertex AI cache's identity: project, location and endpoint."""
    location = config.location or "global"
    endpoint = (config.base_url or default_endpoint(location)).rstrip("/")
    return f"vertex|{project}|{location}|{endpoint}"


class VertexProvider(GeminiProvider):
    """Gemini on Vertex AI (``Config(provider="vertex", model=..., project=..., location=...)``)."""

    name = PROVIDER
    CAPABILITIES = CAPABILITIES

    def __init__(
        self, config: Config, *, client: Any = None, transport: Transport | None = None
    ) -> None:
        """Keep the config; credentials are loaded and the SDK client built on first use.

        Args:
            config: The session's configuration (``model``, ``project``, ``location``,
                ``credentials``, ``base_url``).
            client: A ``genai.Client(vertexai=True, ...)``-compatible client to use instead
                (tests); every call then goes through it.
            transport: The Session's transport (None: a private one, closed with the provider).
        """
        self._auth = VertexAuth(config.credentials, config.project)
        self._location = config.location or "global"
        self._endpoint = (config.base_url or default_endpoint(self._location)).rstrip("/")
        super().__init__(config, client=client, transport=transport)
        # Every direct call sends a fresh bearer token (the skeleton's per-request auth hook).
        self._request_auth = self._auth.headers
        self._storage = CloudStorage(
            self._http, self._auth.headers, timeout_s=config.request_timeout_s
        )
        self._batches = VertexBatches(
            self._sdk,
            self.compile,
            self._storage,
            ready=self._ready,
            wrap=self._wrap,
            model=config.model or "",
            staging_uri=config.staging_uri,
            scope=self._scope,
        )

    # --------------------------------------------------------------- the hooks

    def _build_client(self) -> Any:
        try:
            from google import genai
            from google.genai import types
        except ImportError as exc:  # pragma: no cover - google-genai is a pollux dependency
            raise ConfigurationError(
                "provider='vertex' needs the google-genai package",
                hint='Install it: pip install "google-genai>=1.61"',
            ) from exc
        options: dict[str, Any] = {
            "timeout": int(self._config.request_timeout_s * 1000),
            "retry_options": types.HttpRetryOptions(attempts=1),
            "httpx_async_client": self._http.httpx_client(),
            "client_args": {"verify": self._http.ssl_context()},
            "async_client_args": {"ssl": self._http.ssl_context()},
        }
        if self._config.base_url:
            options["base_url"] = self._config.base_url
        # Project and location are always passed explicitly: with a base URL from the
        # environment alone, the SDK would drop them from the paths.
        return genai.Client(
            vertexai=True,
            project=self._project(),
            location=self._location,
            credentials=self._auth.credentials,
            http_options=types.HttpOptions(**options),
        )

    def _new_uploads(self) -> Any:
        return VertexSources()

    def _new_caches(self) -> Any:
        return VertexCaches(self._sdk, self.uploads, self._config, self._account)

    def _validate_sources(self, sources: Sequence[Source]) -> None:
        try:
            validate_sources(sources)
        except PolluxError as exc:
            relabel(exc)
            raise

    def _model_resource(self, model: str) -> str:
        if model.startswith("projects/"):
            return model
        tail = model if model.startswith("publishers/") else f"publishers/google/models/{model}"
        return f"projects/{self._project()}/locations/{self._location}/{tail}"

    def _wrap(self, exc: BaseException, *, phase: str) -> PolluxError:
        return wrap_vertex_error(
            exc, target=self._target(), phase=phase, timeout_s=self._config.request_timeout_s
        )

    # ------------------------------------------------------------------ helpers

    def _project(self) -> str:
        project = self._auth.project
        if project is None:  # pragma: no cover - every entry point settles it first
            raise ConfigurationError(
                "provider='vertex' needs a Google Cloud project",
                hint="Pass Config(project='<project id>') or set GOOGLE_CLOUD_PROJECT.",
            )
        return project

    def _scope(self) -> str:
        return f"projects/{self._project()}/locations/{self._location}"

    def _account(self) -> str:
        return cache_account(self._project(), self._config)

    def _target(self) -> VertexTarget:
        return VertexTarget(
            project=self._auth.project or "<unset>",
            location=self._location,
            model=self._config.model or "",
            endpoint=self._endpoint,
            injected=self._auth.injected,
        )

    async def _ready(self, phase: str) -> None:
        """Settle credentials and project before the client is built (off the event loop)."""
        try:
            await self._auth.ready()
        except Exception as exc:
            raise self._wrap(exc, phase=phase) from exc

    # --------------------------------------------- entry points (credentials first)

    async def warm(self) -> None:
        """Import the SDK and load the credentials before the first call's deadline starts.

        Best effort: a call served without Vertex (a pollard replay) needs no credentials, and
        a call that does reach Vertex reports missing ones itself, with the hint.
        """
        await super().warm()
        with contextlib.suppress(Exception):
            await self._auth.ready()

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Inline text and small files, link ``gs://`` and web URIs (see :mod:`.sources`)."""
        try:
            return await super().prepare_sources(sources)
        except PolluxError as exc:
            relabel(exc, self._target())
            raise

    async def prepare_cache(self, request: ProviderRequest, policy: CachePolicy) -> PreparedSources:
        """Find or create the environment's ``cachedContents`` in the project and location."""
        await self._ready("cache")
        try:
            await self._auth.token()  # the SDK then finds a fresh, registered token
            return await super().prepare_cache(request, policy)
        except PolluxError as exc:
            relabel(exc, self._target())
            raise
        except Exception as exc:
            raise self._wrap(exc, phase="cache") from exc

    async def execute(self, compiled: Any) -> ProviderResponse:
        """Generate one response (the Gemini provider's call; errors relabelled)."""
        await self._ready("generate")
        try:
            return await super().execute(compiled)
        except PolluxError as exc:
            relabel(exc, self._target())
            raise

    async def stream(self, compiled: Any) -> AsyncIterator[StreamChunk]:
        """Stream one response (the Gemini provider's stream; errors relabelled)."""
        await self._ready("stream")
        inner = super().stream(compiled)
        try:
            async for chunk in inner:
                yield chunk
        except PolluxError as exc:
            relabel(exc, self._target())
            raise
        finally:
            # Leaving early closes the Gemini stream now (its connection), not at collection.
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Count tokens with the model (free): credentials, project, location and model answer.

        The probe is ``.../publishers/google/models/{model}:countTokens`` on the endpoint calls
        use, so a model missing from the location is reported with the hint that says so.
        """
        target = model or self._config.model
        try:
            await self._auth.ready()
            await self._auth.token()
            await self._sdk().aio.models.count_tokens(model=target, contents="ready?")
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
            message=f"model {target!r} answers in project {self._project()!r}, location "
            f"{self._location!r} at {self._endpoint}",
            model=target,
            model_verified=True,
        )
