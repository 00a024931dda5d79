"""defer, status, collect and cancel with the handle as a file, against the emulator's Batch API
(each command its own process, as in real use)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollux.testing import Emulator

from ._run import POLLUX, Result, clean_env, pollux

SECRET = "sk-test-never-printed-0123456789"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


@pytest.fixture
def env(emu: Emulator) -> dict[str, str]:
    return clean_env(
        OPENAI_BASE_URL=emu.base_url("openai"),
        OPENAI_API_KEY=SECRET,
        POLLUX_PROVIDER="openai",
        POLLUX_MODEL="gpt-5-nano",
    )


@pytest.fixture(params=["openai", "azure_openai"])
def batch_env(request: pytest.FixtureRequest, emu: Emulator, env: dict[str, str]) -> dict[str, str]:
    """The environment for a batch provider: OpenAI's, or an Azure resource's global batch."""
    if request.param == "openai":
        return env
    return clean_env(
        AZURE_OPENAI_ENDPOINT=emu.base_url("azure_openai"),
        AZURE_OPENAI_API_KEY=SECRET,
        POLLUX_PROVIDER="azure_openai",
        POLLUX_MODEL="global-batch-deployment",
    )


def _run(env: dict[str, str], cwd: Path, *args: str) -> Result:
    result = pollux(*args, cwd=cwd, env=env)
    assert SECRET not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


def _submit(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "q.txt").write_text("Who are the twins?\nWhich myth?\n")
    (tmp_path / "doc.txt").write_text("Castor and Pollux are the Dioscuri.")
    result = _run(env, tmp_path, "defer", "q.txt", "--source", "doc.txt", "--handle", "job.json")
    assert result.code == 0, result.stderr
    assert "2 requests" in result.stdout


def test_defer_status_collect_across_processes(
    tmp_path: Path, emu: Emulator, batch_env: dict[str, str]
) -> None:
    env = batch_env
    _submit(tmp_path, env)
    saved = json.loads((tmp_path / "job.json").read_text())
    assert saved["request_count"] == 2  # handle.to_dict()
    assert saved["provider"] == env["POLLUX_PROVIDER"]

    status = _run(env, tmp_path, "status", "job.json", "--json")
    assert status.code == 0
    snapshot = json.loads(status.stdout)
    assert snapshot["status"] == "queued" and snapshot["pending"] == 2
    assert snapshot["is_terminal"] is False

    early = _run(env, tmp_path, "collect", "job.json")
    assert early.code == 1
    assert "not finished" in early.stderr and "--wait" in early.stderr

    emu.advance(10 * 86_400)
    text = _run(env, tmp_path, "status", "job.json")
    assert "status=completed succeeded=2 failed=0 pending=0 of 2 (terminal)" in text.stdout
    collected = _run(env, tmp_path, "collect", "job.json", "--out", "answers.jsonl")
    assert collected.code == 0, collected.stderr
    records = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1]
    # Each request carried the shared source and its own prompt, answers in prompt order.
    assert [r["text"] for r in records] == [
        "Emulated reply to: Castor and Pollux are the Dioscuri.\nWho are the twins?",
        "Emulated reply to: Castor and Pollux are the Dioscuri.\nWhich myth?",
    ]
    assert all(r["status"] == "ok" and r["usage"]["total_tokens"] > 0 for r in records)


def test_collect_wait_polls_with_progress_until_terminal(
    tmp_path: Path, emu: Emulator, env: dict[str, str]
) -> None:
    _submit(tmp_path, env)
    process = subprocess.Popen(
        [str(POLLUX), "collect", "job.json", "--wait", "--poll-seconds", "0.05"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()  # the first poll's line: the job is still queued
        assert "status=queued succeeded=0 failed=0 pending=2" in first
        emu.advance(10 * 86_400)
        stdout, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, rest
    assert "status=completed succeeded=2 failed=0 pending=0" in rest
    assert len(stdout.splitlines()) == 2


def test_cancel_then_status(tmp_path: Path, emu: Emulator, env: dict[str, str]) -> None:
    _submit(tmp_path, env)
    cancelled = _run(env, tmp_path, "cancel", "job.json")
    assert cancelled.code == 0 and "cancellation requested" in cancelled.stdout
    emu.advance(10 * 86_400)
    status = json.loads(_run(env, tmp_path, "status", "job.json", "--json").stdout)
    assert status["status"] in {"cancelling", "cancelled"}
    assert status["is_terminal"] is (status["status"] == "cancelled")


def test_status_without_the_key_says_what_to_export(tmp_path: Path, env: dict[str, str]) -> None:
    _submit(tmp_path, env)
    keyless = {k: v for k, v in env.items() if k != "OPENAI_API_KEY"}
    result = _run(keyless, tmp_path, "status", "job.json")
    assert result.code == 2 and "API key required for openai" in result.stderr
    # Not the library's "pass api_key=..." / "Session(...)" advice, which a shell cannot follow.
    assert "hint: export OPENAI_API_KEY in this shell" in result.stderr
    assert "api_key=" not in result.stderr and "--mock" not in result.stderr


def test_a_handle_file_is_never_overwritten(tmp_path: Path, env: dict[str, str]) -> None:
    _submit(tmp_path, env)
    before = (tmp_path / "job.json").read_text()
    again = _run(env, tmp_path, "defer", "q.txt", "--handle", "job.json")
    assert again.code == 2 and "already exists" in again.stderr
    assert (tmp_path / "job.json").read_text() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not JSON"), ('{"job_id": "x"}', "job.json"), ("[]", "job.json")],
)
def test_a_broken_handle_file_is_a_usage_error(
    tmp_path: Path, env: dict[str, str], content: str, message: str
) -> None:
    (tmp_path / "job.json").write_text(content)
    for command in ("status", "collect", "cancel"):
        result = _run(env, tmp_path, command, "job.json")
        assert result.code == 2, (command, result.stderr)
        assert message in result.stderr and "hint: " in result.stderr


def test_mock_jobs_cannot_cross_processes(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("Hi?\n")
    result = pollux("defer", "q.txt", "--handle", "job.json", "--mock", cwd=tmp_path)
    assert result.code == 2
    assert "python -m pollux.testing" in result.stderr
    assert not (tmp_path / "job.json").exists()


def test_a_provider_without_deferred_delivery(tmp_path: Path, emu: Emulator) -> None:
    (tmp_path / "q.txt").write_text("Hi?\n")
    local = ["--provider", "local", "--model", "m", "--base-url", emu.base_url("local")]
    result = pollux("defer", "q.txt", "--handle", "job.json", *local, cwd=tmp_path)
    assert result.code == 2
    assert "hint: " in result.stderr
    assert not (tmp_path / "job.json").exists()


def test_collect_wait_draws_a_live_bar_on_a_terminal(
    tmp_path: Path, emu: Emulator, env: dict[str, str]
) -> None:
    import fcntl
    import os
    import pty
    import struct
    import termios

    _submit(tmp_path, env)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen(
        [
            str(POLLUX),
            "collect",
            "job.json",
            "--wait",
            "--poll-seconds",
            "0.05",
            "--out",
            "a.jsonl",
        ],
        cwd=tmp_path,
        env=env | {"TERM": "xterm-256color", "COLUMNS": "160"},
        stdin=slave,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    screen = b""
    advanced = False
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
        if not advanced and b"status=queued" in screen:
            emu.advance(10 * 86_400)  # the first frame is drawn: let the job finish
            advanced = True
    os.close(master)
    assert process.wait(timeout=60) == 0
    text = screen.decode("utf-8", "replace")
    assert "\x1b[" in text and "0/2" in text and "2/2" in text
    assert "status=completed succeeded=2 failed=0 pending=0" in text
    assert SECRET not in text
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 2
