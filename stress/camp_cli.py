"""The ``pollard`` CLI on garbage input: never a traceback, one ``pollard:`` line and exit 2."""

from __future__ import annotations

import contextlib
import io
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pollard import Runtime
from pollard.cli import main
from stress._report import Deadline, Outcome

COMMANDS = ["runs", "show", "report", "verify", "seal", "merge", "gc", "export", "import"]
FLAGS = ["--json", "--payloads", "--unicode", "--html", "--output", "--replay", "--expect-seal"]


def _fixtures(tmp: Path) -> dict[str, str]:
    good = tmp / "good.db"
    with Runtime(good) as runtime:
        run = runtime.run("fixture")
        for i in range(5):
            run.note({"i": i})
    damaged = tmp / "damaged.db"
    data = bytearray(good.read_bytes())
    for offset in range(4096, len(data), 4096):  # every page after the header page
        data[offset : offset + 600] = os.urandom(600)
    damaged.write_bytes(bytes(data))
    junk = tmp / "junk.db"
    junk.write_bytes(os.urandom(3000))
    empty = tmp / "empty.db"
    empty.write_bytes(b"")
    truncated = tmp / "truncated.db"
    truncated.write_bytes(good.read_bytes()[:1500])
    (tmp / "adir").mkdir()
    subtree = tmp / "tree.json"
    subtree.write_text('{"format": "pollard/subtree/v1", "nodes": [1e999, {"id": 10}]}')
    return {
        "good": str(good),
        "damaged": str(damaged),
        "junk": str(junk),
        "empty": str(empty),
        "truncated": str(truncated),
        "dir": str(tmp / "adir"),
        "missing": str(tmp / "missing.db"),
        "tree": str(subtree),
    }


def _garbage(rng: random.Random, files: dict[str, str]) -> tuple[list[str], set[int]]:
    """One argv and the exit codes allowed for it."""
    bad_stores = [
        files["junk"],
        files["empty"],
        files["dir"],
        files["missing"],
        "",
        "#",
        "pg-env:#x",
        "pg-env:POLLARD_STRESS_UNSET#x",
        "postgresql://127.0.0.1:1/x#s",
        "mysql://db/x",
        "x" * 5000,
        "\udcff\udcfe.db",
    ]
    roots = ["", "zz", "0" * 64, "f" * 63, "-1", "\u2603", "a" * 10000, "%s%n", "..", "fixture"]
    form = rng.randrange(6)
    command = rng.choice(COMMANDS)
    if form == 0:  # an unknown command or flag
        word = rng.choice(["", "-", "--", "rnus", "verify2", "--nope", "\x7f", "-x"])
        return [word, *rng.sample(FLAGS, 2)], {2}
    if form == 1:  # a store that is not a pollard store
        store = rng.choice(bad_stores)
        argv = {
            "runs": ["runs", store],
            "show": ["show", store, "fixture"],
            "report": ["report", store, "fixture"],
            "verify": ["verify", store],
            "seal": ["seal", store, "fixture"],
            "merge": ["merge", files["good"] + ".out", store],
            "gc": ["gc", store, "compact"],
            "export": ["export", store, "fixture", files["dir"] + "/x.json"],
            "import": ["import", store, files["good"] + ".imp"],
        }[command]
        return argv, {2}
    if form == 2:  # a good store, a root that matches nothing
        root = rng.choice([r for r in roots if r != "fixture"])
        return [rng.choice(["show", "report", "seal"]), files["good"], root], {2}
    if form == 3:  # missing or extra arguments
        return [command, *(rng.choice(bad_stores) for _ in range(rng.randrange(4)))], {2}
    if form == 4:  # a damaged or truncated SQLite file: an integrity finding, never a crash
        damaged = rng.choice([files["damaged"], files["truncated"]])
        if rng.random() < 0.5:
            return ["verify", damaged, *rng.sample(["--json"], rng.randrange(2))], {1}
        return [rng.choice(["runs", "show", "report"]), damaged, "fixture"][:3], {1, 2}
    tokens = [rng.choice([*COMMANDS, *FLAGS, *roots, *bad_stores]) for _ in range(rng.randrange(7))]
    return tokens, {0, 1, 2}


def _run_in_process(argv: list[str]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | None = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else None
        except BaseException as exc:  # a traceback would reach the user
            err.write(f"Traceback: {type(exc).__name__}: {exc}")
            code = None
    return code, out.getvalue(), err.getvalue()


def _check(
    argv: list[str], allowed: set[int], result: tuple[int | None, str, str], o: Outcome
) -> None:
    code, _, err = result
    shown = [a[:40] for a in argv]
    if code is None or "Traceback" in err:
        o.fail(f"traceback for {shown}: {err.strip().splitlines()[-1:]}")
    elif code not in allowed:
        o.fail(f"exit {code} (allowed {sorted(allowed)}) for {shown}: {err.strip()[:120]}")
    elif code == 2 and (len(err.splitlines()) != 1 or not err.startswith("pollard: ")):
        o.fail(f"exit 2 without one 'pollard:' line for {shown}: {err[:160]!r}")


def run(scale: float) -> list[Outcome]:
    outcome = Outcome(
        "cli garbage",
        "garbage arguments and files: never a traceback; exit 2 with one pollard: line",
        cap=max(1, int(1500 * scale)),
    )
    started = time.monotonic()
    rng = random.Random(1414)
    env = {k: v for k, v in os.environ.items() if k != "POLLARD_STRESS_UNSET"}
    with tempfile.TemporaryDirectory() as tmp:
        files = _fixtures(Path(tmp))
        deadline = Deadline(60 * scale, outcome.cap)
        while deadline.more():
            argv, allowed = _garbage(rng, files)
            _check(argv, allowed, _run_in_process(argv), outcome)
            outcome.trials += 1
        # A few as real processes: the interpreter's own exit path, stderr encoding.
        for _ in range(max(1, int(15 * scale))):
            argv, allowed = _garbage(rng, files)
            argv = [a.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for a in argv]
            done = subprocess.run(
                [sys.executable, "-m", "pollard.cli", *argv],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
            _check(argv, allowed, (done.returncode, done.stdout, done.stderr), outcome)
            outcome.trials += 1
            outcome.cap += 1
    outcome.seconds = time.monotonic() - started
    outcome.figure = f"{outcome.trials} invocations, {outcome.failures} broke the rule"
    return [outcome]
