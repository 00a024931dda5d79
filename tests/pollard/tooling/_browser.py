"""One headless Chromium for many pages, driven over the DevTools protocol on a pipe.

Starting Chromium costs a second or two; loading a page in a running one costs milliseconds. So
the HTML tests (and ``bench/bench_run_view.py`` and the docs' screenshot script) start one
browser, open each page in it, run a little JavaScript to read the DOM the page built, and
close the browser at the end. ``--remote-debugging-pipe`` speaks JSON messages separated by NUL
bytes on file descriptors 3 (to the browser) and 4 (from it): no port, no extra dependency.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["CANDIDATES", "Browser", "find_chromium"]

_KEY_CODES = {
    "Enter": 13,
    "PageUp": 33,
    "PageDown": 34,
    "End": 35,
    "Home": 36,
    "ArrowLeft": 37,
    "ArrowUp": 38,
    "ArrowRight": 39,
    "ArrowDown": 40,
}
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The first Chromium on PATH, or None."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """A headless Chromium with one tab; `open` loads a page, `evaluate` runs JavaScript in it."""

    def __init__(self, executable: str, *, width: int = 1400, height: int = 1000) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="pollard-chromium-")
        to_child, self._send = os.pipe()
        self._recv, from_child = os.pipe()

        def wire() -> None:  # in the child: the protocol pipes become fds 3 and 4
            # (through fresh, higher numbers first: either end may itself be 3 or 4)
            inbound, outbound = os.dup(to_child), os.dup(from_child)
            os.dup2(inbound, 3)
            os.dup2(outbound, 4)

        self._proc = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),  # kept open past the close_fds that follows preexec_fn
            preexec_fn=wire,  # single-threaded use at start-up
        )
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._next = 0
        self._events: list[dict[str, Any]] = []
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session = attached["sessionId"]
        self._call("Page.enable", session=True)
        self._call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )

    # -- the protocol ------------------------------------------------------------------------
    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._recv, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        loaded: dict[str, Any] = json.loads(message)
        return loaded

    def _call(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = False
    ) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._send, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def _wait_event(self, method: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n, event in enumerate(self._events):
                if event.get("method") == method:
                    del self._events[: n + 1]
                    return
            self._events.append(self._read())
        raise TimeoutError(method)

    # -- what the tests use ------------------------------------------------------------------
    def open(self, page: Path | str, fragment: str = "") -> None:
        """Load ``page`` (a file path or a URL) and wait for its load event."""
        url = page.as_uri() if isinstance(page, Path) else page
        self._events.clear()
        self._call("Page.navigate", {"url": "about:blank"}, session=True)
        self._wait_event("Page.loadEventFired")
        self._call(
            "Page.navigate", {"url": url + (f"#{fragment}" if fragment else "")}, session=True
        )
        self._wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (exceptions raise)."""
        result = self._call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(str(result["exceptionDetails"])[:2000])
        return result["result"].get("value")

    def dom(self) -> str:
        """The document as the page's script left it (without the embedded run data)."""
        text: str = self.evaluate(
            "(() => { const d = document.getElementById('pollard-data'); if (!d) "
            "return document.documentElement.outerHTML; const t = d.textContent; "
            "d.textContent = ''; const h = document.documentElement.outerHTML; "
            "d.textContent = t; return h; })()"
        )
        return text

    def press(self, key: str) -> None:
        """Press and release one key (``ArrowDown``, ``End``, ``Enter``, ...) in the page."""
        code = _KEY_CODES[key]
        for kind in ("keyDown", "keyUp"):
            self._call(
                "Input.dispatchKeyEvent",
                {"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": code},
                session=True,
            )

    def color_scheme(self, scheme: str) -> None:
        """Emulate the reader's ``prefers-color-scheme`` (``light`` or ``dark``)."""
        self._call(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
            session=True,
        )

    def screenshot(self, path: Path) -> None:
        """Save the visible viewport as a PNG."""
        data = self._call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        """Close the browser (and its profile directory)."""
        with contextlib.suppress(RuntimeError, OSError):
            self._call("Browser.close")
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._send, self._recv):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
