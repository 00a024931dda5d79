"""The one canned server for every provider wire, for benchmarks, run in its own process.

It answers each request after a fixed latency with a canned success body picked by the path:
``/chat/completions`` (local, OpenRouter), ``/responses`` (OpenAI), ``/messages`` (Anthropic),
``:generateContent`` (Gemini), and OpenRouter's ``GET /models`` catalog. With ``STREAM_CHUNKS``,
a Chat Completions body asking for ``"stream": true`` gets that many SSE chunks instead. It does
as little work as possible per request so the numbers measure the client (the emulator in
``pollux.testing`` is the faithful server for tests), and ``GET /_bench/stats`` reports what it
cost: its CPU seconds, requests and how late answers left after their due time, since the last
such call (see "serving" below). Usage::

    python bench/_canned_server.py LATENCY_S [STREAM_CHUNKS]   # prints the port, then serves

``bench/_fanout.py`` (``canned_server``) starts it for the benches.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import sys
import time
from collections.abc import Coroutine
from typing import Any, cast

_BODIES: dict[bytes, object] = {
    b"/models": {"data": [{"id": "openai/gpt-5-nano", "context_length": 400000}]},
    b"/chat/completions": {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "The answer is 42."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5000, "completion_tokens": 6, "total_tokens": 5006},
    },
    b"/responses": {
        "id": "resp_bench",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "gpt-5-nano",
        "output": [
            {
                "type": "message",
                "id": "msg_bench",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "The answer is 42.", "annotations": []}
                ],
            }
        ],
        "usage": {"input_tokens": 5000, "output_tokens": 6, "total_tokens": 5006},
    },
    b"/messages": {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "The answer is 42."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 5000,
            "output_tokens": 6,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    },
    b":generateContent": {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "The answer is 42."}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 5000,
            "candidatesTokenCount": 6,
            "totalTokenCount": 5006,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "bench",
    },
}


def _response(body: object) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(data) + data


_RESPONSES = [(suffix, _response(body)) for suffix, body in _BODIES.items()]
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


def _stream_body(chunks: int) -> bytes:
    parts = [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    ]

    def event(payload: dict[str, object]) -> None:
        data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
        parts.append(b"%x\r\n%s\r\n" % (len(data), data))

    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    for i in range(chunks):
        delta = {"content": f"tok{i} "}
        event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": 10 + chunks}
    event({**base, "choices": [], "usage": usage})
    done = b"data: [DONE]\n\n"
    parts.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
    return b"".join(parts)


# -- serving ----------------------------------------------------------------------------------
#
# At C=256 the ideal rate is 5,120 requests/s, on a machine whose other core runs the client, so
# the server must not be what a client measures. Each request costs one head parse and one
# deque append: the latency is the same for every request, so due times arrive in order and one
# FIFO with one armed timer replaces a timer (a heap push) per request; each answer is a
# prebuilt byte string. uvloop runs the loop when it is installed (a dev dependency). The
# server measures itself: ``GET /_bench/stats`` answers its CPU seconds, request count and how
# late answers left after their due time (then resets), so a bench can show that the floor it
# reports is the client's, not this process's.

_STATS_PATH = b"/_bench/stats"


class _Replies:
    """Answers waiting for their due time, in due order, behind one timer."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.loop = asyncio.get_running_loop()
        self.queue: collections.deque[tuple[float, asyncio.Transport, bytes]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None
        self.requests = 0
        self.late: list[float] = []
        self.cpu0 = time.process_time()

    def add(self, transport: asyncio.Transport, reply: bytes) -> None:
        self.requests += 1
        if self.latency <= 0:
            transport.write(reply)
            return
        due = self.loop.time() + self.latency
        self.queue.append((due, transport, reply))
        if self.timer is None:
            self.timer = self.loop.call_at(due, self.flush)

    def flush(self) -> None:
        queue, now, late = self.queue, self.loop.time(), self.late
        while queue and queue[0][0] <= now:
            due, transport, reply = queue.popleft()
            late.append(now - due)
            if not transport.is_closing():
                transport.write(reply)
        self.timer = self.loop.call_at(queue[0][0], self.flush) if queue else None

    def stats(self) -> bytes:
        late = sorted(self.late)
        n = len(late)
        body = {
            "requests": self.requests,
            "cpu_s": time.process_time() - self.cpu0,
            "late_mean_ms": sum(late) / n * 1000 if n else 0.0,
            "late_p99_ms": late[min(n - 1, n * 99 // 100)] * 1000 if n else 0.0,
            "late_max_ms": late[-1] * 1000 if n else 0.0,
        }
        self.requests, self.late, self.cpu0 = 0, [], time.process_time()
        return _response(body)


class _Server(asyncio.Protocol):
    replies: _Replies
    stream_response = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        pos = 0
        while True:
            end = buffer.find(b"\r\n\r\n", pos)
            if end < 0:
                break
            # Content-Length is the only header read (every bench client sends one with a body).
            head = buffer[pos:end]
            at = head.find(b"Content-Length:")
            if at < 0:
                at = head.lower().find(b"content-length:")
            length = 0
            if at >= 0:
                stop = head.find(b"\r\n", at)
                length = int(head[at + 15 : stop if stop >= 0 else None])
            total = end + 4 + length
            if len(buffer) < total:
                break
            path = head[head.find(b" ") + 1 : head.find(b" HTTP/")].split(b"?", 1)[0]
            if path == _STATS_PATH:
                self.transport.write(self.replies.stats())
                pos = total
                continue
            reply = next((r for suffix, r in _RESPONSES if path.endswith(suffix)), _NOT_FOUND)
            if self.stream_response and length:
                body = buffer[end + 4 : total]
                if b'"stream":true' in body or b'"stream": true' in body:
                    reply = self.stream_response
            self.replies.add(self.transport, reply)
            pos = total
        self.buffer = buffer[pos:] if pos < len(buffer) else b""


async def _main(latency: float, chunks: int) -> None:
    _Server.replies = _Replies(latency)
    _Server.stream_response = _stream_body(chunks) if chunks else b""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Server, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Serve on uvloop when it is installed, else (or with ``CANNED_LOOP=asyncio``) on asyncio.

    On this server uvloop costs ~25-30 us of CPU per request against ~35-45 us for asyncio;
    its timers tick in whole milliseconds, so answers leave 0-1 ms after their due time.
    """
    uvloop: Any = None
    if os.environ.get("CANNED_LOOP") != "asyncio":
        with contextlib.suppress(ImportError):
            import uvloop
    if uvloop is None:
        asyncio.run(main)
    else:
        uvloop.run(main)


if __name__ == "__main__":
    _run(_main(float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0))
