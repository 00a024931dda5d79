"""A minimal Anthropic Messages server for benchmarks, run in its own process.

It answers every ``POST`` (``/v1/messages``) after a fixed latency with a canned message, and does
as little work as possible per request so the numbers measure the client. Usage::

    python bench/_messages_server.py LATENCY_S   # prints the port, then serves

The emulator in ``pollux.testing`` is the faithful server for tests; this one is deliberately dumb.
"""

from __future__ import annotations

import asyncio
import json
import sys

_MESSAGE = json.dumps(
    {
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
    separators=(",", ":"),
).encode()
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    % len(_MESSAGE)
    + _MESSAGE
)


class _Server(asyncio.Protocol):
    latency = 0.0

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
            self.buffer = self.buffer[total:]
            if self.latency > 0:
                self.loop.call_later(self.latency, self._send, _RESPONSE)
            else:
                self._send(_RESPONSE)

    def _send(self, reply: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(reply)


async def _main(latency: float) -> None:
    _Server.latency = latency
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Server, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(float(sys.argv[1])))
