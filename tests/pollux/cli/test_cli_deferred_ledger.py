"""``pollux defer --ledger`` / ``pollux collect --ledger``: a budgeted batch job, each command its
own process, against the emulator's Batch API (virtual clock: a job finishes after 12 s)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from pollard import Runtime
from pollux.testing import Emulator

from ._run import POLLARD, Result, clean_env, pollux

SECRET = "sk-test-never-printed-0123456789"
LABEL = "pollux defer"


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


def _run(env: dict[str, str], cwd: Path, *args: str) -> Result:
    result = pollux(*args, cwd=cwd, env=env)
    assert SECRET not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


def _batch_calls(emu: Emulator) -> int:
    return sum(1 for r in emu.requests if r.route.startswith("openai"))


def _total(db: Path) -> dict[str, str]:
    with Runtime(str(db)) as rt:
        return rt.run(LABEL).report(exact=True)["total"]


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "q.txt"
    path.write_text("Who are the twins?\nWhich myth?\n")
    return path


def test_a_worst_case_over_budget_is_refused_before_anything_is_sent(
    tmp_path: Path, emu: Emulator, env: dict[str, str], prompts: Path
) -> None:
    args = ("defer", "q.txt", "--handle", "job.json", "--ledger", "runs.db")
    result = _run(env, tmp_path, *args, "--max-tokens", "50", "--max-output-tokens", "64")
    assert result.code == 1, result.stderr
    assert "refused by the budget before anything was sent" in result.stderr
    assert (
        "hint: raise --max-tokens (the run's earlier calls count against it), pass another "
        "--label for a fresh budget, lower --max-output-tokens, or submit fewer prompts; "
        "pollard report runs.db 'pollux defer' shows what was spent"
    ) in result.stderr
    assert _batch_calls(emu) == 0 and not (tmp_path / "job.json").exists()

    missing = _run(env, tmp_path, *args)
    assert missing.code == 2 and "--max-output-tokens" in missing.stderr
    assert _batch_calls(emu) == 0


def test_defer_reserves_the_worst_case_and_collect_settles_it_once(
    tmp_path: Path, emu: Emulator, env: dict[str, str], prompts: Path
) -> None:
    db = tmp_path / "runs.db"
    submitted = _run(
        env,
        tmp_path,
        *("defer", "q.txt", "--handle", "job.json", "--ledger", "runs.db"),
        *("--max-usd", "1", "--max-output-tokens", "64"),
    )
    assert submitted.code == 0, submitted.stderr
    assert "2 requests" in submitted.stdout and "run total" in submitted.stderr
    saved = json.loads((tmp_path / "job.json").read_text())
    assert saved["governed_job"] == 1 and saved["handle"]["request_count"] == 2
    reserved = _total(db)
    assert int(reserved["tokens"]) >= 2 * 64 and Decimal(reserved["usd"]) > 0

    status = _run(env, tmp_path, "status", "job.json")
    assert status.code == 0 and "of 2" in status.stdout
    early = _run(env, tmp_path, "collect", "job.json", "--ledger", "runs.db")
    assert early.code == 1 and "not finished" in early.stderr
    assert _total(db) == reserved

    emu.advance(15)
    collected = _run(env, tmp_path, "collect", "job.json", "--ledger", "runs.db")
    assert collected.code == 0, collected.stderr
    records = [json.loads(line) for line in collected.lines]
    assert [r["status"] for r in records] == ["ok", "ok"]
    settled = _total(db)
    used = sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in records)
    assert int(settled["tokens"]) == used < int(reserved["tokens"])
    assert Decimal(settled["usd"]) < Decimal(reserved["usd"])

    calls = _batch_calls(emu)
    again = _run(env, tmp_path, "collect", "job.json", "--ledger", "runs.db")
    assert again.code == 0 and again.lines == collected.lines
    assert _total(db) == settled  # collecting twice charges once

    replay = _run(env, tmp_path, "collect", "job.json", "--ledger", "runs.db", "--replay")
    assert replay.code == 0 and replay.lines == collected.lines
    assert _batch_calls(emu) == calls  # both served from the ledger

    report = json.loads(
        subprocess.run(
            [str(POLLARD), "report", "runs.db", LABEL, "--json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert report  # pollard reads the same file


def test_collect_ledger_needs_a_governed_job(
    tmp_path: Path, emu: Emulator, env: dict[str, str], prompts: Path
) -> None:
    assert _run(env, tmp_path, "defer", "q.txt", "--handle", "job.json").code == 0
    result = _run(env, tmp_path, "collect", "job.json", "--ledger", "runs.db")
    assert result.code == 2 and "was not submitted with --ledger" in result.stderr
    replay = _run(env, tmp_path, "collect", "job.json", "--replay")
    assert replay.code == 2 and "--replay needs --ledger" in replay.stderr


def test_collect_into_the_ledger_without_a_key_is_a_usage_error(
    tmp_path: Path, emu: Emulator, env: dict[str, str], prompts: Path
) -> None:
    args = ("defer", "q.txt", "--handle", "job.json", "--ledger", "runs.db")
    assert _run(env, tmp_path, *args, "--max-output-tokens", "64").code == 0
    emu.advance(15)
    keyless = {k: v for k, v in env.items() if k != "OPENAI_API_KEY"}
    # It was a traceback: the Config for the handle was built outside the error handling.
    result = _run(keyless, tmp_path, "collect", "job.json", "--ledger", "runs.db")
    assert result.code == 2
    assert "API key required for openai" in result.stderr and "OPENAI_API_KEY" in result.stderr
    assert "api_key=" not in result.stderr
    # Replay sends nothing, so it needs no key (as `ask --replay`).
    assert _run(env, tmp_path, "collect", "job.json", "--ledger", "runs.db").code == 0
    calls = _batch_calls(emu)
    replay = _run(keyless, tmp_path, "collect", "job.json", "--ledger", "runs.db", "--replay")
    assert replay.code == 0, replay.stderr
    assert _batch_calls(emu) == calls
