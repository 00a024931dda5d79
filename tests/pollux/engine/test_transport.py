"""The keep-alive transport against a raw asyncio server: framing, reuse, SSE, failures."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollux._transport import ConnectionPool, TransportError, deadline_scope, iter_sse

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
_WRITERS: list[asyncio.StreamWriter] = []


async def _serve(handler: Handler) -> tuple[asyncio.Server, str, list[int]]:
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        _WRITERS.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                keep = await handler(head + body, writer)
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1", connections


async def _close(server: asyncio.Server, pool: ConnectionPool) -> None:
    await pool.aclose()
    server.close()
    # Close the server side of every connection too (Python 3.10 leaves them open otherwise).
    for writer in _WRITERS:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    _WRITERS.clear()
    await server.wait_closed()


async def test_content_length_and_keep_alive_reuse() -> None:
    async def handler(request: bytes, writer: asyncio.StreamWriter) -> bool:
        assert request.startswith(b"POST /v1/chat HTTP/1.1\r\n")
        assert b"x-extra: 1" in request.lower()
        body = b'{"ok":true}'
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return True

    server, url, connections = await _serve(handler)
    pool = ConnectionPool(url, headers={"X-Extra": "1"})
    for _ in range(3):
        response = await pool.request("POST", "/chat", body=b"{}")
        assert (response.status, response.body) == (200, b'{"ok":true}')
    assert len(connections) == 1
    await _close(server, pool)


async def test_chunked_body_and_connection_close() -> None:
    async def handler(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )
        return False

    server, url, connections = await _serve(handler)
    pool = ConnectionPool(url)
    assert (await pool.request("GET", "/x")).body == b"hello world"
    assert (await pool.request("GET", "/x")).body == b"hello world"
    assert len(connections) == 2
    await _close(server, pool)


async def test_stale_keep_alive_socket_is_replaced() -> None:
    count = {"n": 0}

    async def handler(request: bytes, writer: asyncio.StreamWriter) -> bool:
        count["n"] += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        return False  # the server closes after answering, without saying so

    server, url, _ = await _serve(handler)
    pool = ConnectionPool(url)
    assert (await pool.request("GET", "/a")).body == b"ok"
    await asyncio.sleep(0.01)
    assert (await pool.request("GET", "/b")).body == b"ok"
    assert count["n"] == 2
    await _close(server, pool)


async def test_stream_sse_and_cut_stream() -> None:
    async def handler(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in (b"data: one\n\n", b"data: two\r\n\r\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        if b"/cut" in request:
            return False
        writer.write(b"0\r\n\r\n")
        return True

    server, url, _ = await _serve(handler)
    pool = ConnectionPool(url)
    async with pool.stream("POST", "/ok", body=b"{}") as response:
        assert [e async for e in response.iter_sse()] == ["one", "two"]
    assert len(pool._idle) == 1
    with pytest.raises(TransportError) as info:
        async with pool.stream("POST", "/cut", body=b"{}") as response:
            [e async for e in response.iter_sse()]
    assert info.value.kind == "disconnect"
    await _close(server, pool)


async def test_a_deadline_declared_for_one_task_leaves_other_tasks_their_timeouts() -> None:
    # deadline_scope says "an enclosing timeout cancels *this* task first", so this task's
    # requests arm no timer of their own; a task started inside the scope inherits the context
    # but not that cancellation, so its request must still time out by itself.
    async def handler(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    server, url, _ = await _serve(handler)
    pool = ConnectionPool(url)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(0.05):  # the enclosing deadline this scope declares
        with deadline_scope(loop.time() + 0.05):
            child = asyncio.ensure_future(pool.request("GET", "/slow", timeout_s=0.1))
    with pytest.raises(TransportError) as info:
        await asyncio.wait_for(child, 3.0)  # without its own timer the child would hang
    assert info.value.kind == "timeout"
    await _close(server, pool)


async def test_a_request_inside_a_deadline_scope_is_still_cut_by_the_deadline() -> None:
    async def handler(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    server, url, _ = await _serve(handler)
    pool = ConnectionPool(url)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05) as deadline:
            with deadline_scope(deadline.when()):
                await pool.request("GET", "/slow", timeout_s=30.0)
    assert not pool._busy  # the cut request gave its connection up
    await _close(server, pool)


async def test_timeout_and_refused_connection() -> None:
    async def handler(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    server, url, _ = await _serve(handler)
    pool = ConnectionPool(url)
    with pytest.raises(TransportError) as info:
        await pool.request("GET", "/slow", timeout_s=0.05)
    assert info.value.kind == "timeout"
    await _close(server, pool)
    refused = ConnectionPool(url)
    with pytest.raises(TransportError) as info:
        await refused.request("GET", "/x")
    assert info.value.kind == "connect"
    await refused.aclose()
    with pytest.raises(TransportError, match="closed"):
        await refused.request("GET", "/x")


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.text(
            alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"),
            max_size=20,
        ),
        min_size=1,
        max_size=6,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    crlf=st.booleans(),
)
def test_sse_parsing_is_independent_of_chunk_boundaries(
    events: list[str], cuts: list[int], crlf: bool
) -> None:
    newline = "\r\n" if crlf else "\n"
    raw = "".join(f"data: {e}{newline}{newline}" for e in events).encode()
    points = sorted({min(c, len(raw)) for c in cuts})
    parts = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True) if raw[a:b]]

    async def collect() -> list[str]:
        return [data async for data in iter_sse(_chunks(parts))]

    assert asyncio.run(collect()) == events


@settings(max_examples=80, deadline=None)
@given(
    chunks=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=10),
    trailers=st.booleans(),
)
def test_dechunking_is_independent_of_read_boundaries(
    chunks: list[bytes], cuts: list[int], trailers: bool
) -> None:
    from pollux._transport import _dechunk

    wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    wire += b"0\r\nx-trailer: 1\r\n\r\n" if trailers else b"0\r\n\r\n"
    points = sorted({min(c, len(wire)) for c in cuts})
    reads = [
        wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True) if wire[a:b]
    ]
    buffer, out, done = b"", [], False
    for data in reads:
        buffer += data
        piece, buffer, done = _dechunk(buffer)
        out.append(piece)
        if done:
            break
    assert done
    assert b"".join(out) == b"".join(chunks)
