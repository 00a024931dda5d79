"""Issue 31: the pollux command on hostile input: one ``pollux:`` line and exit 2, never a
traceback or a hang (FIFOs, devices, huge numbers, deep nesting, bad URLs, non-UTF-8 bytes,
damaged ledger rows)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from pollux._cli.main import main

from ._run import POLLUX, clean_env


def _in_process(args: list[str], cwd: Path, stdin: str = "") -> tuple[int, str]:
    """``pollux ARGS`` in this process, in a thread that must finish (a FIFO would block it)."""
    result: dict[str, object] = {}

    def run() -> None:
        err = io.StringIO()
        old = os.getcwd()
        try:
            os.chdir(cwd)
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                import sys

                sys.stdin = io.StringIO(stdin)
                result["code"] = main(args)
        except BaseException as exc:  # a traceback would reach the user
            result["code"] = f"{type(exc).__name__}: {exc}"
        finally:
            os.chdir(old)
            result["err"] = err.getvalue()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"pollux {args} hangs"
    return result["code"], str(result["err"])  # type: ignore[return-value]


def _one_line(code: object, err: str) -> None:
    assert code == 2, (code, err)
    lines = err.splitlines()
    assert lines[0].startswith("pollux: ") and lines[1].startswith("hint: "), err
    assert len(lines) == 2, err


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    (tmp_path / "q.txt").write_text("a\nb\n")
    (tmp_path / "big.jsonl").write_text('{"prompt": "x", "n": ' + "9" * 5000 + "}\n")
    (tmp_path / "deep.jsonl").write_text(
        '{"prompt": "x", "n": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    )
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * 3000 + "]" * 3000 + "}")
    (tmp_path / "big.json").write_text('{"type": "object", "maxLength": ' + "9" * 5000 + "}")
    (tmp_path / "ref.json").write_text(
        '{"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}'
    )
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ["many", "big.jsonl", "--mock"],
        ["many", "deep.jsonl", "--mock"],
        ["ask", "hi", "--mock", "--schema", "deep.json"],
        ["ask", "hi", "--mock", "--schema", "big.json"],
        ["ask", "hi", "--mock", "--schema", "ref.json"],
        ["ask", "hi", "--mock", "--source", "http://[::1"],
        ["check", "--provider", "local", "--base-url", "http://[::1"],
        ["status", "big.json"],
        ["status", "deep.json"],
        ["collect", "deep.json"],
        ["cancel", "big.json"],
        ["many", "/dev/zero", "--mock"],
        # Every path the command reads or writes, given a FIFO.
        ["many", "fifo", "--mock"],
        ["many", "q.txt", "--mock", "--out", "fifo"],
        ["many", "q.txt", "--mock", "--ledger", "fifo"],
        ["many", "q.txt", "--mock", "--ledger", "fifo", "--replay"],
        ["ask", "hi", "--mock", "--ledger", "fifo"],
        ["ask", "hi", "--mock", "--schema", "fifo"],
        ["ask", "hi", "--mock", "--source", "fifo"],
        ["defer", "fifo", "--provider", "openai", "--model", "m", "--handle", "h.json"],
        ["status", "fifo"],
        ["collect", "fifo"],
        ["cancel", "fifo"],
        ["ask", "hi", "--mock", "--ledger", "/dev/null"],
        ["many", "q.txt", "--mock", "--quota-rpm", "100", "--quota-store", "fifo"],
        ["many", "q.txt", "--mock", "--quota-rpm", "100", "--quota-store", "/dev/null"],
    ],
)
def test_hostile_input_is_one_line_and_exit_2(hostile: Path, args: list[str]) -> None:
    journal = Path("/dev/null-journal").exists()  # left by something else on this machine
    _one_line(*_in_process(args, hostile))
    assert journal or not Path("/dev/null-journal").exists()


def test_collect_out_fifo_is_refused(hostile: Path) -> None:
    (hostile / "job.json").write_text(json.dumps({"job_id": "x"}))
    code, err = _in_process(["collect", "job.json", "--out", "fifo"], hostile)
    assert code == 2 and "Traceback" not in err


def test_invalid_utf8_on_stdin_or_in_argv_is_one_line(tmp_path: Path) -> None:
    for args, data in (
        (["ask", "-", "--mock"], b"\xff\xfe hi\n"),
        (["many", "-", "--mock"], b"\xff\n"),
    ):
        done = subprocess.run(
            [str(POLLUX), *args], input=data, capture_output=True, cwd=tmp_path, env=clean_env(),
            timeout=120, check=False,
        )  # fmt: skip
        err = done.stderr.decode()
        assert done.returncode == 2 and "not UTF-8" in err and "Traceback" not in err, err
    _one_line(*_in_process(["ask", "\udcff\udcfe", "--mock"], tmp_path))


def _damaged_ledger(tmp_path: Path, sql: str, params: tuple[object, ...]) -> None:
    code, err = _in_process(
        ["ask", "hi", "--mock", "--ledger", "runs.db", "--max-calls", "5"], tmp_path
    )
    assert code == 0, err
    with contextlib.closing(sqlite3.connect(tmp_path / "runs.db")) as db:
        db.execute(sql, params)
        db.commit()


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("INSERT INTO reservations VALUES (?, ?, ?)", ("r1", 9e18, "garbage")),
        ("UPDATE ledger SET total = ? WHERE meter = 'steps'", ("1e999999999",)),
    ],
)
def test_a_damaged_ledger_row_is_one_line(
    tmp_path: Path, sql: str, params: tuple[object, ...]
) -> None:
    _damaged_ledger(tmp_path, sql, params)
    # A new question (the same one would be served from the ledger, which decides what was
    # answered): its budget check meets the damaged row.
    code, err = _in_process(
        ["ask", "hi again", "--mock", "--ledger", "runs.db", "--max-calls", "5"], tmp_path
    )
    assert code == 2 and "Traceback" not in err and "Error:" not in err, err
    # One line and its hint (no cost line read from the damaged ledger).
    assert err.startswith(("pollux: --ledger runs.db: ", "pollux: ledger integrity error: ")), err
    assert err.count("\n") == 2 and "\nhint: " in err, err


def test_a_ledger_that_cannot_open_says_why(tmp_path: Path) -> None:
    code, err = _in_process(["ask", "hi", "--mock", "--ledger", "x\x00y.db"], tmp_path)
    assert code == 2, err
    assert "(ValueError)" not in err and "null" in err.lower(), err
