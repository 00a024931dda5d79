"""The ``pollux`` command on garbage: never a traceback or a hang; exit 2 with one ``pollux:``
line and a hint.

Invocations run in this process, each in a thread that must finish within a time limit (a
FIFO or ``/dev/zero`` opened by mistake would block it forever): unknown commands and flags,
prompt, schema and handle files that are empty, junk, huge-integer, deeply nested or
self-referencing, FIFOs and devices in every path argument, bad URLs and base URLs, bytes that
are not UTF-8, and ledgers with damaged rows. A few run as real processes (stdin bytes, the
interpreter's exit path).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pollux._cli.main import main
from stress._report import Deadline, Outcome

HANG_S = 30.0
_KEYS = ("POLLUX_PROVIDER", "POLLUX_MODEL", "OPENAI_API_KEY", "POLLUX_LOCAL_BASE_URL")


def _files(tmp: Path) -> dict[str, str]:
    deep = "[" * 100_000 + "]" * 100_000
    texts = {
        "q.txt": "a\nb\n",
        "empty.txt": "",
        "junk.bin": os.urandom(2000).decode("latin-1"),
        "bigint.jsonl": '{"prompt": "x", "n": ' + "9" * 5000 + "}\n",
        "deep.jsonl": '{"prompt": "x", "n": ' + deep + "}\n",
        "noprompt.jsonl": '{"p": 1}\n',
        "schema_deep.json": '{"a": ' + "[" * 3000 + "]" * 3000 + "}",
        "schema_big.json": '{"type": "object", "maxLength": ' + "9" * 5000 + "}",
        "schema_ref.json": '{"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}',
        "schema_nan.json": '{"type": "number", "maximum": NaN}',
        "schema_list.json": "[1, 2]",
        "handle_big.json": '{"job_id": "x", "request_count": ' + "9" * 5000 + "}",
        "handle_deep.json": deep,
        "handle_junk.json": '{"job_id": 1e999, "provider": []}',
    }
    out: dict[str, str] = {}
    for name, text in texts.items():
        (tmp / name).write_text(text, encoding="latin-1" if name == "junk.bin" else "utf-8")
        out[name] = str(tmp / name)
    (tmp / "bad-utf8.txt").write_bytes(b"\xff\xfe question\n")
    out["bad-utf8.txt"] = str(tmp / "bad-utf8.txt")
    os.mkfifo(tmp / "fifo")
    out["fifo"] = str(tmp / "fifo")
    (tmp / "adir").mkdir()
    out["dir"] = str(tmp / "adir")
    out["missing"] = str(tmp / "missing.txt")
    # Ledgers with a damaged reservation row and a huge total.
    for name, sql, params in (
        ("led_res.db", "INSERT INTO reservations VALUES (?, ?, ?)", ("r", 9e18, "garbage")),
        ("led_total.db", "UPDATE ledger SET total = ? WHERE meter = 'steps'", ("1e999999999",)),
        ("led_nan.db", "UPDATE ledger SET total = ? WHERE meter = 'steps'", ("NaN",)),
    ):
        path = tmp / name
        code, err = _call(["ask", "x", "--mock", "--ledger", str(path), "--max-calls", "9"], tmp)
        assert code == 0, err
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(sql, params)
            db.commit()
        out[name] = str(path)
    return out


def _call(argv: list[str], cwd: Path) -> tuple[object, str]:
    """Run ``pollux ARGV``: its exit code (or "hang"/"Traceback: ...") and its stderr."""
    result: dict[str, object] = {"code": "hang", "err": ""}

    def run() -> None:
        err = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                result["code"] = main(argv)
        except SystemExit as exc:
            result["code"] = exc.code
        except BaseException as exc:  # a traceback would reach the user
            result["code"] = f"Traceback: {type(exc).__name__}: {exc}"[:300]
        result["err"] = err.getvalue()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_S)
    return result["code"], str(result["err"])


def _garbage(rng: random.Random, f: dict[str, str]) -> tuple[list[str], set[int]]:
    paths = [f[k] for k in f if not k.startswith("led_")] + ["/dev/zero", "/dev/null", "-", ""]
    names = ("bigint.jsonl", "deep.jsonl", "noprompt.jsonl", "empty.txt", "junk.bin")
    prompts_files = [f[k] for k in (*names, "bad-utf8.txt", "fifo", "dir", "missing")]
    schemas = [f[k] for k in f if k.startswith("schema_")] + [f["fifo"], "/dev/zero", f["dir"]]
    handles = [f[k] for k in f if k.startswith("handle_")] + [f["fifo"], "/dev/zero", f["junk.bin"]]
    ledgers = [f[k] for k in ("led_res.db", "led_total.db", "led_nan.db", "fifo", "dir")]
    ledgers += [f["junk.bin"], "/dev/null", "mysql://x/y", "postgresql://[::1#x", "pg-env:#x"]
    urls = ["http://[::1", "http://[::1]:99999/v1", "https://h:abc/", "ftp://x", "http://"]
    form = rng.randrange(8)
    if form == 0:
        return [rng.choice(["", "-", "--", "aks", "--nope", "\x7f"]), *rng.sample(paths, 2)], {2}
    if form == 1:
        return ["many", rng.choice(prompts_files), "--mock"], {2}
    if form == 2:
        return ["ask", "hi", "--mock", "--schema", rng.choice(schemas)], {2}
    if form == 3:
        return [rng.choice(["status", "collect", "cancel"]), rng.choice(handles)], {2}
    if form == 4:
        option = rng.choice(["--source", "--base-url"])
        argv = ["ask", "hi", "--mock"] if option == "--source" else ["check"]
        if option == "--base-url":
            argv += ["--provider", "local"]
        return [*argv, option, rng.choice(urls)], {0, 1, 2}  # the mock fetches no URL
    if form == 5:
        command = rng.choice([["ask", "hi"], ["many", f["q.txt"]]])
        # `many` records under its own run label, which a damaged total of 'pollux ask' spares
        # (and whose --max-calls budget earlier trials may have spent: exit 1, prompts refused).
        allowed = {2} if command[0] == "ask" else {0, 1, 2}
        return [*command, "--mock", "--ledger", rng.choice(ledgers), "--max-calls", "9"], allowed
    if form == 6:
        return [
            "many",
            f["q.txt"],
            "--mock",
            "--out",
            rng.choice([f["fifo"], "/dev/zero", f["dir"]]),
        ], {2}
    words = ["ask", "many", "defer", "status", "collect", "cancel", "check", "--mock", "--json",
             "--ledger", "--replay", "--schema", "--source", "--out", "--handle", "--max-usd",
             "-1", "1e999", "nan", "\udcff", *paths]  # fmt: skip
    return [rng.choice(words) for _ in range(rng.randrange(7))], {0, 1, 2}


def _check(argv: list[str], allowed: set[int], code: object, err: str, o: Outcome) -> None:
    shown = [a[:40] for a in argv]
    if code == "hang":
        o.worst += 1
        o.fail(f"hang (> {HANG_S:g} s) for {shown}")
    elif not isinstance(code, int) or "Traceback" in err:
        o.fail(f"traceback for {shown}: {str(code)[:160]} {err.strip().splitlines()[-1:]}")
    elif code not in allowed:
        o.fail(f"exit {code} (allowed {sorted(allowed)}) for {shown}: {err.strip()[:160]}")
    elif code == 2:
        lines = err.splitlines()
        pairs = itertools.pairwise(lines)
        if not any(a.startswith("pollux: ") and b.startswith("hint: ") for a, b in pairs):
            o.fail(f"exit 2 without a 'pollux:' line and a hint for {shown}: {err[:160]!r}")


def run(scale: float) -> list[Outcome]:
    outcome = Outcome(
        "pollux cli garbage",
        "the pollux command on garbage: never a traceback or a hang; exit 2, one line + hint",
        cap=max(1, int(800 * scale)),
    )
    started = time.monotonic()
    rng = random.Random(3131)
    saved = {k: os.environ.pop(k) for k in _KEYS if k in os.environ}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cwd = Path(tmp)
            files = _files(cwd)
            deadline = Deadline(120 * scale, outcome.cap)
            while deadline.more():
                argv, allowed = _garbage(rng, files)
                code, err = _call(argv, cwd)
                _check(argv, allowed, code, err, outcome)
                outcome.trials += 1
            env = {k: v for k, v in os.environ.items() if k not in _KEYS}
            for data in (b"\xff\xfe hi\n", b"\x00" * 100, os.urandom(500)):
                for command in (["ask", "-", "--mock"], ["many", "-", "--mock"]):
                    done = subprocess.run(
                        [sys.executable, "-m", "pollux._cli.main", *command],
                        input=data, capture_output=True, env=env, cwd=cwd, timeout=120, check=False,
                    )  # fmt: skip
                    err = done.stderr.decode("utf-8", "replace")
                    _check(command, {0, 1, 2}, done.returncode, err, outcome)
                    outcome.trials += 1
                    outcome.cap += 1
    finally:
        os.environ.update(saved)
    outcome.seconds = time.monotonic() - started
    outcome.figure = (
        f"{outcome.trials} invocations: {outcome.failures} broke the rule, {outcome.worst} hung"
    )
    return [outcome]


if __name__ == "__main__":
    for o in run(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0):
        print(o.name, o.verdict, o.figure, json.dumps(o.notes, indent=1))
