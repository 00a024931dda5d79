"""The Session's transport: proxies, custom CA bundles, gzip, redirects, injection, timeouts.

Real servers on loopback only: the emulator, a small forwarding/CONNECT proxy and a
TLS-terminating front (certificates generated here with ``cryptography``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import gzip
import ssl
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pollux import APIError, Config, ConfigurationError, RetryPolicy, Session, run
from pollux.testing import Emulator
from pollux.transport import Transport

ONCE = RetryPolicy(max_attempts=1)
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*_PROXY_VARS, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


# -- helpers: a forwarding proxy and a TLS front ---------------------------------------------


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class _Conns:
    """The server-side connections of a test server, closed at teardown (Python 3.10+)."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: set[asyncio.Task[None]] = set()

    def track(self, *writers: asyncio.StreamWriter) -> None:
        self.writers.extend(writers)
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)  # type: ignore[arg-type]

    async def close(self, server: asyncio.Server) -> None:
        server.close()
        for writer in self.writers:
            writer.close()
        current = asyncio.current_task()
        pending = [t for t in self.tasks if t is not current and not t.done()]
        if pending:
            # Closing the sockets ends every pipe; cancelling would log from asyncio's callback.
            await asyncio.wait(pending, timeout=2.0)
        await server.wait_closed()


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))


@contextlib.asynccontextmanager
async def forwarding_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTP proxy on 127.0.0.1: CONNECT tunnels and absolute-form forwarding.

    Yields its URL and the request lines it received.
    """
    seen: list[str] = []
    conns = _Conns()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.track(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        seen.append(line)
        method, target, _ = line.split(" ", 2)
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = await asyncio.open_connection(host, int(port))
            conns.track(upstream[1])
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await _splice((reader, writer), upstream)
            return
        # Absolute form: http://host:port/path -> origin form to the target. The proxy only
        # rewrites the first request line it reads, so it asks the origin to close after one
        # response: the client's next request opens a new proxy connection and is rewritten
        # (and seen) too, instead of reaching the origin in absolute form.
        rest = target.split("://", 1)[1]
        authority, _, path = rest.partition("/")
        host, _, port = authority.partition(":")
        upstream = await asyncio.open_connection(host, int(port or 80))
        conns.track(upstream[1])
        lines = head.rstrip(b"\r\n").split(b"\r\n")
        lines[0] = lines[0].replace(target.encode(), b"/" + path.encode(), 1)
        kept = [line for line in lines if not line.lower().startswith(b"connection:")]
        upstream[1].write(b"\r\n".join([*kept, b"Connection: close"]) + b"\r\n\r\n")
        await _splice((reader, writer), upstream)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await conns.close(server)


def _certificates(tmp: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a ``localhost`` server certificate it signed: (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pollux test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = tmp / "ca.pem", tmp / "server.pem", tmp / "server.key"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_path, cert_path, key_path


@contextlib.asynccontextmanager
async def tls_front(upstream_port: int, tmp: Path) -> AsyncIterator[tuple[int, Path]]:
    """TLS on 127.0.0.1 (certificate for ``localhost``) in front of a plain-HTTP server."""
    ca, cert, key = _certificates(tmp)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    conns = _Conns()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.track(writer)
        upstream = await asyncio.open_connection("127.0.0.1", upstream_port)
        conns.track(upstream[1])
        await _splice((reader, writer), upstream)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], ca
    finally:
        await conns.close(server)


def _local(emu: Emulator, base_url: str | None = None) -> Config:
    return Config(
        provider="local",
        model="local-model",
        base_url=base_url or emu.base_url("local"),
        retry=ONCE,
        request_timeout_s=10.0,
    )


def _over_tls(url: str, port: int) -> str:
    """``url`` with its origin replaced by ``https://localhost:port`` (the TLS front)."""
    path = url.split("://", 1)[1].partition("/")[2]
    return f"https://localhost:{port}/{path}".rstrip("/")


def _port(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


# -- proxies ---------------------------------------------------------------------------------


async def test_chat_completions_go_through_http_proxy_from_the_environment(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with forwarding_proxy() as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        out = await run("Through the proxy", config=_local(emu))
    assert out.text == "Emulated reply to: Through the proxy"
    target = emu.base_url("local").rstrip("/") + "/chat/completions"
    assert f"POST {target} HTTP/1.1" in seen


async def test_no_proxy_bypasses_the_proxy(emu: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    async with forwarding_proxy() as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        out = await run("Direct", config=_local(emu))
    assert out.text == "Emulated reply to: Direct"
    assert seen == []


async def test_explicit_proxy_wins_and_sdk_provider_uses_it(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
    config = Config(provider="openai", model="gpt-5-nano", api_key="sk-test", retry=ONCE)
    async with (
        forwarding_proxy() as (proxy, seen),
        Transport(proxy=proxy, trust_env=False) as transport,
        Session(config, transport=transport) as session,
    ):
        out = await session.run_many(["Via the SDK"])
        # check_ready goes through the SDK itself, over the transport's shared httpx client.
        ready = await session.check_ready()
    assert out.answers == ["Emulated reply to: Via the SDK"]
    assert ready.status_code is not None  # the emulator answered (through the proxy)
    assert any(line.startswith("POST http://127.0.0.1:") and "/responses" in line for line in seen)
    assert any(line.startswith("GET http://127.0.0.1:") and "/models/" in line for line in seen)


async def test_https_through_connect_tunnel_with_custom_ca(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with tls_front(_port(emu.base_url("local")), tmp_path) as (port, ca):
        base = _over_tls(emu.base_url("local"), port)
        async with forwarding_proxy() as (proxy, seen):
            monkeypatch.setenv("HTTPS_PROXY", proxy)
            async with (
                Transport(ca_bundle=ca) as transport,
                Session(_local(emu, base), transport=transport) as session,
            ):
                out = await session.run_many(["Tunnelled"])
        assert out.status == "ok", out.errors
        assert out.answers == ["Emulated reply to: Tunnelled"]
        assert f"CONNECT localhost:{port} HTTP/1.1" in seen


# -- TLS trust -------------------------------------------------------------------------------


async def test_custom_ca_bundle_is_required_and_honoured(emu: Emulator, tmp_path: Path) -> None:
    async with tls_front(_port(emu.base_url("local")), tmp_path) as (port, ca):
        config = _local(emu, _over_tls(emu.base_url("local"), port))
        with pytest.raises(APIError) as caught:
            await run("Untrusted", config=config)
        assert caught.value.error_category == "connect"
        assert "certificate" in str(caught.value).lower()
        async with (
            Transport(ca_bundle=ca) as transport,
            Session(config, transport=transport) as session,
        ):
            out = await session.run_many(["Trusted"])
    assert out.answers == ["Emulated reply to: Trusted"]


async def test_ssl_cert_file_is_honoured_by_an_sdk_provider(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    upstream = emu.base_url("anthropic")
    async with tls_front(_port(upstream), tmp_path) as (port, ca):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", _over_tls(upstream, port))
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        config = Config(
            provider="anthropic", model="claude-sonnet-4-6", api_key="sk-ant-test", retry=ONCE
        )
        out = await run("Over TLS", config=config)
    assert out.text == "Emulated reply to: Over TLS"


def test_bad_settings_are_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Transport(proxy="socks5://user:secret@127.0.0.1:1080")
    assert caught.value.hint and "http://" in caught.value.hint
    assert "secret" not in str(caught.value)
    with pytest.raises(ConfigurationError):
        Transport(ca_bundle=tmp_path / "missing.pem")
    with pytest.raises(ConfigurationError):
        Session(Config(provider="openai", model="m", use_mock=True), transport="http://proxy")  # type: ignore[arg-type]


# -- gzip and redirects ----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def canned(response: bytes) -> AsyncIterator[tuple[str, list[bytes]]]:
    requests: list[bytes] = []
    conns = _Conns()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.track(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                requests.append(head + await reader.readexactly(length))
                writer.write(response)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", requests
    finally:
        await conns.close(server)


_COMPLETION = (
    b'{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"zipped answer"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}'
)


async def test_gzip_responses_are_decoded() -> None:
    body = gzip.compress(_COMPLETION)
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    async with canned(response) as (url, requests):
        config = Config(provider="local", model="m", base_url=url, retry=ONCE)
        out = await run("Compressed?", config=config)
    assert out.text == "zipped answer"
    assert b"accept-encoding: gzip" in requests[0].lower()


async def test_gzip_streams_are_decoded() -> None:
    from pollux._transport import ConnectionPool

    events = b"".join(b'data: {"n": %d}\n\n' % i for i in range(50))
    body = gzip.compress(events)
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 37]), body[i : i + 37]) for i in range(0, len(body), 37)
    )
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n"
    )
    async with canned(response) as (url, _):
        pool = ConnectionPool(url)
        try:
            async with pool.stream("POST", "/chat/completions", body=b"{}") as stream:
                data = [d async for d in stream.iter_sse()]
        finally:
            await pool.aclose()
    assert data == [f'{{"n": {i}}}' for i in range(50)]


async def test_a_redirect_is_an_error_not_followed() -> None:
    response = (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere.example/v1/chat/completions"
        b"\r\nContent-Length: 0\r\n\r\n"
    )
    async with canned(response) as (url, requests):
        config = Config(provider="local", model="m", base_url=url, retry=RetryPolicy())
        with pytest.raises(APIError) as caught:
            await run("Go elsewhere", config=config)
    error = caught.value
    assert error.status_code == 307
    assert error.retryable is False
    assert "elsewhere.example" in str(error) and error.hint
    assert len(requests) == 1  # not resent, not followed


# -- injection, pools and closing ------------------------------------------------------------


async def test_injected_transport_is_used_and_left_open(emu: Emulator) -> None:
    transport = Transport()
    async with Session(_local(emu), transport=transport) as session:
        await session.run_many(["a", "b", "c"])
        (pool,) = transport._pools.values()
        assert len(pool._idle) >= 1
    assert not transport.closed  # the caller owns it
    async with Session(_local(emu), transport=transport) as session:
        await session.run_many(["d"])
    assert len(transport._pools) == 1  # one pool per origin, shared by both Sessions
    await transport.aclose()
    assert transport.closed and pool.closed


def test_a_transport_used_in_a_second_event_loop_is_refused_with_a_hint(emu: Emulator) -> None:
    # Its pooled sockets belong to the first loop; reusing them from another one was an
    # InternalError ("Event loop is closed") with a "this is a pollux bug" hint.
    transport = Transport()

    async def use() -> str:
        async with Session(_local(emu), transport=transport) as session:
            return (await session.run_many(["a"])).status

    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        assert first.run_until_complete(use()) == "ok"
        with pytest.raises(ConfigurationError, match="another event loop") as info:
            second.run_until_complete(use())
        assert "one event loop" in (info.value.hint or "")
        first.run_until_complete(transport.aclose())  # closed where its sockets live
    finally:
        first.close()
        second.close()
    assert transport.closed


async def test_session_closes_the_transport_it_built(emu: Emulator) -> None:
    session = Session(_local(emu))
    async with session:
        await session.run_many(["x"])
        transport = session._transport
        assert transport is not None and not transport.closed
    assert transport.closed


def test_every_provider_closes_cleanly_without_resource_warnings(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emu.base_url("gemini"))
    monkeypatch.setenv("OPENROUTER_BASE_URL", emu.base_url("openrouter"))
    configs = [
        _local(emu),
        Config(provider="openrouter", model="emulator-model", api_key="sk", retry=ONCE),
        Config(provider="openai", model="gpt-5-nano", api_key="sk", retry=ONCE),
        Config(provider="anthropic", model="claude-sonnet-4-6", api_key="sk", retry=ONCE),
        Config(provider="gemini", model="gemini-2.5-flash", api_key="k", retry=ONCE),
    ]

    async def main() -> None:
        for config in configs:
            async with Session(config) as session:
                out = await session.run_many(["one", "two"])
                assert out.status == "ok", out.errors
                events = [e async for e in session.stream(_env(), _input("streamed"))]
                assert events

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(main())
        gc.collect()


def _env():  # type: ignore[no-untyped-def]
    from pollux import Environment

    return Environment()


def _input(text: str):  # type: ignore[no-untyped-def]
    from pollux import Input

    return Input(content=text)


# -- timeouts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "env"),
    [
        ("openai", "gpt-5-nano", "OPENAI_BASE_URL"),
        ("anthropic", "claude-sonnet-4-6", "ANTHROPIC_BASE_URL"),
        ("gemini", "gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL"),
        ("openrouter", "emulator-model", "OPENROUTER_BASE_URL"),
    ],
)
async def test_request_timeout_applies_to_sdk_providers(
    monkeypatch: pytest.MonkeyPatch, provider: str, model: str, env: str
) -> None:
    with Emulator(latency=3.0) as slow:
        monkeypatch.setenv(env, slow.base_url(provider))
        config = Config(
            provider=provider,  # type: ignore[arg-type]
            model=model,
            api_key="k",
            retry=ONCE,
            request_timeout_s=0.3,
        )
        with pytest.raises(APIError) as caught:
            await run("Too slow", config=config)
    assert caught.value.error_category == "timeout"
    assert "request_timeout_s=0.3" in (caught.value.hint or "")


# -- every provider, every path: the environment's proxy and CA bundle ------------------------

_PROVIDERS = {
    "local": ("emulator-model", None),
    "openrouter": ("emulator-model", "OPENROUTER_BASE_URL"),
    "openai": ("gpt-5-nano", "OPENAI_BASE_URL"),
    "anthropic": ("claude-sonnet-4-6", "ANTHROPIC_BASE_URL"),
    "gemini": ("gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL"),
    "azure_openai": ("prod-deployment", None),  # the endpoint is Config(base_url=...)
    "vertex": ("gemini-2.5-flash", None),  # Config(base_url=...), project, location, a token
}


def _provider(
    name: str, base_url: str, monkeypatch: pytest.MonkeyPatch, retry: RetryPolicy = ONCE
) -> Config:
    model, env_var = _PROVIDERS[name]
    if name == "azure_openai":
        return Config(provider=name, model=model, base_url=base_url, api_key="sk-test", retry=retry)
    if name == "vertex":
        from google.oauth2.credentials import Credentials

        return Config(
            provider=name,
            model=model,
            base_url=base_url,
            project="seam",
            location="us-central1",
            credentials=Credentials(token="ya29.seam-token"),
            retry=retry,
        )
    if env_var is None:
        return Config(provider="local", model=model, base_url=base_url, retry=retry)
    monkeypatch.setenv(env_var, base_url)
    return Config(provider=name, model=model, api_key="sk-test", retry=retry)  # type: ignore[arg-type]


async def _every_path(config: Config) -> None:
    """A fan-out, a stream and a readiness probe (the SDKs' own requests) in one Session."""
    async with Session(config) as session:
        out = await session.run_many(["fanned out"])
        assert out.status == "ok", out.errors
        events = [e async for e in session.stream(_env(), _input("streamed"))]
        assert events[-1].type == "done"
        ready = await session.check_ready()
        assert ready.status_code is not None  # the server answered


@pytest.mark.parametrize("name", sorted(_PROVIDERS))
async def test_every_provider_sends_every_request_through_the_environment_proxy(
    name: str, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = emu.base_url(name)
    async with forwarding_proxy() as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        await _every_path(_provider(name, wire, monkeypatch))
    origin = wire.split("/", 3)[2]
    assert len(seen) >= 3 and all(f"http://{origin}/" in line for line in seen), seen
    assert len(seen) == len(emu.requests)  # nothing went around the proxy


@pytest.mark.parametrize("name", sorted(_PROVIDERS))
async def test_every_provider_trusts_ssl_cert_file_through_a_connect_tunnel(
    name: str, emu: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wire = emu.base_url(name)
    async with tls_front(_port(wire), tmp_path) as (port, ca):
        config = _provider(name, _over_tls(wire, port), monkeypatch)
        async with forwarding_proxy() as (proxy, seen):
            monkeypatch.setenv("HTTPS_PROXY", proxy)
            monkeypatch.setenv("SSL_CERT_FILE", str(ca))
            await _every_path(config)
    assert seen and all(line == f"CONNECT localhost:{port} HTTP/1.1" for line in seen)


@pytest.mark.parametrize("name", sorted(_PROVIDERS))
async def test_every_provider_uses_an_injected_transport_and_leaves_it_open(
    name: str, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _provider(name, emu.base_url(name), monkeypatch)
    async with forwarding_proxy() as (proxy, seen), Transport(proxy=proxy) as transport:
        for _ in range(2):  # two Sessions share the caller's transport
            async with Session(config, transport=transport) as session:
                out = await session.run_many(["injected"])
                assert out.status == "ok", out.errors
                events = [e async for e in session.stream(_env(), _input("streamed"))]
                assert events[-1].type == "done"
            assert not transport.closed
    assert transport.closed
    assert len(seen) == len(emu.requests) >= 4  # every request went through the injected one


_REDIRECT = (
    b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere.example/v1/x"
    b"\r\nContent-Length: 0\r\n\r\n"
)


@pytest.mark.parametrize("streamed", [False, True], ids=["call", "stream"])
@pytest.mark.parametrize("name", sorted(_PROVIDERS))
async def test_every_provider_refuses_a_redirect_without_resending(
    name: str, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK paths raised a bare "Error code: 307" (Anthropic's stream retried it as an
    # in-stream error; OpenRouter's catalog read called it "not JSON" and retried).
    async with canned(_REDIRECT) as (url, requests):
        retry = RetryPolicy(max_attempts=3, initial_delay_s=0.001)
        config = _provider(name, url, monkeypatch, retry=retry)
        async with Session(config) as session:
            with pytest.raises(APIError) as caught:
                if streamed:
                    async for _ in session.stream(_env(), _input("go elsewhere")):
                        pass
                else:
                    await session.interact(_env(), _input("go elsewhere"))
    assert caught.value.status_code == 307 and caught.value.retryable is False
    assert "elsewhere.example" in str(caught.value) and "redirect" in str(caught.value)
    assert len(requests) == 1  # neither followed nor resent
