"""The asyncio HTTP server and the background thread that runs it.

One event loop serves every connection (keep-alive, no thread per request). The loop runs in a
daemon thread owned by the emulator, so both synchronous and asynchronous clients can talk to it,
from any thread or event loop, and it is torn down completely on close (no dangling sockets, so
no ResourceWarning).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable

from ._http import (
    LAST_CHUNK,
    BadHTTPRequest,
    Drop,
    HTTPRequest,
    Outcome,
    Response,
    StreamResponse,
    encode_chunk,
    encode_response,
    encode_stream_head,
    read_request,
)

App = Callable[[HTTPRequest], Awaitable[Outcome]]


class HTTPServer:
    """Serve ``app`` on 127.0.0.1; call ``start`` and ``stop`` from the loop that runs it."""

    def __init__(self, app: App, host: str = "127.0.0.1", port: int = 0) -> None:
        self._app = app
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        """The bound port (after ``start``)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and listen."""
        self._server = await asyncio.start_server(
            self._connection, self._host, self._port, limit=1 << 20, backlog=1024
        )

    async def stop(self) -> None:
        """Stop listening, drop every open connection and wait for their tasks to end."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            while True:
                try:
                    request = await read_request(reader, writer)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except BadHTTPRequest as exc:
                    body = f'{{"error":{{"message":"bad HTTP request: {exc}"}}}}'.encode()
                    writer.write(encode_response(Response(400, body), keep_alive=False))
                    return
                outcome = await self._app(request)
                if not await self._send(writer, outcome, request.keep_alive):
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            if writer.transport.is_closing():
                writer.transport.abort()
            else:
                writer.close()

    async def _send(self, writer: asyncio.StreamWriter, outcome: Outcome, keep_alive: bool) -> bool:
        """Write ``outcome``; return whether the connection stays open."""
        if isinstance(outcome, Drop):
            writer.transport.abort()
            return False
        if isinstance(outcome, Response):
            data = encode_response(outcome, keep_alive)
            if outcome.cut_at is not None:
                writer.write(data[: len(data) - len(outcome.body) + outcome.cut_at])
                await writer.drain()
                writer.transport.abort()
                return False
            writer.write(data)
            if writer.transport.get_write_buffer_size() > 1 << 16:
                await writer.drain()
            return keep_alive
        return await self._send_stream(writer, outcome, keep_alive)

    async def _send_stream(
        self, writer: asyncio.StreamWriter, stream: StreamResponse, keep_alive: bool
    ) -> bool:
        events = stream.events
        cut = stream.cut_after is not None
        if cut:
            events = events[: stream.cut_after]
        writer.write(encode_stream_head(stream, keep_alive))
        if stream.delay > 0:
            for event in events:
                await writer.drain()
                await asyncio.sleep(stream.delay)
                writer.write(encode_chunk(event))
        elif events:
            writer.write(b"".join(encode_chunk(event) for event in events))
        if cut:
            await writer.drain()
            writer.transport.abort()
            return False
        writer.write(LAST_CHUNK)
        await writer.drain()
        return keep_alive


class ServerThread:
    """Run an :class:`HTTPServer` on its own event loop in a daemon thread."""

    def __init__(self, app_factory: Callable[[], App], host: str = "127.0.0.1", port: int = 0):
        self._app_factory = app_factory
        self._host = host
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: HTTPServer | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop."""
        assert self._loop is not None
        return self._loop

    def start(self) -> None:
        """Start the thread and wait until the socket listens."""
        self._thread = threading.Thread(target=self._run, name="pollux-emulator", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            asyncio.set_event_loop(loop)
            try:
                self._server = HTTPServer(self._app_factory(), self._host, self._port)
                loop.run_until_complete(self._server.start())
                self.port = self._server.port
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            loop.run_forever()
            loop.run_until_complete(self._server.stop())
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loop, close every connection and join the thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        stuck = self._thread.is_alive()
        self._thread = None
        if stuck:
            raise TimeoutError(
                f"the emulator thread did not stop within {timeout} s (a handler is blocking it)"
            )
