"""Run the emulator as a standalone server: ``python -m pollux.testing --port 8765``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from ._emulator._emulator import Emulator


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; prints ``listening on <origin>`` once ready."""
    parser = argparse.ArgumentParser(prog="python -m pollux.testing", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added latency per request")
    parser.add_argument("--api-key", default=None, help="require this API key")
    parser.add_argument("--record", action="store_true", help="keep a request log (uses memory)")
    parser.add_argument(
        "--options", default="{}", help="more Emulator keyword arguments, as a JSON object"
    )
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    if not isinstance(options, dict):
        parser.error("--options takes a JSON object")
    if args.latency_ms:
        options["latency"] = args.latency_ms / 1000
    if args.api_key:
        options["api_key"] = args.api_key
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    emulator = Emulator(port=args.port, record=args.record, **options)
    with emulator as emu:
        sys.stdout.write(f"listening on {emu.url}\n")
        for wire in emu.wires:
            sys.stdout.write(f"  {wire}: {emu.base_url(wire)}\n")
        sys.stdout.flush()
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
