"""A small HTTP/1.1 layer: request parsing with keep-alive, and the outcomes a handler returns.

Hand-rolled on purpose: the emulator must serve thousands of small requests per second on a small
machine, and a pure-Python protocol library (h11) costs several times more per request than the
few splits below. Only what HTTP clients such as httpx send is supported: Content-Length and
chunked request bodies, keep-alive by default on HTTP/1.1, ``Expect: 100-continue``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote

MAX_HEAD = 64 * 1024
MAX_BODY = 512 * 1024 * 1024


class BadHTTPRequest(Exception):
    """The bytes on the wire are not an HTTP/1.1 request this server understands."""


@dataclass(slots=True)
class HTTPRequest:
    """One parsed request."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> HTTPRequest:
    """Read one request from a connection.

    Raises:
        asyncio.IncompleteReadError: The peer closed the connection.
        BadHTTPRequest: The request is malformed.
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as exc:
        raise BadHTTPRequest("request head too large") from exc
    lines = head[:-4].decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise BadHTTPRequest(f"bad request line {lines[0]!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadHTTPRequest(f"bad header line {line!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError as exc:
            raise BadHTTPRequest("bad content-length") from exc
        if length < 0 or length > MAX_BODY:
            raise BadHTTPRequest("content-length out of range")
        if length:
            body = await reader.readexactly(length)
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    raw_path, _, raw_query = target.partition("?")
    query = dict(parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {}
    return HTTPRequest(method.upper(), unquote(raw_path), query, headers, body, keep_alive)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise BadHTTPRequest("bad chunk size") from exc
        if size == 0:
            # Trailers (rare) end with an empty line.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY:
            raise BadHTTPRequest("chunked body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


# --- outcomes ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Response:
    """A complete response. ``cut_at`` sends only that many body bytes and then drops the line."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    cut_at: int | None = None


@dataclass(slots=True)
class StreamResponse:
    """A server-sent-events response written with chunked transfer encoding.

    ``cut_after`` sends that many events and then drops the connection without the closing chunk,
    the way a proxy or a crashed upstream ends a stream. ``delay`` spaces the events out.
    ``error_event`` renders an in-band error event (message, code, sequence number) in the
    format of the route that produced the stream; ``malformed_event`` is the broken event a
    ``MalformedBody`` fault inserts (an SDK that skips unnamed events needs a named one).
    """

    events: list[bytes]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    delay: float = 0.0
    error_event: Callable[[str, str, int], bytes] | None = None
    malformed_event: bytes | None = None


@dataclass(slots=True)
class Drop:
    """Close the connection without answering."""


Outcome = Response | StreamResponse | Drop


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response (compact separators, UTF-8)."""
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(status, body, "application/json", headers or {})


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    if event is None:
        return f"data: {payload}\n\n".encode()
    return f"event: {event}\ndata: {payload}\n\n".encode()


_REASONS = {s.value: s.phrase for s in HTTPStatus}


def _head(status: int, headers: dict[str, str], keep_alive: bool) -> list[str]:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines.extend(f"{k}: {v}" for k, v in headers.items())
    if not keep_alive:
        lines.append("connection: close")
    return lines


def encode_response(response: Response, keep_alive: bool) -> bytes:
    """Serialize a complete response (head and body)."""
    headers = {"content-type": response.content_type, "content-length": str(len(response.body))}
    headers.update(response.headers)
    lines = _head(response.status, headers, keep_alive)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


def encode_stream_head(response: StreamResponse, keep_alive: bool) -> bytes:
    """Serialize the head of an SSE response."""
    headers = {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        "transfer-encoding": "chunked",
    }
    headers.update(response.headers)
    return ("\r\n".join(_head(response.status, headers, keep_alive)) + "\r\n\r\n").encode("latin-1")


def encode_chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


# --- multipart/form-data -------------------------------------------------------------------------


@dataclass(slots=True)
class FormPart:
    """One part of a multipart form."""

    name: str
    data: bytes
    filename: str | None = None
    content_type: str | None = None


def parse_multipart(body: bytes, content_type: str) -> dict[str, FormPart]:
    """Parse a multipart/form-data body into parts by field name.

    Raises:
        ValueError: The body or its boundary is malformed.
    """
    boundary = ""
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise ValueError("multipart body without a boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    parts: dict[str, FormPart] = {}
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        chunk = chunk[2:] if chunk.startswith(b"\r\n") else chunk
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise ValueError("multipart part without headers")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        name = filename = ctype = None
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                for item in value.split(";")[1:]:
                    k, _, v = item.strip().partition("=")
                    if k == "name":
                        name = v.strip('"')
                    elif k == "filename":
                        filename = v.strip('"')
            elif key.strip().lower() == "content-type":
                ctype = value.strip()
        if name is None:
            raise ValueError("multipart part without a name")
        parts[name] = FormPart(name, data, filename, ctype)
    return parts
