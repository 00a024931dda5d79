"""A minimal Chat Completions server for benchmarks, run in its own process.

It answers ``POST .../chat/completions`` after a fixed latency with a canned completion (or, when
the body asks for ``"stream": true``, with a fixed number of SSE chunks), and does as little work as
possible per request so the numbers measure the client. Usage::

    python bench/_chat_server.py LATENCY_S STREAM_CHUNKS   # prints the port, then serves

The emulator in ``pollux.testing`` is the faithful server for tests; this one is deliberately dumb.
"""

from __future__ import annotations

import asyncio
import json
import sys

_COMPLETION = json.dumps(
    {
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
    separators=(",", ":"),
).encode()
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(
    _COMPLETION
)
_RESPONSE = _HEAD + _COMPLETION


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


class _Server(asyncio.Protocol):
    latency = 0.0
    stream_response = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buffer[:end].split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            body = self.buffer[end + 4 : total]
            self.buffer = self.buffer[total:]
            streaming = b'"stream":true' in body or b'"stream": true' in body
            reply = self.stream_response if streaming else _RESPONSE
            if self.latency > 0:
                self.loop.call_later(self.latency, self._send, reply)
            else:
                self._send(reply)

    def _send(self, reply: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(reply)


async def _main(latency: float, chunks: int) -> None:
    _Server.latency = latency
    _Server.stream_response = _stream_body(chunks)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Server, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(float(sys.argv[1]), int(sys.argv[2])))
