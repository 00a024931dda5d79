"""A private Redis server that a campaign or a test may stop and restart.

The machine's server at 127.0.0.1:6379 is shared with other work and is never stopped; a Redis
outage is staged on a `redis-server` of its own: a free loopback port, nothing kept on disk, so
a restart comes back empty, as a server without persistence does.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path


class PrivateRedis:
    """A `redis-server` on a free loopback port that persists nothing (files in ``folder``)."""

    def __init__(self, folder: str | Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._command = [
            "redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
            "--save", "", "--appendonly", "no", "--dir", str(folder),
        ]  # fmt: skip
        self._server: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server (empty) and wait until it accepts connections."""
        self._server = subprocess.Popen(self._command, stdout=subprocess.DEVNULL)
        for _ in range(200):
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.1),
            ):
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("the private redis-server did not start")

    def stop(self) -> None:
        """Stop the server (what it held is gone: nothing was written to disk)."""
        if self._server is not None:
            self._server.terminate()
            self._server.wait(10)
            self._server = None
