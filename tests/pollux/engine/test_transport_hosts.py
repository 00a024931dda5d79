"""The transport's Host header for IPv6 literals (servers bound to ``[::1]``)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pollux._transport import ConnectionPool


def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_ipv6_literals_keep_their_brackets() -> None:
    assert b"Host: [::1]:8080\r\n" in ConnectionPool("http://[::1]:8080/v1")._head(
        "GET", "/models", None, {}
    )
    assert b"Host: [::1]\r\n" in ConnectionPool("http://[::1]/v1")._head("GET", "/m", None, {})
    assert b"Host: 127.0.0.1:81\r\n" in ConnectionPool("http://127.0.0.1:81")._head(
        "GET", "/m", None, {}
    )


@pytest.mark.skipif(not _ipv6_available(), reason="no IPv6 loopback")
async def test_a_request_to_an_ipv6_server() -> None:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "::1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(f"http://[::1]:{port}/v1")
    try:
        response = await pool.request("GET", "/models", timeout_s=5.0)
    finally:
        await pool.aclose()
        server.close()
        await server.wait_closed()
    assert response.status == 200 and response.body == b"{}"
    assert f"Host: [::1]:{port}\r\n".encode() in seen[0]
