"""`pollux many` through the console script: records as they arrive, partial results, resume,
Ctrl-C, and the progress display on a terminal and off one."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollard import SQLiteStore
from pollux.testing import Emulator, ErrorResponse, RecordedRequest

from ._run import POLLUX, clean_env, on_a_terminal, pollard, pollux

PROMPTS = ["Who are the twins?", "Which myth?", "Where is the star?"]


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _local(emu: Emulator, *extra: str) -> list[str]:
    return ["--provider", "local", "--model", "m", "--base-url", emu.base_url("local"), *extra]


def _prompt_of(request: RecordedRequest) -> str:
    return str(request.json["messages"][-1]["content"])


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_text_prompts_answered_into_jsonl(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n\n")  # blank lines are skipped
    (tmp_path / "doc.txt").write_text("Castor and Pollux.")
    result = pollux(
        "many", "q.txt", "--source", "doc.txt", "--out", "a.jsonl", "--mock", cwd=tmp_path
    )
    assert result.code == 0, result.stderr
    records = sorted(_records(tmp_path / "a.jsonl"), key=lambda r: r["index"])
    assert [r["index"] for r in records] == [0, 1, 2]
    assert [r["prompt"] for r in records] == PROMPTS
    assert all(r["status"] == "ok" for r in records)
    assert all("over 1 source(s)" in str(r["text"]) for r in records)
    assert all(r["usage"]["total_tokens"] > 0 for r in records)
    # Not a terminal: one plain progress line per prompt, then the summary.
    assert "[3/3] prompt" in result.stderr
    assert "3 of 3 answered" in result.stderr


def test_jsonl_prompts_and_records_on_stdout(tmp_path: Path) -> None:
    lines = [json.dumps({"prompt": p, "id": n}) for n, p in enumerate(PROMPTS)]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    result = pollux("many", "q.jsonl", "--mock", cwd=tmp_path)
    assert result.code == 0, result.stderr
    records = [json.loads(line) for line in result.lines]
    assert sorted(r["prompt"] for r in records) == sorted(PROMPTS)


def test_failed_prompts_keep_the_others_then_resume_runs_only_them(
    tmp_path: Path, emu: Emulator
) -> None:
    failing = {"on": True}

    def handler(request: RecordedRequest) -> ErrorResponse | None:
        if failing["on"] and "myth" in _prompt_of(request):
            return ErrorResponse(400, "This prompt is not allowed.")
        return None

    emu.on("local.chat", handler)
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    first = pollux("many", "q.txt", "--out", "a.jsonl", *_local(emu), cwd=tmp_path)
    assert first.code == 1
    by_index = {r["index"]: r for r in _records(tmp_path / "a.jsonl")}
    assert by_index[1]["status"] == "failed"
    assert "not allowed" in by_index[1]["error"]["message"]
    assert by_index[1]["error"]["hint"]
    assert by_index[0]["status"] == by_index[2]["status"] == "ok"
    assert "1 failed" in first.stderr

    failing["on"] = False
    emu.clear_requests()
    second = pollux("many", "q.txt", "--out", "a.jsonl", *_local(emu), cwd=tmp_path)
    assert second.code == 0, second.stderr
    assert [_prompt_of(r) for r in emu.requests_for("local.chat")] == ["Which myth?"]
    assert "2 earlier" in second.stderr
    latest = {r["index"]: r["status"] for r in _records(tmp_path / "a.jsonl")}
    assert latest == {0: "ok", 1: "ok", 2: "ok"}

    emu.clear_requests()
    third = pollux("many", "q.txt", "--out", "a.jsonl", *_local(emu), cwd=tmp_path)
    assert third.code == 0
    assert "already answered" in third.stderr
    assert emu.requests_for("local.chat") == []


def test_resume_refuses_an_out_file_of_other_prompts(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    assert pollux("many", "q.txt", "--out", "a.jsonl", "--mock", cwd=tmp_path).code == 0
    (tmp_path / "q.txt").write_text("Something else?\n" + "\n".join(PROMPTS[1:]) + "\n")
    result = pollux("many", "q.txt", "--out", "a.jsonl", "--mock", cwd=tmp_path)
    assert result.code == 2
    assert "differs from the prompts file" in result.stderr
    assert "hint: " in result.stderr and "Traceback" not in result.stderr


def test_a_torn_last_line_is_cut_off_on_resume(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    assert pollux("many", "q.txt", "--out", "a.jsonl", "--mock", cwd=tmp_path).code == 0
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["index"] != 2]
    (tmp_path / "a.jsonl").write_text("\n".join(kept) + '\n{"index": 2, "sta')
    result = pollux("many", "q.txt", "--out", "a.jsonl", "--mock", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert sorted(r["index"] for r in _records(tmp_path / "a.jsonl")) == [0, 1, 2]


def _wait_for(predicate: object, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def _third_in_flight(
    tmp_path: Path, emu: Emulator, args: list[str]
) -> Iterator[subprocess.Popen[str]]:
    """``pollux *args`` over four prompts in ``q.txt`` (writing ``a.jsonl``), yielded once two
    are written and the third is in flight; the emulator holds that one until the block ends."""
    release = threading.Event()

    def handler(request: RecordedRequest) -> None:
        if "slow" in _prompt_of(request):
            release.wait(60)  # holds the third prompt in flight until the block ends

    emu.on("local.chat", handler)
    prompts = ["first?", "second?", "slow third?", "fourth?"]
    (tmp_path / "q.txt").write_text("\n".join(prompts) + "\n")
    out = tmp_path / "a.jsonl"
    process = subprocess.Popen(
        [str(POLLUX), *args],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: out.exists() and len(out.read_text().splitlines()) == 2, "2 records")
        _wait_for(
            lambda: any("slow" in _prompt_of(r) for r in emu.requests_for("local.chat")),
            "the third prompt in flight",
        )
        yield process
    finally:
        release.set()
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize(
    "ledger", [[], ["--ledger", "runs.db", "--max-calls", "4"]], ids=["plain", "ledger"]
)
def test_ctrl_c_keeps_what_was_written_and_the_rerun_resumes(
    tmp_path: Path, emu: Emulator, ledger: list[str]
) -> None:
    out = tmp_path / "a.jsonl"
    args = ["many", "q.txt", "--out", "a.jsonl", "--concurrency", "1", *_local(emu), *ledger]
    with _third_in_flight(tmp_path, emu, args) as process:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted: 2 prompts not run" in stderr
    assert "Traceback" not in stderr
    assert [r["index"] for r in _records(out)] == [0, 1]

    emu.clear_requests()
    again = pollux(*args, cwd=tmp_path)
    assert again.code == 0, again.stderr
    assert [_prompt_of(r) for r in emu.requests_for("local.chat")] == ["slow third?", "fourth?"]
    assert [r["index"] for r in _records(out)] == [0, 1, 2, 3]
    if ledger:
        # The cancelled dispatch was recorded (and charged), the four answers are steps.
        tree = pollard("show", "runs.db", "pollux many q.txt", "--payloads", cwd=tmp_path)
        assert tree.code == 0, tree.stderr
        assert len(re.findall(r"^[|`]-- model_call ", tree.stdout, re.MULTILINE)) == 4
        assert "call_cancelled" in tree.stdout and "call_repeated" not in tree.stdout
        # The resume reused the cancelled call's charge: four prompts, four calls charged,
        # and --max-calls 4 refused nothing (it charged one step more, and refused the fourth
        # prompt, before resumes reused it).
        with SQLiteStore(tmp_path / "runs.db") as store:
            (root,) = store.roots()
            assert store.totals(root.id)["steps"] == 4
            third = [n for n in store.children(root.id) if "slow" in json.dumps(n.payload)]
        (answer,) = [n for n in third if n.kind.value == "model_call"]
        assert answer.meta["credited"]["steps"] == 1
        assert "spent steps=1 " in again.stderr and "run total steps=4 " in again.stderr


def test_records_on_the_same_terminal_get_plain_progress_lines(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    screen = on_a_terminal(tmp_path, "many", "q.txt", "--mock", stdout_too=True)
    assert "[3/3] prompt" in screen  # a live bar would be torn by the records between its frames
    assert screen.count('"status": "ok"') == 3


def test_live_progress_baron_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    screen = on_a_terminal(
        tmp_path, "many", "q.txt", "--out", "a.jsonl", "--mock", stdout_too=False
    )
    assert "\x1b[" in screen  # drawn with terminal control sequences, not plain lines
    assert "3/3" in screen and "0 failed" in screen and "tokens" in screen and "/s" in screen
    assert "[1/3] prompt" not in screen  # the plain lines are for pipes and logs
    assert len(_records(tmp_path / "a.jsonl")) == 3


@pytest.mark.parametrize(
    "ledger", [[], ["--ledger", "runs.db", "--max-calls", "4"]], ids=["plain", "ledger"]
)
def test_a_shared_file_is_uploaded_once_for_every_prompt(
    tmp_path: Path, emu: Emulator, ledger: list[str]
) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    (tmp_path / "doc.pdf").write_bytes(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")
    env = clean_env(OPENAI_BASE_URL=emu.base_url("openai"), OPENAI_API_KEY="sk-test")
    openai = ["--provider", "openai", "--model", "gpt-5-nano"]
    result = pollux("many", "q.txt", "--source", "doc.pdf", *openai, *ledger, cwd=tmp_path, env=env)
    assert result.code == 0, result.stderr
    routes = [request.route for request in emu.requests]
    assert routes.count("openai.responses.create") == 3
    assert routes.count("openai.files.create") == 1
    assert routes.count("openai.files.delete") == 1  # released when the run ends


def test_a_reader_that_goes_away_stops_the_command_quietly(tmp_path: Path) -> None:
    # More records than a pipe buffers, so the command is still writing when the reader leaves.
    (tmp_path / "q.txt").write_text("".join(f"Question {i}?\n" for i in range(2_000)))
    process = subprocess.Popen(
        [str(POLLUX), "many", "q.txt", "--mock"],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    assert json.loads(process.stdout.readline())["status"] == "ok"
    process.stdout.close()  # like `| head -1`
    stderr = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=60) == 1
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


def test_a_second_process_on_one_ledger_label_is_refused_in_one_line(
    tmp_path: Path, emu: Emulator
) -> None:
    release = threading.Event()

    def handler(request: RecordedRequest) -> None:
        if "slow" in _prompt_of(request):
            release.wait(60)  # holds the first command's prompt in flight

    emu.on("local.chat", handler)
    (tmp_path / "a.txt").write_text("slow first?\n")
    (tmp_path / "b.txt").write_text("other one?\nother two?\n")
    ledger = ["--ledger", "runs.db", "--label", "nightly"]
    first = subprocess.Popen(
        [str(POLLUX), "many", "a.txt", "--out", "a.jsonl", *_local(emu), *ledger],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: len(emu.requests_for("local.chat")) == 1, "the first command's call")
        second = pollux("many", "b.txt", "--out", "b.jsonl", *_local(emu), *ledger, cwd=tmp_path)
        release.set()
        _, first_err = first.communicate(timeout=60)
    finally:
        release.set()
        if first.poll() is None:
            first.kill()
    assert second.code == 2, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.startswith("pollux: --ledger")]
    assert lines == [
        "pollux: --ledger runs.db: run 'nightly' is being written by another process "
        "(one writer per run label), so this command sends nothing"
    ], second.stderr
    assert "hint: wait for the other command to finish" in second.stderr
    assert f"process {first.pid} on this host is still running it" in second.stderr
    assert "--label" in second.stderr and "Traceback" not in second.stderr
    assert "run total" not in second.stderr  # it sent nothing: no cost line to report
    assert [_prompt_of(r) for r in emu.requests_for("local.chat")] == ["slow first?"]
    assert first.returncode == 0, first_err
    # Once the first command ended, the second runs under the same label.
    again = pollux("many", "b.txt", "--out", "b.jsonl", *_local(emu), *ledger, cwd=tmp_path)
    assert again.code == 0, again.stderr
    with SQLiteStore(tmp_path / "runs.db") as store:
        (root,) = store.roots()
        answered = [n for n in store.children(root.id) if n.kind.value == "model_call"]
    assert len(answered) == 3


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("where", ["this host", "another host"])
def test_a_resume_after_kill_9_runs_at_once_unless_the_writer_was_elsewhere(
    tmp_path: Path, emu: Emulator, where: str
) -> None:
    out = tmp_path / "a.jsonl"
    args = ["many", "q.txt", "--out", "a.jsonl", "--concurrency", "1", *_local(emu)]
    args += ["--ledger", "runs.db", "--label", "nightly", "--max-calls", "4"]
    with _third_in_flight(tmp_path, emu, args) as process:
        process.kill()  # kill -9: it gives up nothing, its writer lease has a minute to run
        process.communicate(timeout=60)
    assert process.returncode == -9
    if where == "another host":
        # The same lease, as if the killed command had run on another machine sharing the
        # ledger: this host cannot tell that it is gone, so the label waits for its lease.
        with sqlite3.connect(tmp_path / "runs.db") as db:
            rows = db.execute("SELECT key, value FROM kv WHERE key LIKE 'holder:%'").fetchall()
            for key, value in rows:
                moved = json.loads(value) | {"host": "elsewhere.example"}
                db.execute("UPDATE kv SET value = ? WHERE key = ?", (json.dumps(moved), key))
        assert rows
        emu.clear_requests()
        refused = pollux(*args, cwd=tmp_path)
        assert refused.code == 2, refused.stderr
        assert "is being written by another process" in refused.stderr
        assert f"process {process.pid} on host 'elsewhere.example'" in refused.stderr
        assert "about a minute after it stopped" in refused.stderr
        assert emu.requests_for("local.chat") == []  # it sent nothing
        with sqlite3.connect(tmp_path / "runs.db") as db:  # its lease and its hold end
            db.execute("UPDATE kv SET value = '0' WHERE key LIKE 'writer:%'")
            db.execute("UPDATE reservations SET expires = 0")
    emu.clear_requests()
    # At once on this host: the killed command is gone, so its writer lease and the hold of
    # its call in flight (which --max-calls 4 would otherwise wait for) are taken over.
    again = pollux(*args, cwd=tmp_path)
    assert again.code == 0, again.stderr
    assert [_prompt_of(r) for r in emu.requests_for("local.chat")] == ["slow third?", "fourth?"]
    assert [r["index"] for r in _records(out)] == [0, 1, 2, 3]
    with SQLiteStore(tmp_path / "runs.db") as store:
        (root,) = store.roots()
        answered = [n for n in store.children(root.id) if n.kind.value == "model_call"]
        assert store.totals(root.id)["steps"] == 4
    assert len(answered) == 4
