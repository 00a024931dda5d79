"""A minimal Gemini ``generateContent`` server for benchmarks, run in its own process.

It answers every POST after a fixed latency with one canned ``GenerateContentResponse`` and does
as little work as possible per request, so the numbers measure the client (the emulator's Gemini
wire is the faithful server for tests). Usage::

    python bench/_gemini_server.py LATENCY_S   # prints the port, then serves
"""

from __future__ import annotations

import asyncio
import json
import sys

_ANSWER = json.dumps(
    {
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
    separators=(",", ":"),
).encode()
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=UTF-8\r\n"
    b"Content-Length: %d\r\n\r\n" % len(_ANSWER)
) + _ANSWER


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
                self.loop.call_later(self.latency, self._send)
            else:
                self._send()

    def _send(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(_RESPONSE)


async def _main(latency: float) -> None:
    _Server.latency = latency
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Server, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(float(sys.argv[1])))
