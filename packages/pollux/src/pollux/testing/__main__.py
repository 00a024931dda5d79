"""Run the emulator as a standalone server: ``python -m pollux.testing --port 8765``.

A standalone server has no test driving its virtual clock, so here the clock follows the wall
clock (``--clock-rate`` virtual seconds per real second) and batch jobs run on a fast schedule
(``STANDALONE_BATCH_DURATIONS``, about a second and a half from submit to completed): the
documented offline ``pollux defer`` / ``pollux collect --wait`` workflow finishes by itself.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from ._emulator._emulator import Emulator

#: Virtual seconds per batch stage when the server runs standalone (the library's defaults, 12 s
#: in all, suit tests that call ``advance``; a person at a shell should not wait for them).
STANDALONE_BATCH_DURATIONS = {
    "validating": 0.2,
    "in_progress": 1.0,
    "finalizing": 0.2,
    "cancelling": 0.2,
}
_TICK_S = 0.05


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; prints ``listening on <origin>`` once ready."""
    parser = argparse.ArgumentParser(prog="python -m pollux.testing", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added latency per request")
    parser.add_argument("--api-key", default=None, help="require this API key")
    parser.add_argument("--record", action="store_true", help="keep a request log (uses memory)")
    parser.add_argument(
        "--clock-rate",
        type=float,
        default=1.0,
        help="virtual seconds per real second (default 1: batch jobs complete in about 1.5 s); "
        "0 stops the clock (it then moves only through POST /_emulator/advance)",
    )
    parser.add_argument(
        "--options", default="{}", help="more Emulator keyword arguments, as a JSON object"
    )
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    if not isinstance(options, dict):
        parser.error("--options takes a JSON object")
    if not args.clock_rate >= 0:
        parser.error("--clock-rate takes a number >= 0")
    options["batch_durations"] = STANDALONE_BATCH_DURATIONS | dict(
        options.get("batch_durations") or {}
    )
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
            last = time.monotonic()
            while not stop.wait(_TICK_S):
                if args.clock_rate:
                    now = time.monotonic()
                    emu.advance((now - last) * args.clock_rate)
                    last = now
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
