"""A lean asyncio HTTP/1.1 keep-alive client for the JSON and SSE provider paths.

Why not httpx or aiohttp: at a concurrency of 32 against a 50 ms server, the general-purpose stacks
spend more CPU per request than the window allows, so the window drains (``python -m bench
transport`` measures them side by side). This transport does only what the JSON provider paths
need, and what a library would do for them: one pool of keep-alive connections per origin, JSON
request bodies, ``Content-Length``, chunked and read-to-close response bodies, gzip, Server-Sent
Events, timeouts, HTTP proxies (absolute-form requests for ``http``, ``CONNECT`` tunnels for
``https``; see :class:`pollux.transport.Transport` for ``HTTP_PROXY``/``NO_PROXY``), a caller's
TLS context (custom CA bundles), no redirects (a 3xx is returned as it is), and orderly closing
(every socket is closed before the pool reports closed, so no ResourceWarning).

Errors are :class:`TransportError` with a ``kind`` (``connect``, ``timeout``, ``disconnect``,
``protocol``); providers turn them into ``APIError`` with a hint.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import sys
import zlib
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import ssl

__all__ = [
    "ConnectionPool",
    "Response",
    "SSEDecoder",
    "StreamResponse",
    "TransportError",
    "iter_sse",
]

TransportErrorKind = Literal["connect", "timeout", "disconnect", "protocol"]

if sys.version_info >= (3, 11):
    _timeout = asyncio.timeout
else:  # pragma: no cover - exercised on 3.10 only

    @contextlib.asynccontextmanager
    async def _timeout(delay: float | None) -> AsyncIterator[None]:
        # A minimal asyncio.timeout for 3.10: cancel the current task at the deadline and turn the
        # resulting cancellation into TimeoutError.
        if delay is None:
            yield
            return
        task = asyncio.current_task()
        assert task is not None
        fired = False

        def _fire() -> None:
            nonlocal fired
            fired = True
            task.cancel()

        handle = asyncio.get_running_loop().call_later(delay, _fire)
        try:
            yield
        except asyncio.CancelledError:
            if fired:
                raise TimeoutError from None
            raise
        finally:
            handle.cancel()


#: The deadline that will cancel a task anyway: ``(task, loop time)``, set by the engine's retry
#: loop around an attempt (``RetryPolicy.max_elapsed_s``; see :func:`deadline_scope`).
_DEADLINE: contextvars.ContextVar[tuple[asyncio.Task[Any], float] | None] = contextvars.ContextVar(
    "pollux_deadline", default=None
)


@contextlib.contextmanager
def deadline_scope(when: float | None) -> Iterator[None]:
    """Declare that the current task is cancelled at loop time ``when`` by an enclosing timeout.

    A request of this task whose own timeout would fire only after ``when`` then arms no timer
    of its own: the enclosing deadline always fires first, so the outcome is the same, and a
    fan-out saves one timer (a heap push and a cancel) per request. Requests of other tasks
    (which inherit the context but not the cancellation) keep their timeouts.
    """
    task = asyncio.current_task()
    if when is None or task is None:
        yield
        return
    token = _DEADLINE.set((task, when))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _own_timeout(timeout_s: float | None) -> float | None:
    """``timeout_s``, or None when this task's enclosing deadline fires strictly before it."""
    if timeout_s is None:
        return None
    outer = _DEADLINE.get()
    if (
        outer is not None
        and outer[0] is asyncio.current_task()
        and outer[1] < asyncio.get_running_loop().time() + timeout_s
    ):
        return None
    return timeout_s


class TransportError(Exception):
    """A request could not complete at the HTTP level (no status, or a broken response)."""

    def __init__(self, message: str, *, kind: TransportErrorKind) -> None:
        super().__init__(message)
        self.kind: TransportErrorKind = kind


@dataclass(frozen=True, slots=True)
class Response:
    """A complete HTTP response. Header names are lower-case."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        # RuntimeError: the loop that opened the socket is closed, so asyncio cannot close it any
        # more (a Transport closed from a later loop); the socket is then closed when collected.
        with contextlib.suppress(RuntimeError):
            self.writer.close()


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections to one origin (``http`` or ``https``).

    Args:
        base_url: Origin plus path prefix, for example ``http://127.0.0.1:8080/v1``. Request paths
            are appended to the prefix.
        headers: Headers sent with every request (for example ``Authorization``).
        connect_timeout_s: Limit for opening a connection.
        max_idle: Idle connections kept for reuse; extra ones are closed.
        ssl_context: TLS settings for ``https`` origins (default: the system's trust store).
        proxy: An ``http://[user:pass@]host:port`` proxy to reach the origin through, or None.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        max_idle: int = 256,
        ssl_context: ssl.SSLContext | None = None,
        proxy: str | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"unsupported base URL: {base_url!r}")
        self.base_url = base_url
        self._host = parts.hostname
        self._tls = parts.scheme == "https"
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path.rstrip("/")
        default_port = self._port == (443 if self._tls else 80)
        # An IPv6 literal keeps its brackets in the Host header (RFC 9110: "[::1]:8080").
        host = f"[{self._host}]" if ":" in self._host else self._host
        host_header = host if default_port else f"{host}:{self._port}"
        self._authority = host_header if not default_port else f"{host}:{self._port}"
        lines = [
            f"Host: {host_header}",
            "Accept: application/json, text/event-stream",
            "Accept-Encoding: gzip",
        ]
        self._proxy: tuple[str, int] | None = None
        self._proxy_auth: str | None = None
        self._target_prefix = ""
        if proxy:
            proxy_parts = urlsplit(proxy)
            if proxy_parts.scheme != "http" or not proxy_parts.hostname:
                raise ValueError(
                    f"unsupported proxy URL {proxy_parts.scheme}://{proxy_parts.hostname}: "
                    "only http:// proxies are supported"
                )
            self._proxy = (proxy_parts.hostname, proxy_parts.port or 80)
            if proxy_parts.username is not None:
                creds = f"{unquote(proxy_parts.username)}:{unquote(proxy_parts.password or '')}"
                token = base64.b64encode(creds.encode("utf-8")).decode("ascii")
                self._proxy_auth = f"Proxy-Authorization: Basic {token}\r\n"
            if not self._tls:
                # Plain HTTP through a forwarding proxy: absolute-form request targets.
                self._target_prefix = f"http://{host_header}"
                if self._proxy_auth:
                    lines.append(self._proxy_auth.rstrip("\r\n"))
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._static_headers = "".join(f"{line}\r\n" for line in lines)
        self._connect_timeout_s = connect_timeout_s
        self._max_idle = max_idle
        self._idle: deque[_Connection] = deque()
        self._busy: set[_Connection] = set()
        self._ssl: ssl.SSLContext | None = ssl_context
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran."""
        return self._closed

    # -- connections -------------------------------------------------------------------------

    async def _open(self) -> _Connection:
        if self._tls and self._ssl is None:
            import ssl  # only TLS origins pay for it

            self._ssl = ssl.create_default_context()
        host, port = self._proxy or (self._host, self._port)
        via = f" through the proxy {host}:{port}" if self._proxy else ""
        try:
            async with _timeout(self._connect_timeout_s):
                if self._proxy is None:
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=self._ssl, limit=1 << 20
                    )
                else:
                    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
                    if self._tls:
                        await self._tunnel(reader, writer)
        except TimeoutError:
            raise TransportError(
                f"timed out connecting to {self._host}:{self._port}{via}", kind="connect"
            ) from None
        except TransportError:
            raise
        except OSError as exc:
            raise TransportError(
                f"cannot connect to {self._host}:{self._port}{via}: {exc.strerror or exc}",
                kind="connect",
            ) from exc
        return _Connection(reader, writer)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Open a ``CONNECT`` tunnel through the proxy, then start TLS with the origin inside it."""
        auth = self._proxy_auth or ""
        writer.write(
            f"CONNECT {self._authority} HTTP/1.1\r\nHost: {self._authority}\r\n{auth}\r\n".encode(
                "latin-1"
            )
        )
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            status, _ = _parse_head(head)
        except (asyncio.IncompleteReadError, ValueError, asyncio.LimitOverrunError) as exc:
            writer.close()
            raise TransportError(
                f"the proxy gave no valid answer to CONNECT {self._authority}", kind="connect"
            ) from exc
        if status != 200:
            writer.close()
            raise TransportError(
                f"the proxy refused CONNECT {self._authority} with HTTP {status}", kind="connect"
            )
        assert self._ssl is not None
        try:
            # StreamWriter.start_tls is Python 3.11+ (typeshed lags): TLS inside the tunnel.
            start_tls = getattr(writer, "start_tls", None)
            if start_tls is None:  # pragma: no cover - Python 3.10
                raise TransportError(
                    "https through a proxy needs Python 3.11 or later", kind="connect"
                )
            await start_tls(self._ssl, server_hostname=self._host)
        except BaseException:
            writer.close()
            raise

    async def _acquire(self) -> _Connection:
        if self._closed:
            raise TransportError("connection pool is closed", kind="connect")
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                conn.reused = True
                self._busy.add(conn)
                return conn
            conn.close()
        conn = await self._open()
        self._busy.add(conn)
        return conn

    def _release(self, conn: _Connection, *, reusable: bool) -> None:
        self._busy.discard(conn)
        if reusable and not self._closed and len(self._idle) < self._max_idle and conn.usable():
            self._idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        """Close every connection and wait until the sockets are closed."""
        self._closed = True
        conns = [*self._idle, *self._busy]
        self._idle.clear()
        self._busy.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()

    # -- requests ----------------------------------------------------------------------------

    def _head(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        length = (
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body else ""
        )
        target = f"{self._target_prefix}{self._prefix}{path}"
        return (f"{method} {target} HTTP/1.1\r\n{self._static_headers}{extra}{length}\r\n").encode(
            "latin-1"
        )

    async def _send(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[_Connection, int, dict[str, str]]:
        """Send a request and read the status line and headers (retrying once on a stale socket)."""
        payload = self._head(method, path, body, headers)
        if body:
            payload += body
        for attempt in (0, 1):
            conn = await self._acquire()
            try:
                conn.writer.write(payload)
                head = await conn.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                self._release(conn, reusable=False)
                # A reused keep-alive socket the server already closed: try once on a fresh one.
                if conn.reused and attempt == 0:
                    continue
                raise TransportError(
                    f"server closed the connection before responding: {exc}", kind="disconnect"
                ) from exc
            except asyncio.LimitOverrunError as exc:
                self._release(conn, reusable=False)
                raise TransportError("response headers too large", kind="protocol") from exc
            except BaseException:
                self._release(conn, reusable=False)
                raise
            try:
                status, resp_headers = _parse_head(head)
            except ValueError as exc:
                self._release(conn, reusable=False)
                raise TransportError(str(exc), kind="protocol") from exc
            return conn, status, resp_headers
        raise AssertionError("unreachable")  # pragma: no cover

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        """Send one request and read the whole response.

        Raises:
            TransportError: Connecting, sending or reading failed, or ``timeout_s`` passed.
        """
        try:
            async with _timeout(_own_timeout(timeout_s)):
                conn, status, resp_headers = await self._send(method, path, body, headers or {})
                try:
                    data = await _read_body(conn.reader, resp_headers)
                except BaseException:
                    self._release(conn, reusable=False)
                    raise
        except TimeoutError:
            raise TransportError(
                f"no complete response within {timeout_s:g} s", kind="timeout"
            ) from None
        except asyncio.IncompleteReadError as exc:
            raise TransportError("connection closed mid-response", kind="disconnect") from exc
        except ConnectionError as exc:
            raise TransportError(f"connection lost: {exc}", kind="disconnect") from exc
        self._release(conn, reusable=_keep_alive(resp_headers))
        encoding = resp_headers.get("content-encoding")
        if encoding and encoding != "identity":
            data = _decode_body(data, encoding)
        return Response(status, resp_headers, data)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[StreamResponse]:
        """Send one request and expose the body incrementally (``timeout_s`` bounds each wait).

        The connection goes back to the pool only when the body was read to its end; leaving the
        block early (break, error, cancellation) closes it.
        """
        try:
            async with _timeout(timeout_s):
                conn, status, resp_headers = await self._send(method, path, body, headers or {})
        except TimeoutError:
            raise TransportError(
                f"no response headers within {timeout_s:g} s", kind="timeout"
            ) from None
        response = StreamResponse(conn, status, resp_headers, timeout_s)
        try:
            yield response
        finally:
            self._release(conn, reusable=response.complete and _keep_alive(resp_headers))


class StreamResponse:
    """A response whose body is read incrementally (see :meth:`ConnectionPool.stream`)."""

    def __init__(
        self, conn: _Connection, status: int, headers: dict[str, str], timeout_s: float | None
    ) -> None:
        self._conn = conn
        self.status = status
        self.headers: Mapping[str, str] = headers
        self._timeout_s = timeout_s
        self.complete = False

    async def read(self) -> bytes:
        """Read the whole remaining body."""
        parts = [chunk async for chunk in self.iter_bytes()]
        return b"".join(parts)

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """Yield body data as it arrives; raise TransportError when the body is cut.

        Chunked bodies are de-framed in bulk: one socket read may carry many HTTP chunks (and
        many SSE events), and they come out as one block, so per-event cost stays small. Each
        read is bounded by ``timeout_s`` (time the consumer spends between blocks is not).
        """
        encoding = self.headers.get("content-encoding")
        if encoding and encoding != "identity":
            async for data in self._iter_decoded(encoding):
                yield data
            return
        reader = self._conn.reader
        headers = self.headers
        timeout_s = self._timeout_s
        guard = _StallGuard(timeout_s) if timeout_s is not None else None
        try:
            if "chunked" in headers.get("transfer-encoding", "").lower():
                buffer = b""
                done = False
                while not done:
                    out, buffer, done = _dechunk(buffer)
                    if out:
                        yield out
                    if done:
                        break
                    if guard is not None:
                        guard.begin()
                    data = await reader.read(1 << 16)
                    if guard is not None:
                        guard.started = None
                    if not data:
                        raise asyncio.IncompleteReadError(buffer, None)
                    buffer = buffer + data if buffer else data
            elif "content-length" in headers:
                remaining = int(headers["content-length"])
                while remaining > 0:
                    if guard is not None:
                        guard.begin()
                    data = await reader.read(min(remaining, 1 << 16))
                    if guard is not None:
                        guard.started = None
                    if not data:
                        raise asyncio.IncompleteReadError(b"", remaining)
                    remaining -= len(data)
                    yield data
            else:
                while True:
                    if guard is not None:
                        guard.begin()
                    data = await reader.read(1 << 16)
                    if guard is not None:
                        guard.started = None
                    if not data:
                        break
                    yield data
        except asyncio.CancelledError:
            if guard is not None and guard.expired():
                raise TransportError(
                    f"stream stalled for more than {timeout_s:g} s", kind="timeout"
                ) from None
            raise
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise TransportError("connection closed mid-stream", kind="disconnect") from exc
        except ValueError as exc:
            raise TransportError(f"malformed chunked body: {exc}", kind="protocol") from exc
        finally:
            if guard is not None:
                guard.close()
        self.complete = True

    async def _iter_decoded(self, encoding: str) -> AsyncIterator[bytes]:
        if encoding.lower() != "gzip":
            raise TransportError(f"unsupported content-encoding {encoding!r}", kind="protocol")
        inflater = zlib.decompressobj(wbits=31)
        self.headers = {k: v for k, v in self.headers.items() if k != "content-encoding"}
        try:
            async for data in self.iter_bytes():
                out = inflater.decompress(data)
                if out:
                    yield out
            rest = inflater.flush()
        except zlib.error as exc:
            self.complete = False
            raise TransportError(f"malformed gzip body: {exc}", kind="protocol") from exc
        if rest:
            yield rest

    def iter_sse(self) -> AsyncIterator[str]:
        """Yield the ``data`` payload of each Server-Sent Event."""
        return iter_sse(self.iter_bytes())


class _StallGuard:
    """Bounds each read of a streamed body by ``timeout_s`` with one timer, not one per read.

    ``asyncio.timeout`` around every read costs about 4 us (a timer handle scheduled and
    cancelled each time): a quarter of a bare client's whole CPU per event when a stream's
    events arrive one per read. Here a read only notes when it started (:meth:`begin`) and
    when it ended (``started = None``); one timer checks, when it fires, whether the read in
    progress has lasted ``timeout_s``, and cancels the reading task if so (:meth:`expired`
    then turns that cancellation into a timeout, as ``asyncio.timeout`` does). Otherwise it
    re-arms for the read in progress, or stays off until the next read begins, so a stream
    left suspended between reads holds no timer.
    """

    __slots__ = ("_base", "_fired", "_handle", "_loop", "_task", "_timeout_s", "started")

    def __init__(self, timeout_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._timeout_s = timeout_s
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[object] | None = None
        self._base = 0
        self._fired = False
        #: Loop time the read in progress began (None: no read in progress).
        self.started: float | None = None

    def begin(self) -> None:
        """Note that a read starts now (arming the timer if it is off)."""
        now = self._loop.time()
        self.started = now
        # The reading task can change between reads (``wait_for(anext(...))`` runs each read
        # in a task of its own): the timer cancels the one reading now.
        task = asyncio.current_task()
        if task is not self._task:
            self._task = task
            self._base = _cancelling(task)
        if self._handle is None:
            self._handle = self._loop.call_at(now + self._timeout_s, self._check)

    def _check(self) -> None:
        self._handle = None
        started = self.started
        if started is None:
            return  # between reads: the next begin() re-arms
        if self._loop.time() - started >= self._timeout_s:
            if self._task is not None:
                self._fired = True
                self._task.cancel()
            return
        self._handle = self._loop.call_at(started + self._timeout_s, self._check)

    def expired(self) -> bool:
        """Whether the cancellation being handled is this guard's (consumes it if so)."""
        if not self._fired:
            return False
        self._fired = False
        task = self._task
        uncancel = getattr(task, "uncancel", None)
        if uncancel is None:  # pragma: no cover - Python 3.10 has no cancel counting
            return True
        # Another cancellation that arrived as well wins, as with asyncio.timeout.
        return bool(uncancel() <= self._base)

    def close(self) -> None:
        """Stop the timer (the body is done, or the stream is being closed)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def _cancelling(task: asyncio.Task[object] | None) -> int:
    count = getattr(task, "cancelling", None)
    return int(count()) if count is not None else 0


def _dechunk(buffer: bytes) -> tuple[bytes, bytes, bool]:
    """Decode every complete HTTP chunk in ``buffer``: (data, rest, reached the last chunk)."""
    parts: list[bytes] = []
    pos = 0
    size_end = len(buffer)
    while True:
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            break
        size = int(buffer[pos:line_end].split(b";", 1)[0], 16)
        if size == 0:
            # The last chunk, then optional trailers, then an empty line.
            if buffer.startswith(b"\r\n", line_end + 2):
                return b"".join(parts), b"", True
            trailers_end = buffer.find(b"\r\n\r\n", line_end)
            if trailers_end >= 0:
                return b"".join(parts), b"", True
            break
        start = line_end + 2
        stop = start + size
        if stop + 2 > size_end:
            break
        parts.append(buffer[start:stop])
        pos = stop + 2
    return b"".join(parts), buffer[pos:], False


class SSEDecoder:
    """Incremental Server-Sent Events parser: feed bytes, get each event's ``data`` payload."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data of every event completed by them (UTF-8 bytes)."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events: list[bytes] = []
        pos = 0
        while True:
            end = buffer.find(b"\n\n", pos)
            if end < 0:
                break
            data = _sse_data(buffer[pos:end])
            pos = end + 2
            if data is not None:
                events.append(data)
        self._buffer = buffer[pos:] if pos else buffer
        return events

    def flush(self) -> list[bytes]:
        """The data of a last event not followed by a blank line, if any."""
        rest, self._buffer = self._buffer, b""
        if rest.strip():
            data = _sse_data(rest.rstrip(b"\n"))
            if data is not None:
                return [data]
        return []


async def iter_sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """Parse Server-Sent Events from byte chunks; yield each event's joined ``data`` field."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for data in decoder.feed(chunk):
            yield data.decode("utf-8")
    for data in decoder.flush():
        yield data.decode("utf-8")


def _sse_data(block: bytes) -> bytes | None:
    if block.startswith(b"data:") and b"\n" not in block:
        # The common case: one data line per event.
        return block[6:] if block.startswith(b"data: ") else block[5:]
    values = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            values.append(line[6:] if line.startswith(b"data: ") else line[5:])
    if not values:
        return None
    return b"\n".join(values)


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/"):
        raise ValueError(f"malformed status line: {lines[0]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise ValueError(f"malformed status line: {lines[0]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"malformed header line: {line!r}")
        headers[name.strip().lower()] = value.strip()
    if status_line[0] == "HTTP/1.0" and "connection" not in headers:
        headers["connection"] = "close"
    return status, headers


def _decode_body(data: bytes, encoding: str) -> bytes:
    if encoding.lower() != "gzip":
        raise TransportError(f"unsupported content-encoding {encoding!r}", kind="protocol")
    try:
        return zlib.decompress(data, wbits=31)
    except zlib.error as exc:
        raise TransportError(f"malformed gzip body: {exc}", kind="protocol") from exc


def _keep_alive(headers: Mapping[str, str]) -> bool:
    # A body without a length or chunked framing ends at EOF, so that socket is spent too.
    framed = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "")
    return framed and headers.get("connection", "").lower() != "close"


def _chunk_size(line: bytes) -> int:
    return int(line.split(b";", 1)[0].strip(), 16)


async def _skip_trailers(reader: asyncio.StreamReader) -> None:
    while (await reader.readuntil(b"\r\n")) != b"\r\n":
        pass


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    length = headers.get("content-length")
    if length is not None:
        return await reader.readexactly(int(length))
    if headers.get("transfer-encoding", "").lower().endswith("chunked"):
        parts: list[bytes] = []
        while True:
            size = _chunk_size(await reader.readuntil(b"\r\n"))
            if size == 0:
                await _skip_trailers(reader)
                return b"".join(parts)
            parts.append((await reader.readexactly(size + 2))[:-2])
    return await reader.read()
