"""The one canned server for every provider wire, for benchmarks, run in its own process.

It answers each request after a fixed latency with a canned success body picked by the path:
``/chat/completions`` (local, OpenRouter), ``/responses`` (OpenAI), ``/messages`` (Anthropic),
``:generateContent`` (Gemini), and OpenRouter's ``GET /models`` catalog. With ``STREAM_CHUNKS``,
a Chat Completions body asking for ``"stream": true`` gets that many SSE chunks instead. It does
as little work as possible per request so the numbers measure the client (the emulator in
``pollux.testing`` is the faithful server for tests). Usage::

    python bench/_canned_server.py LATENCY_S [STREAM_CHUNKS]   # prints the port, then serves

``bench/_fanout.py`` (``canned_server``) starts it for the benches.
"""

from __future__ import annotations

import asyncio
import json
import sys

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
            head = self.buffer[:end]
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            body = self.buffer[end + 4 : total]
            self.buffer = self.buffer[total:]
            path = head.split(b" ", 2)[1].split(b"?", 1)[0]
            reply = next((r for suffix, r in _RESPONSES if path.endswith(suffix)), _NOT_FOUND)
            if self.stream_response and (b'"stream":true' in body or b'"stream": true' in body):
                reply = self.stream_response
            if self.latency > 0:
                self.loop.call_later(self.latency, self._send, reply)
            else:
                self._send(reply)

    def _send(self, reply: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(reply)


async def _main(latency: float, chunks: int) -> None:
    _Server.latency = latency
    _Server.stream_response = _stream_body(chunks) if chunks else b""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Server, "127.0.0.1", 0, backlog=2048)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0))
