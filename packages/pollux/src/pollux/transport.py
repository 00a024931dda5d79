"""The HTTP transport a Session's provider sends through: proxies, TLS trust, pools, closing.

One :class:`Transport` per :class:`pollux.Session` (built by the Session unless you pass one)
carries every request the provider makes:

- the JSON hot paths (Chat Completions for local servers and OpenRouter, OpenAI's
  ``responses.create``, Anthropic's ``messages.create``, Gemini's ``generateContent``) and every
  provider's streams go through pollux's lean keep-alive client, one connection pool per origin;
- everything the official SDKs send themselves (uploads, batches, model lookups) goes through
  one shared ``httpx.AsyncClient`` handed to each SDK as its pluggable HTTP client
  (``http_client=`` for openai and anthropic, ``HttpOptions(httpx_async_client=...)`` for
  google-genai), with the SDK's own retries off.

Both sides apply the same settings, the way the SDKs do by default: ``HTTP_PROXY`` /
``HTTPS_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` (any case) when ``trust_env`` is on, an explicit
``proxy`` otherwise; a custom CA bundle (``ca_bundle``, else ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``,
else certifi's bundle, as httpx does); gzip responses; and no redirect is ever followed (a 3xx
answer to a POST is an error that names the new location).

Example:
    async with Transport(ca_bundle="corp-ca.pem", proxy="http://proxy.corp:3128") as transport:
        async with Session(config, transport=transport) as session:
            ...
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pollux._transport import ConnectionPool
from pollux.errors import ConfigurationError

if TYPE_CHECKING:
    import ssl

__all__ = ["Transport"]

# Loading a CA bundle costs ~20 ms of CPU; contexts are immutable once built and safe to share
# across Sessions and event loops, so each (cafile, capath) is loaded once per process.
_CONTEXTS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


class Transport:
    """Connection pools, proxy and TLS settings shared by one Session's provider.

    Args:
        proxy: An ``http://[user:pass@]host:port`` proxy for every request. ``None`` (the
            default) uses the proxy environment variables when ``trust_env`` is on.
        ca_bundle: A PEM file of CA certificates to trust instead of the defaults.
        ssl_context: A ready ``ssl.SSLContext`` (client certificates, pinning); wins over
            ``ca_bundle``.
        trust_env: Read ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY`` and
            ``SSL_CERT_FILE``/``SSL_CERT_DIR`` from the environment, as the SDKs do.
        max_idle_per_origin: Idle keep-alive connections kept per origin.

    A Transport belongs to one event loop (its sockets do). A Session closes the Transport it
    built; one you pass in stays open until you close it (``await transport.aclose()`` or
    ``async with``), so several Sessions of one loop can share its pools.
    """

    def __init__(
        self,
        *,
        proxy: str | None = None,
        ca_bundle: str | os.PathLike[str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        trust_env: bool = True,
        max_idle_per_origin: int = 256,
    ) -> None:
        if proxy is not None:
            proxy = _normalize_proxy(proxy)
        if ca_bundle is not None and not Path(ca_bundle).is_file():
            raise ConfigurationError(
                f"ca_bundle {os.fspath(ca_bundle)!r} is not a file",
                hint="Pass the path of a PEM file with the CA certificates to trust.",
            )
        self.proxy = proxy
        self.ca_bundle = os.fspath(ca_bundle) if ca_bundle is not None else None
        self.trust_env = trust_env
        self._ssl = ssl_context
        self._max_idle = max_idle_per_origin
        self._pools: dict[tuple[Any, ...], ConnectionPool] = {}
        self._httpx: dict[str, Any] = {}
        self._closed = False
        # The loop whose sockets the pools hold (weakly: a Transport must not keep a loop alive).
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    # -- settings ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran."""
        return self._closed

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context every ``https`` request verifies the server with (built once)."""
        if self._ssl is None:
            cafile = self.ca_bundle
            capath = None
            if cafile is None and self.trust_env:
                cafile = os.environ.get("SSL_CERT_FILE") or None
                capath = os.environ.get("SSL_CERT_DIR") or None
            import ssl

            if cafile is None and capath is None:
                import certifi  # httpx's default trust store, so both sides agree

                cafile = certifi.where()
            cached = _CONTEXTS.get((cafile, capath))
            if cached is not None:
                self._ssl = cached
                return cached
            try:
                self._ssl = ssl.create_default_context(cafile=cafile, capath=capath)
                _CONTEXTS[(cafile, capath)] = self._ssl
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(
                    f"cannot load the CA bundle {cafile or capath!r}: {exc}",
                    hint="Point ca_bundle (or SSL_CERT_FILE) at a readable PEM file.",
                ) from exc
        return self._ssl

    def proxy_for(self, url: str) -> str | None:
        """The proxy a request to ``url`` goes through (None: direct)."""
        if self.proxy is not None:
            return self.proxy
        if not self.trust_env:
            return None
        import urllib.request  # only read when a pool is built

        parts = urlsplit(url)
        proxies = urllib.request.getproxies_environment()
        host = parts.hostname or ""
        host_port = f"{host}:{parts.port}" if parts.port is not None else host
        # proxy_bypass_environment is public but missing from typeshed.
        bypass = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009
        if proxies.get("no") and bypass(host_port, proxies):
            return None
        proxy = proxies.get(parts.scheme) or proxies.get("all")
        return _normalize_proxy(proxy) if proxy is not None else None

    # -- clients -----------------------------------------------------------------------------

    def pool(self, base_url: str, headers: Mapping[str, str] | None = None) -> ConnectionPool:
        """The keep-alive pool for ``base_url`` with these default headers (built once)."""
        self._check_open()
        key = (base_url, tuple(sorted((headers or {}).items())))
        pool = self._pools.get(key)
        if pool is None:
            tls = base_url.startswith("https:")
            pool = ConnectionPool(
                base_url,
                headers=headers,
                max_idle=self._max_idle,
                ssl_context=self.ssl_context() if tls else None,
                proxy=self.proxy_for(base_url),
            )
            self._pools[key] = pool
        return pool

    def httpx_client(self, flavor: Literal["httpx", "httpx2"] = "httpx") -> Any:
        """The ``AsyncClient`` the SDKs send through (built once, never follows redirects).

        Args:
            flavor: ``"httpx"`` (openai, google-genai) or ``"httpx2"`` (the anthropic SDK's
                fork of httpx, which it requires).

        Pass it to an SDK as its HTTP client; do not close it yourself (:meth:`aclose` does).
        """
        self._check_open()
        client = self._httpx.get(flavor)
        if client is None:
            import importlib

            httpx = importlib.import_module(flavor)
            client = httpx.AsyncClient(
                verify=self.ssl_context(),
                proxy=self.proxy,
                trust_env=self.trust_env,
                follow_redirects=False,
                timeout=None,  # every SDK passes its own per-request timeout
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=self._max_idle),
            )
            self._httpx[flavor] = client
        return client

    # -- lifecycle ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError(
                "The transport is closed",
                hint="Open a new Transport (or let the Session build its own).",
            )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # built outside a loop: bound by its first use inside one
        bound = self._loop() if self._loop is not None else None
        if bound is loop:
            return
        if bound is not None or self._pools or self._httpx:
            # Its connections belong to the loop that opened them (dead once that loop closed).
            raise ConfigurationError(
                "This Transport was used in another event loop",
                hint="A Transport belongs to one event loop: build one inside each asyncio.run() "
                "(or loop), or let each Session build its own.",
            )
        self._loop = weakref.ref(loop)

    async def aclose(self) -> None:
        """Close every pooled connection and the SDKs' HTTP client (idempotent)."""
        self._closed = True
        pools, self._pools = list(self._pools.values()), {}
        clients, self._httpx = list(self._httpx.values()), {}
        for pool in pools:
            await pool.aclose()
        for client in clients:
            await client.aclose()

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _normalize_proxy(proxy: str) -> str:
    # "proxy.corp:3128" (no scheme) is common in HTTP_PROXY; curl and httpx read it as http.
    url = proxy if "://" in proxy else f"http://{proxy}"
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        # Credentials never reach the message: only scheme and host.
        raise ConfigurationError(
            f"unsupported proxy {parts.scheme}://{parts.hostname or ''}",
            hint="Use an http://host:port proxy (it tunnels https with CONNECT).",
        )
    return url
