"""Configuration: which provider and model to call, with which credentials and limits."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from ._scrub import register_secret
from .errors import ConfigurationError
from .quota import CallQuota
from .retry import RetryPolicy

__all__ = ["KNOWN_CAPABILITIES", "PROVIDER_NAMES", "Config", "ProviderName", "resolve_api_key"]

ProviderName = Literal[
    "gemini", "openai", "anthropic", "openrouter", "local", "azure_openai", "vertex"
]
"""The provider names :class:`Config` accepts."""

PROVIDER_NAMES: tuple[str, ...] = get_args(ProviderName)

#: Capability names that ``Config.capabilities`` may override: every flag of the providers'
#: ``Capabilities`` table (``pollux.providers.base`` checks at import that the two agree).
KNOWN_CAPABILITIES: frozenset[str] = frozenset(
    {
        "conversation",
        "deferred_delivery",
        "implicit_caching",
        "max_tokens",
        "persistent_cache",
        "prompt_cache_ttl",
        "reasoning",
        "reasoning_budget_tokens",
        "seed",
        "streaming",
        "structured_outputs",
        "temperature",
        "tool_result_errors",
        "tools",
        "top_p",
        "uploads",
    }
)

KEY_MISSING = "API key required for "
"""How every missing-key `ConfigurationError` begins, the provider name next (the CLI reads it
to name the variable a shell user sets instead of the library's ``api_key=...`` hint)."""

API_KEY_ENV_VARS: Mapping[str, str] = MappingProxyType(
    {
        "gemini": "GEMINI_API_KEY",
        "openai": "OPENAI_API_KEY",
        "anthropic": "ANTHROPIC_API_KEY",
        "openrouter": "OPENROUTER_API_KEY",
        "azure_openai": "AZURE_OPENAI_API_KEY",
    }
)
LOCAL_BASE_URL_ENV_VAR = "POLLUX_LOCAL_BASE_URL"
#: The key a key-protected local server wants (sent as ``Authorization: Bearer``), when
#: ``api_key`` is not passed.
LOCAL_API_KEY_ENV_VAR = "POLLUX_LOCAL_API_KEY"
#: The Azure OpenAI resource endpoint when ``Config(base_url=...)`` is unset (the SDK's name).
AZURE_ENDPOINT_ENV_VAR = "AZURE_OPENAI_ENDPOINT"
#: The dated Azure OpenAI ``api-version`` when ``Config(api_version=...)`` is unset (the SDK's
#: name); neither set means Azure's v1 API, which takes none.
AZURE_API_VERSION_ENV_VAR = "OPENAI_API_VERSION"
#: The model an Azure OpenAI deployment serves, for prices, when ``Config(pricing_model=...)``
#: is unset (pollux's own name: Azure has no variable for it).
AZURE_PRICING_MODEL_ENV_VAR = "POLLUX_AZURE_PRICING_MODEL"
#: The Google Cloud project of ``provider="vertex"`` when ``Config(project=...)`` is unset (the
#: google-genai SDK's name); without either, the Application Default Credentials' project.
VERTEX_PROJECT_ENV_VAR = "GOOGLE_CLOUD_PROJECT"
#: The Vertex AI location when ``Config(location=...)`` is unset (the SDK's name); without
#: either, ``"global"``, as the SDK defaults.
VERTEX_LOCATION_ENV_VAR = "GOOGLE_CLOUD_LOCATION"
#: Where Vertex AI calls go when ``Config(base_url=...)`` is unset (the SDK reads it too): a
#: gateway, a private endpoint or :class:`pollux.testing.Emulator`.
VERTEX_BASE_URL_ENV_VAR = "GOOGLE_VERTEX_BASE_URL"
#: The Cloud Storage prefix of Vertex AI batch jobs when ``Config(staging_uri=...)`` is unset.
VERTEX_STAGING_URI_ENV_VAR = "POLLUX_VERTEX_STAGING_URI"
#: The location Vertex AI calls use when neither ``location`` nor the variable says one.
VERTEX_DEFAULT_LOCATION = "global"


class _Capabilities(Mapping[str, bool]):
    """A read-only private copy of capability overrides.

    Unlike ``types.MappingProxyType`` it pickles and deep-copies, so a ``Config`` with overrides
    still crosses process boundaries and works with ``copy.deepcopy``/``dataclasses.asdict``.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, bool]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> bool:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return repr(self._data)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Capabilities, (self._data,))


def _parse_dotenv(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def _find_dotenv(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / ".env"
        if candidate.is_file():
            return candidate
    return None


def _dotenv_value(name: str) -> str | None:
    # Read ``.env`` from the working directory or its nearest parent. The file is read on
    # demand and os.environ is never modified.
    try:
        path = _find_dotenv(Path.cwd())
        if path is None:
            return None
        return _parse_dotenv(path.read_text(encoding="utf-8")).get(name) or None
    except (OSError, UnicodeDecodeError):
        return None


def _env_value(name: str) -> str | None:
    value = os.environ.get(name)
    if value:
        return value
    return _dotenv_value(name)


def resolve_api_key(provider: str) -> str | None:
    """Return the API key for ``provider`` from the environment or a ``.env`` file.

    The process environment wins over ``.env``. ``os.environ`` is never modified.

    Args:
        provider: A cloud provider name (``"gemini"``, ``"openai"``, ...).

    Returns:
        The key, or ``None`` when neither source has one (always ``None`` for ``"local"``).
    """
    env_var = API_KEY_ENV_VARS.get(provider)
    return _env_value(env_var) if env_var else None


@dataclass(frozen=True)
class Config:
    """Immutable configuration for pollux execution.

    Provider and model are required for cloud providers: pollux does not guess. Local
    OpenAI-compatible servers may omit ``model`` when the server does not need one. API keys
    are resolved from ``GEMINI_API_KEY``, ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY`` or
    ``OPENROUTER_API_KEY`` (or a ``.env`` file) when not passed. ``repr``/``str`` never show
    the key. Gemini's endpoint comes from the SDK's variables: ``GOOGLE_GEMINI_BASE_URL`` (a
    gateway, a proxy, the emulator) and ``GOOGLE_GENAI_API_VERSION`` (``v1`` by default;
    ``v1beta`` for a gateway that serves only that, such as LiteLLM's Gemini route).

    Args:
        provider: ``"gemini"``, ``"openai"``, ``"anthropic"``, ``"openrouter"``, ``"local"``
            or ``"azure_openai"``.
        model: The provider's model name; optional only for ``provider="local"``. For
            ``"azure_openai"`` it is the deployment name.
        api_key: Resolved from the provider's environment variable when ``None``
            (``POLLUX_LOCAL_API_KEY`` for ``provider="local"``, where no key is required).
        base_url: Required for ``provider="local"`` (falls back to ``POLLUX_LOCAL_BASE_URL``)
            and ``provider="azure_openai"`` (the resource endpoint,
            ``https://<resource>.openai.azure.com``; falls back to ``AZURE_OPENAI_ENDPOINT``);
            rejected for the providers with a fixed endpoint.
        use_mock: Use the offline mock provider (no key, no network).
        request_concurrency: How many calls may run at once (an integer >= 1).
        request_timeout_s: HTTP request timeout in seconds (> 0).
        retry: The :class:`RetryPolicy` for provider calls.
        capabilities: Overrides of the provider's declared capabilities, by name. A declared
            value wins over the provider's static value; undeclared ones fall back to it.
        quota: A provider rate limit every attempt waits for (:class:`pollux.LocalQuota` for
            one process, ``pollard.adapters.pollux.SharedQuota`` for many workers and hosts);
            see :mod:`pollux.quota`. ``None`` (default): only the provider's 429s pace calls.
        api_version: ``provider="azure_openai"`` only: a dated Azure ``api-version``
            (``"2025-04-01-preview"``; falls back to ``OPENAI_API_VERSION``). Unset, pollux
            uses Azure's v1 API (``<endpoint>/openai/v1``), which takes none.
        credentials: ``provider="azure_openai"``: a Microsoft Entra ID token provider
            (a callable returning a bearer token, sync or async, such as
            ``azure.identity.get_bearer_token_provider(...)``), used instead of an API key and
            called for every request. ``provider="vertex"``: a ``google.auth`` credentials
            object (``google.oauth2.service_account.Credentials``, ...) used instead of the
            Application Default Credentials. A Config holding one pickles only if it does.
        project: ``provider="vertex"`` only: the Google Cloud project (falls back to
            ``GOOGLE_CLOUD_PROJECT``, then to the Application Default Credentials' project,
            read at the first call).
        location: ``provider="vertex"`` only: the Vertex AI location (``"us-central1"``,
            ``"europe-west4"``, ``"global"``; falls back to ``GOOGLE_CLOUD_LOCATION``, then
            ``"global"``).
        staging_uri: ``provider="vertex"`` only: a ``gs://bucket/prefix`` where deferred
            delivery (Vertex AI batch prediction) writes each job's JSONL input and Vertex
            writes its predictions (falls back to ``POLLUX_VERTEX_STAGING_URI``). Unset,
            ``defer`` is refused before any I/O.
        pricing_model: ``provider="azure_openai"`` only: the model the deployment serves, as
            genai-prices names it (``"gpt-5-mini"``; falls back to
            ``POLLUX_AZURE_PRICING_MODEL``). It prices a call *before* it is made (a hard
            dollar cap's worst case, ``pollux --max-usd``, a deferred job's reservation); after
            the call, the model the response names is priced. Nothing is sent with it. Unset,
            a deployment not named like a model cannot be priced before the call.

    Raises:
        ConfigurationError: An invalid field, or a missing key/base_url; the hint says how to
            fix it.

    Example:
        >>> Config(provider="gemini", model="gemini-2.5-flash", api_key="secret")
        Config(provider='gemini', model='gemini-2.5-flash', api_key=[REDACTED], base_url=None, \
use_mock=False)
    """

    provider: ProviderName
    model: str | None = None
    api_key: str | None = None
    base_url: str | None = None
    use_mock: bool = False
    request_concurrency: int = 6
    request_timeout_s: float = 300.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    capabilities: Mapping[str, bool] | None = None
    quota: CallQuota | None = None
    api_version: str | None = None
    credentials: Any = None
    project: str | None = None
    location: str | None = None
    staging_uri: str | None = None
    pricing_model: str | None = None

    def __post_init__(self) -> None:
        """Validate the fields and resolve credentials."""
        if self.provider not in PROVIDER_NAMES:
            raise ConfigurationError(
                f"Unknown provider: {self.provider!r}",
                hint="Supported providers: " + ", ".join(repr(p) for p in PROVIDER_NAMES),
            )
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigurationError(
                f"model must be a non-empty string, got {self.model!r}",
                hint="Pass the provider's model name, for example model='gpt-5-nano'.",
            )
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise ConfigurationError(
                f"api_key must be a string, got {type(self.api_key).__name__}",
                hint="Pass the key as a string, or leave it unset to read it from the environment.",
            )
        if not isinstance(self.use_mock, bool):
            raise ConfigurationError(
                f"use_mock must be a bool, got {self.use_mock!r}",
                hint="Pass use_mock=True for the offline mock provider.",
            )
        # The key (given now, or resolved below) is scrubbed from every error, hint and
        # diagnostic pollux builds, wherever a server echoes it.
        register_secret(self.api_key, self)
        self._validate_limits()
        self._validate_capabilities()
        self._validate_quota()
        self._validate_cloud_fields()

        if self.provider == "local":
            self._resolve_local()
            return
        if self.provider == "azure_openai":
            self._resolve_azure()
            return
        if self.provider == "vertex":
            self._resolve_vertex()
            return

        if self.model is None:
            raise ConfigurationError(
                f"model required for provider={self.provider!r}",
                hint="Pass the provider's model name, for example model='gpt-5-nano'.",
            )
        if self.base_url is not None:
            raise ConfigurationError(
                f"base_url is only valid for provider='local', 'azure_openai' or 'vertex', not "
                f"{self.provider!r}",
                hint="Remove base_url, or use provider='local' for an OpenAI-compatible server "
                "(provider='azure_openai' for an Azure OpenAI endpoint).",
            )
        if self.api_key is None and not self.use_mock:
            object.__setattr__(self, "api_key", resolve_api_key(self.provider))
            register_secret(self.api_key, self)
        if not self.use_mock and not self.api_key:
            env_var = API_KEY_ENV_VARS[self.provider]
            raise ConfigurationError(
                f"{KEY_MISSING}{self.provider}",
                hint=f"Set the {env_var} environment variable (or put it in .env), "
                "pass api_key=..., or use use_mock=True for offline runs.",
            )

    def _validate_limits(self) -> None:
        concurrency = self.request_concurrency
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise ConfigurationError(
                f"request_concurrency must be an integer, got {type(concurrency).__name__}",
                hint="Pass a whole number >= 1 for request_concurrency.",
            )
        if concurrency < 1:
            raise ConfigurationError(
                f"request_concurrency must be >= 1, got {concurrency}",
                hint="This controls how many API calls run in parallel; use 1 or more.",
            )
        timeout = self.request_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ConfigurationError(
                f"request_timeout_s must be numeric, got {type(timeout).__name__}",
                hint="Pass a timeout in seconds, for example request_timeout_s=600.",
            )
        if not timeout > 0:
            raise ConfigurationError(
                f"request_timeout_s must be > 0, got {timeout}",
                hint="Pass a positive timeout in seconds.",
            )
        try:
            float(timeout)
        except OverflowError:
            # A huge integer (10**400 from a JSON or TOML file) would raise OverflowError in
            # the first call's timer instead of here.
            raise ConfigurationError(
                "request_timeout_s is too large to be a number of seconds",
                hint="Pass a timeout in seconds, for example request_timeout_s=600.",
            ) from None
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError(
                f"retry must be a RetryPolicy, got {type(self.retry).__name__}",
                hint="Pass retry=RetryPolicy(max_attempts=3), for example.",
            )

    def _validate_quota(self) -> None:
        quota = self.quota
        if quota is None:
            return
        missing = [
            name for name in ("acquire", "pause") if not callable(getattr(quota, name, None))
        ]
        if missing:
            raise ConfigurationError(
                f"quota must have async acquire() and pause() methods, got "
                f"{type(quota).__name__} without {' and '.join(missing)}",
                hint="Pass quota=pollux.LocalQuota(requests_per_minute=..., "
                "tokens_per_minute=...), or pollard.adapters.pollux.SharedQuota(...) for "
                "many workers.",
            )

    def _validate_capabilities(self) -> None:
        if self.capabilities is None:
            return
        if not isinstance(self.capabilities, Mapping):
            raise ConfigurationError(
                f"capabilities must be a mapping, got {type(self.capabilities).__name__}",
                hint="Pass capabilities={'structured_outputs': False}, for example.",
            )
        known = ", ".join(sorted(KNOWN_CAPABILITIES))
        for name, value in self.capabilities.items():
            if name not in KNOWN_CAPABILITIES:
                raise ConfigurationError(
                    f"Unknown capability: {name!r}",
                    hint=f"Declarable capabilities: {known}.",
                )
            if not isinstance(value, bool):
                raise ConfigurationError(
                    f"capability {name!r} must be True or False, got {value!r}",
                    hint="Declare each capability as a bool.",
                )
        # A private copy: mutating the caller's dict later must not change this config.
        object.__setattr__(self, "capabilities", _Capabilities(self.capabilities))

    def _validate_cloud_fields(self) -> None:
        # Nothing is silent: a setting the chosen provider would not read is refused.
        readers = {
            "api_version": ("azure_openai",),
            "pricing_model": ("azure_openai",),
            "credentials": ("azure_openai", "vertex"),
            "project": ("vertex",),
            "location": ("vertex",),
            "staging_uri": ("vertex",),
        }
        for name, providers in readers.items():
            if getattr(self, name) is not None and self.provider not in providers:
                names = " or ".join(repr(p) for p in providers)
                raise ConfigurationError(
                    f"{name} is only valid for provider={names}, not {self.provider!r}",
                    hint=f"Remove {name}, or use provider={names}.",
                )

    def _resolve_vertex(self) -> None:
        if self.model is None:
            raise ConfigurationError(
                "model required for provider='vertex'",
                hint="Pass a Gemini model Vertex AI serves in your location, for example "
                "model='gemini-2.5-flash'.",
            )
        if self.api_key is not None:
            raise ConfigurationError(
                "provider='vertex' authenticates with Google Cloud credentials, not an api_key",
                hint="Remove api_key: pollux uses the Application Default Credentials "
                "(gcloud auth application-default login, a service account, the metadata "
                "server) or Config(credentials=<google.auth credentials>). For a Gemini API "
                "key use provider='gemini'.",
            )
        for name, env_var in (
            ("project", VERTEX_PROJECT_ENV_VAR),
            ("location", VERTEX_LOCATION_ENV_VAR),
            ("base_url", VERTEX_BASE_URL_ENV_VAR),
            ("staging_uri", VERTEX_STAGING_URI_ENV_VAR),
        ):
            value = getattr(self, name)
            if value is None and not self.use_mock:
                value = _env_value(env_var)
                object.__setattr__(self, name, value)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigurationError(
                    f"{name} must be a non-empty string, got {value!r}",
                    hint=f"Pass {name}=... or set {env_var}.",
                )
        if self.location is None:
            object.__setattr__(self, "location", VERTEX_DEFAULT_LOCATION)
        if self.location is not None and "/" in self.location:
            raise ConfigurationError(
                f"location must be a Vertex AI location name, got {self.location!r}",
                hint="Pass location='us-central1', 'europe-west4' or 'global', for example.",
            )
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"base_url must be an http(s) URL, got {self.base_url!r}",
                hint=f"Pass base_url='https://<gateway>' (or set {VERTEX_BASE_URL_ENV_VAR}), "
                "or leave it unset for Vertex AI's regional endpoint.",
            )
        if self.staging_uri is not None and not (
            self.staging_uri.startswith("gs://") and len(self.staging_uri.rstrip("/")) > 5
        ):
            raise ConfigurationError(
                f"staging_uri must be a gs:// URI, got {self.staging_uri!r}",
                hint="Pass staging_uri='gs://<bucket>/<prefix>' (a bucket the credentials may "
                f"write and Vertex AI may read), or set {VERTEX_STAGING_URI_ENV_VAR}.",
            )
        credentials = self.credentials
        if credentials is not None and not (
            callable(getattr(credentials, "refresh", None)) and hasattr(credentials, "token")
        ):
            raise ConfigurationError(
                "credentials for provider='vertex' must be a google.auth credentials object "
                f"(with .token and .refresh()), got {type(credentials).__name__}",
                hint="Pass credentials=google.oauth2.service_account.Credentials."
                "from_service_account_file(path, scopes=['https://www.googleapis.com/auth/"
                "cloud-platform']), for example, or leave it unset for the Application "
                "Default Credentials.",
            )

    def _resolve_azure(self) -> None:
        if self.model is None:
            raise ConfigurationError(
                "model required for provider='azure_openai': the deployment name",
                hint="Pass model='<deployment>', the name of the deployment in your Azure "
                "OpenAI resource (not the base model's name, unless they are the same).",
            )
        if self.base_url is None and not self.use_mock:
            env_url = _env_value(AZURE_ENDPOINT_ENV_VAR)
            if env_url:
                object.__setattr__(self, "base_url", env_url)
        if self.base_url is not None and (
            not isinstance(self.base_url, str)
            or not self.base_url.startswith(("http://", "https://"))
        ):
            raise ConfigurationError(
                f"base_url must be the Azure OpenAI endpoint URL, got {self.base_url!r}",
                hint="Pass base_url='https://<resource>.openai.azure.com'.",
            )
        if not self.use_mock and not self.base_url:
            raise ConfigurationError(
                "Azure OpenAI endpoint required for provider='azure_openai'",
                hint="Pass base_url='https://<resource>.openai.azure.com' or set "
                f"{AZURE_ENDPOINT_ENV_VAR}.",
            )
        if self.api_version is None and not self.use_mock:
            env_version = _env_value(AZURE_API_VERSION_ENV_VAR)
            if env_version:
                object.__setattr__(self, "api_version", env_version)
        if self.api_version is not None and (
            not isinstance(self.api_version, str) or not self.api_version.strip()
        ):
            raise ConfigurationError(
                f"api_version must be a non-empty string, got {self.api_version!r}",
                hint="Pass api_version='2025-04-01-preview', for example, or leave it unset "
                "for Azure's v1 API.",
            )
        if self.pricing_model is None and not self.use_mock:
            object.__setattr__(self, "pricing_model", _env_value(AZURE_PRICING_MODEL_ENV_VAR))
        if self.pricing_model is not None and (
            not isinstance(self.pricing_model, str) or not self.pricing_model.strip()
        ):
            raise ConfigurationError(
                f"pricing_model must be a non-empty model name, got {self.pricing_model!r}",
                hint="Pass the model the deployment serves, as genai-prices names it "
                "(pricing_model='gpt-5-mini', for example), or leave it unset.",
            )
        if self.credentials is not None:
            if not callable(self.credentials):
                raise ConfigurationError(
                    "credentials for provider='azure_openai' must be an Entra ID token provider "
                    f"(a callable returning a token), got {type(self.credentials).__name__}",
                    hint="Pass credentials=azure.identity.get_bearer_token_provider("
                    "DefaultAzureCredential(), 'https://cognitiveservices.azure.com/.default').",
                )
            if self.api_key is not None:
                raise ConfigurationError(
                    "provider='azure_openai' takes an api_key or Entra ID credentials, not both",
                    hint="Remove api_key to authenticate with the token provider, or remove "
                    "credentials to use the key.",
                )
            return
        if self.api_key is None and not self.use_mock:
            object.__setattr__(self, "api_key", resolve_api_key(self.provider))
            register_secret(self.api_key)
        if not self.use_mock and not self.api_key:
            raise ConfigurationError(
                f"{KEY_MISSING}azure_openai",
                hint="Set the AZURE_OPENAI_API_KEY environment variable (or put it in .env), "
                "pass api_key=..., pass credentials=<an Entra ID token provider>, or use "
                "use_mock=True for offline runs.",
            )

    def _resolve_local(self) -> None:
        if self.base_url is None and not self.use_mock:
            env_url = _env_value(LOCAL_BASE_URL_ENV_VAR)
            if env_url:
                object.__setattr__(self, "base_url", env_url)
        if self.api_key is None and not self.use_mock:
            # No key is required; a server behind a key (a gateway, vLLM --api-key) gets this one.
            object.__setattr__(self, "api_key", _env_value(LOCAL_API_KEY_ENV_VAR))
            register_secret(self.api_key)
        if self.base_url is not None and (
            not isinstance(self.base_url, str)
            or not self.base_url.startswith(("http://", "https://"))
        ):
            raise ConfigurationError(
                f"base_url must be an http(s) URL, got {self.base_url!r}",
                hint="Pass base_url='http://localhost:11434/v1', for example.",
            )
        if self.base_url is not None:
            try:
                parts = urlsplit(self.base_url)
                parts.port  # noqa: B018 - parses the port
                problem = None if parts.hostname else "no host"
            except ValueError as exc:  # 'http://[::1' (an unclosed IPv6 bracket), a bad port
                problem = str(exc)
            if problem is not None:
                raise ConfigurationError(
                    f"base_url is not a valid URL ({problem}): {self.base_url!r}",
                    hint="Pass base_url='http://localhost:11434/v1', for example.",
                )
        if not self.use_mock and not self.base_url:
            raise ConfigurationError(
                "base_url required for provider='local'",
                hint=f"Pass base_url='http://localhost:8080/v1' or set {LOCAL_BASE_URL_ENV_VAR}.",
            )

    def capability_override(self, name: str) -> bool | None:
        """Return the declared override for capability ``name``, or ``None`` if undeclared."""
        if self.capabilities is None:
            return None
        return self.capabilities.get(name)

    def __str__(self) -> str:
        """Return a representation with the API key redacted."""
        return (
            f"Config(provider={self.provider!r}, model={self.model!r}, "
            f"api_key={'[REDACTED]' if self.api_key else None}, "
            f"base_url={self.base_url!r}, use_mock={self.use_mock})"
        )

    __repr__ = __str__

    def __hash__(self) -> int:
        caps = tuple(sorted(self.capabilities.items())) if self.capabilities else None
        return hash(
            (
                self.provider,
                self.model,
                self.api_key,
                self.base_url,
                self.use_mock,
                self.request_concurrency,
                self.request_timeout_s,
                self.retry,
                caps,
                id(self.quota) if self.quota is not None else None,
                self.api_version,
                id(self.credentials) if self.credentials is not None else None,
                self.project,
                self.location,
                self.staging_uri,
                self.pricing_model,
            )
        )
