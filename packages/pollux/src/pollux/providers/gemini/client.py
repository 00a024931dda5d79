"""The ``genai.Client`` both the provider and the cache helpers build (the SDK imported lazily).

Its own module so that :mod:`.caching` (whose module-level helpers open a client of their own)
and :mod:`.provider` (which uses the caches) do not import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.transport import Transport

__all__ = ["DEFAULT_TRANSPORT", "build_client"]

#: The SDK transport of a client built by :func:`build_client` without a pollux transport
#: (``"auto"``: aiohttp when installed, else httpx). The provider always passes its Session's
#: transport instead.
DEFAULT_TRANSPORT = "auto"


def build_client(config: Config, *, transport: str = "auto", http: Transport | None = None) -> Any:
    """A ``genai.Client`` for ``config`` with SDK retries off.

    Args:
        config: The session config (``api_key``, ``request_timeout_s``).
        transport: Without ``http``: ``"auto"`` (aiohttp when installed), ``"aiohttp"`` or
            ``"httpx"`` (benchmarks compare them).
        http: A pollux transport whose httpx client the SDK sends through (wins over
            ``transport``).
    """
    try:
        from google import genai
        from google.genai import types
    except ImportError as exc:  # pragma: no cover - google-genai is a pollux dependency
        raise ConfigurationError(
            "provider='gemini' needs the google-genai package",
            hint='Install it: pip install "google-genai>=1.61"',
        ) from exc
    options: dict[str, Any] = {
        "timeout": int(config.request_timeout_s * 1000),
        "retry_options": types.HttpRetryOptions(attempts=1),
    }
    if http is not None:
        options["httpx_async_client"] = http.httpx_client()
        # The SDK's own (sync) client trusts what the transport trusts, and the SDK does not
        # load a CA bundle of its own for it.
        options["client_args"] = {"verify": http.ssl_context()}
        options["async_client_args"] = {"ssl": http.ssl_context()}  # its websocket context
    elif transport == "httpx":
        import httpx

        options["async_client_args"] = {"transport": httpx.AsyncHTTPTransport()}
    return genai.Client(api_key=config.api_key, http_options=types.HttpOptions(**options))
