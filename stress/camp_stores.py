"""Damaged stores and FIFOs: damage is an integrity finding or an ``IntegrityError``, never a
crash or a hang; a path that is not a regular file is refused by both commands.

Each trial copies a good SQLite store, damages it one way (a meta that is a JSON array, a
payload nested 5,000 deep, an integer of 5,000 digits, ledger totals such as ``1e999999999``,
``NaN`` or text, reservations and window events that are not amounts, random bytes over a
page), then runs every reading command of ``pollard`` and one budgeted step on it. Then every
path argument of ``pollard`` and ``pollux`` is given a FIFO (and a device): each must be
refused at once (exit 2), not block.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pollard import Budget, PollardError, Runtime
from pollard.cli import main as pollard_main
from pollard.meters import StepMeter
from pollux._cli.main import main as pollux_main
from stress._report import Deadline, Outcome

HANG_S = 30.0
DEEP = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
DAMAGE: list[tuple[str, str, tuple[object, ...]]] = [
    ("meta array", "UPDATE nodes SET meta = ?", ("[1, 2]",)),
    ("meta scalar", "UPDATE nodes SET meta = ?", ("7",)),
    ("deep payload", "UPDATE nodes SET payload = ? WHERE kind != 0", (DEEP,)),
    ("deep result", "UPDATE nodes SET result = ? WHERE result IS NOT NULL", (DEEP,)),
    ("huge int", "UPDATE nodes SET payload = ? WHERE kind != 0", ('{"n": ' + "9" * 5000 + "}",)),
    ("invalid JSON", "UPDATE nodes SET meta = ?", ("{nope",)),
    ("total 1e999999999", "UPDATE ledger SET total = ?", ("1e999999999",)),
    ("total -1e999999999", "UPDATE ledger SET total = ?", ("-1e999999999",)),
    ("total 1e-999999999", "UPDATE ledger SET total = ?", ("1e-999999999",)),
    ("total NaN", "UPDATE ledger SET total = ?", ("NaN",)),
    ("total text", "UPDATE ledger SET total = ?", ("lots",)),
    ("reservation junk", "INSERT INTO reservations VALUES ('r', 9e18, ?)", ("garbage",)),
    (
        "reservation huge",
        "INSERT INTO reservations VALUES ('r', 9e18, ?)",
        ('[["budget", "k", "steps", "1e999999999"]]',),
    ),
    ("window event", "INSERT INTO window_events VALUES ('w', 'steps', 0, ?)", ("1e999999999",)),
]


def _call(main: Callable[[list[str]], int], argv: list[str]) -> tuple[object, str]:
    result: dict[str, object] = {"code": "hang", "err": ""}

    def run() -> None:
        err = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                result["code"] = main(argv)
        except SystemExit as exc:
            result["code"] = exc.code
        except BaseException as exc:
            result["code"] = f"Traceback: {type(exc).__name__}: {exc}"[:300]
        result["err"] = err.getvalue()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_S)
    return result["code"], str(result["err"])


def _good(path: Path) -> None:
    with Runtime(path, meters=[StepMeter()]) as runtime:
        run = runtime.run("fixture", budget=Budget(steps=1000))
        for i in range(3):
            run.model_call({"model": "m", "i": i}, fn=lambda _: {"text": "x"})
        run.note({"n": 1})


def _damaged_trial(rng: random.Random, good: Path, tmp: Path, o: Outcome) -> None:
    store = tmp / f"d{o.trials}.db"
    shutil.copyfile(good, store)
    name, sql, params = rng.choice(DAMAGE)
    if rng.random() < 0.15:
        name = "random page bytes"
        data = bytearray(store.read_bytes())
        at = rng.randrange(4096, max(4097, len(data) - 600))
        data[at : at + 600] = os.urandom(600)
        store.write_bytes(bytes(data))
    else:
        with contextlib.closing(sqlite3.connect(store)) as db:
            db.execute(sql, params)
            db.commit()
    argv = rng.choice(
        [
            ["runs", str(store)], ["show", str(store), "fixture"],
            ["report", str(store), "fixture"], ["report", "--json", str(store), "fixture"],
            ["verify", str(store)],
            ["verify", "--json", str(store)], ["seal", str(store), "fixture"],
            ["gc", str(store), "compact"], ["merge", str(tmp / f"m{o.trials}.db"), str(store)],
            ["export", str(store), "fixture", str(tmp / f"e{o.trials}.json")],
        ]
    )  # fmt: skip
    code, err = _call(pollard_main, argv)
    shown = f"{name}: pollard {' '.join(a[-20:] for a in argv)}"
    if code == "hang":
        o.worst += 1
        o.fail(f"hang for {shown}")
    elif not isinstance(code, int) or "unexpected" in err or "Traceback" in err:
        o.fail(f"crash for {shown}: {str(code)[:120]} {err.strip()[:160]}")
    elif code not in (0, 1, 2):
        o.fail(f"exit {code} for {shown}")
    # The next budgeted step: an IntegrityError (a PollardError), never a raw decimal error.
    if name.startswith(("total", "reservation", "window")):
        step: dict[str, object] = {}

        def budgeted() -> None:
            try:
                with Runtime(store, meters=[StepMeter()]) as runtime:
                    run = runtime.run("fixture", budget=Budget(steps=1000))
                    run.model_call({"model": "m", "next": 1}, fn=lambda _: {"text": "y"})
                step["error"] = None
            except PollardError as exc:
                step["error"] = exc
            except BaseException as exc:
                step["error"] = f"{type(exc).__name__}: {exc}"[:200]

        thread = threading.Thread(target=budgeted, daemon=True)
        thread.start()
        thread.join(HANG_S)
        if thread.is_alive():
            o.worst += 1
            o.fail(f"the next budgeted step hangs on {name}")
        elif isinstance(step.get("error"), str):
            o.fail(f"the next budgeted step on {name} raised {step['error']}")


def _fifo_commands(tmp: Path, good: Path) -> list[tuple[str, list[str]]]:
    fifo = str(tmp / "fifo")
    q, g, h = str(tmp / "q.txt"), str(good), str(tmp / "h.json")
    out: list[tuple[str, list[str]]] = []
    for bad in (fifo, "/dev/zero", "/dev/null"):
        out += [
            ("pollard", ["runs", bad]), ("pollard", ["show", bad, "x"]),
            ("pollard", ["report", bad, "x"]), ("pollard", ["verify", bad]),
            ("pollard", ["seal", bad, "x"]), ("pollard", ["merge", bad, g]),
            ("pollard", ["merge", str(tmp / "o.db"), bad]), ("pollard", ["gc", bad, "compact"]),
            ("pollard", ["export", bad, "x", str(tmp / "y.json")]),
            ("pollard", ["export", g, "fixture", bad]),
            ("pollard", ["import", bad, str(tmp / "i.db")]),
            ("pollard", ["import", str(tmp / "t.json"), bad]),
            ("pollard", ["show", g, "fixture", "--html", bad]),
            ("pollard", ["seal", g, "fixture", "--output", bad]),
            ("pollux", ["many", bad, "--mock"]),
            ("pollux", ["defer", bad, "--provider", "openai", "--model", "m", "--handle", h]),
            ("pollux", ["many", q, "--mock", "--out", bad]),
            ("pollux", ["many", q, "--mock", "--ledger", bad]),
            ("pollux", ["many", q, "--mock", "--ledger", bad, "--replay"]),
            ("pollux", ["ask", "hi", "--mock", "--ledger", bad]),
            ("pollux", ["ask", "hi", "--mock", "--schema", bad]),
            ("pollux", ["ask", "hi", "--mock", "--source", bad]),
            ("pollux", ["status", bad]), ("pollux", ["collect", bad]), ("pollux", ["cancel", bad]),
            ("pollux", ["collect", str(tmp / "h0.json"), "--out", bad]),
            ("pollux", ["many", q, "--mock", "--quota-rpm", "9", "--quota-store", bad]),
        ]  # fmt: skip
    return out


def run(scale: float) -> list[Outcome]:
    damaged = Outcome(
        "damaged stores",
        "a damaged store is an integrity finding or IntegrityError: never a crash or a hang",
        cap=max(1, int(300 * scale)),
    )
    fifos = Outcome(
        "FIFOs and devices",
        "every path argument of pollard and pollux refuses a FIFO or device at once (exit 2)",
    )
    started = time.monotonic()
    rng = random.Random(5000)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        good = tmp / "good.db"
        _good(good)
        deadline = Deadline(120 * scale, damaged.cap)
        while deadline.more():
            _damaged_trial(rng, good, tmp, damaged)
            damaged.trials += 1
        damaged.seconds = time.monotonic() - started
        damaged.figure = (
            f"{damaged.trials} damaged stores ({len(DAMAGE) + 1} shapes): "
            f"{damaged.failures} crashed or hung ({damaged.worst} hung)"
        )
        started = time.monotonic()
        os.mkfifo(tmp / "fifo")
        (tmp / "q.txt").write_text("a\n")
        (tmp / "t.json").write_text("{}")
        (tmp / "h0.json").write_text('{"job_id": "x"}')
        journal = Path("/dev/null-journal").exists()
        commands = _fifo_commands(tmp, good)
        fifos.cap = len(commands)
        for tool, argv in commands:
            main = pollard_main if tool == "pollard" else pollux_main
            code, err = _call(main, argv)
            fifos.trials += 1
            if code == "hang":
                fifos.worst += 1
                fifos.fail(f"{tool} {argv} hangs")
            elif code != 2 or "Traceback" in err or not err.startswith(f"{tool}: "):
                fifos.fail(f"{tool} {argv}: exit {code}: {err.strip()[:160]}")
        if not journal and Path("/dev/null-journal").exists():
            fifos.fail("a write command left /dev/null-journal")
        fifos.seconds = time.monotonic() - started
        fifos.figure = (
            f"{fifos.trials} path arguments given a FIFO, /dev/zero or /dev/null: "
            f"{fifos.failures} not refused ({fifos.worst} hung)"
        )
    return [damaged, fifos]


if __name__ == "__main__":
    import sys

    for o in run(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0):
        print(o.name, o.verdict, o.figure, o.notes)
