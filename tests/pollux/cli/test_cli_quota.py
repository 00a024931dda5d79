"""`pollux ask`/`many --quota-*`: calls paced to a provider quota, shared through a store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollux.testing import Emulator, EmulatorQuota

from ._run import on_a_terminal, pollux


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(quotas={"local": EmulatorQuota(requests=3, window_s=0.3)}) as emulator:
        yield emulator


def _local(emu: Emulator) -> list[str]:
    return ["--provider", "local", "--model", "m", "--base-url", emu.base_url("local")]


@pytest.mark.parametrize("shared", [False, True])
def test_many_paced_by_a_quota_draws_no_429(emu: Emulator, tmp_path: Path, shared: bool) -> None:
    (tmp_path / "q.txt").write_text("\n".join(f"Question {i}?" for i in range(7)) + "\n")
    store = ["--quota-store", str(tmp_path / "quota.db")] if shared else []
    result = pollux(
        "many",
        "q.txt",
        *_local(emu),
        "--quota-rpm",
        "3",
        "--quota-window",
        "0.3",
        *store,
        "--out",
        "a.jsonl",
        cwd=tmp_path,
    )
    assert result.code == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len(records) == 7 and all(r.get("error") is None for r in records)
    assert emu.rate_limited("local") == 0
    if shared:
        assert (tmp_path / "quota.db").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--quota-rpm", "0"], "--quota-rpm needs a whole number >= 1"),
        (["--quota-rpm", "1.5"], "--quota-rpm needs a whole number >= 1"),
        (["--quota-store", "q.db"], "--quota-store needs --quota-rpm or --quota-tpm"),
        (["--quota-rpm", "5", "--quota-workers", "2"], "need --quota-store"),
        (["--quota-rpm", "5", "--quota-window", "0"], "--quota-window needs seconds > 0"),
        # Refused by SharedQuota itself: once a traceback (and before that, a SQLite file).
        (["--quota-rpm", "5", "--quota-store", "mysql://db/q"], "unsupported URL scheme"),
        # Every refused count reads the same (-5 once said "needs a number >= 0").
        (["--quota-rpm", "-5"], "--quota-rpm needs a whole number >= 1"),
        (["--quota-tpm", "nan"], "--quota-tpm needs a whole number >= 1"),
        (["--quota-rpm", "5", "--quota-window", "inf"], "--quota-window needs seconds > 0"),
        (["--quota-rpm", "5", "--quota-window", "-1"], "--quota-window needs seconds > 0"),
        (["--quota-rpm", "5", "--quota-store", "   "], "empty store spec"),
    ],
)
def test_malformed_quota_flags_are_one_line_and_exit_2(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    result = pollux("ask", "Hi?", "--mock", *flags, cwd=tmp_path)
    assert result.code == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_many_says_how_long_each_prompt_waited_for_the_quota(emu: Emulator, tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(f"Question {i}?" for i in range(4)) + "\n")
    result = pollux(
        "many",
        "q.txt",
        *_local(emu),
        "--quota-rpm",
        "2",
        "--quota-window",
        "0.5",
        "--out",
        "a.jsonl",
        cwd=tmp_path,
    )
    assert result.code == 0, result.stderr
    # Not a terminal: the prompts that waited say so on their progress line, then the total.
    waited = re.findall(
        r"prompt \d+: ok, \d+ tokens \(waited (\d+\.\d)s for quota\)", result.stderr
    )
    assert len(waited) >= 1 and all(float(w) >= 0.2 for w in waited)
    assert re.search(r"pollux: \d call\(s\) waited for quota, \d+\.\ds in all", result.stderr)


def test_the_live_bar_shows_a_quota_wait_while_it_lasts(emu: Emulator, tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(f"Question {i}?" for i in range(3)) + "\n")
    screen = on_a_terminal(
        tmp_path,
        "many",
        "q.txt",
        *_local(emu),
        "--quota-rpm",
        "1",
        "--quota-window",
        "1",
        "--out",
        "a.jsonl",
        stdout_too=False,
    )
    assert "\x1b[" in screen  # the live bar
    assert re.search(r"waiting for quota \d+\.\ds", screen)
    assert "3/3" in screen


def test_a_long_quota_wait_is_told_in_the_plain_progress(emu: Emulator, tmp_path: Path) -> None:
    # A log must not go silent while a call waits for the window: a line says who waits.
    (tmp_path / "q.txt").write_text("First?\nSecond?\n")
    result = pollux(
        "many",
        "q.txt",
        *_local(emu),
        "--quota-rpm",
        "1",
        "--quota-window",
        "3",
        "--out",
        "a.jsonl",
        cwd=tmp_path,
    )
    assert result.code == 0, result.stderr
    told = re.search(
        r"pollux: waiting for quota: 1 call waits, the longest for (\d+\.\d)s", result.stderr
    )
    assert told is not None and float(told.group(1)) >= 2.0
    # Told while it waited: before the prompt that waited finished.
    assert result.stderr.index(told.group(0)) < result.stderr.index("[2/2] prompt")


@pytest.mark.postgres
def test_a_keyword_dsn_is_shown_by_its_store_id_never_its_password(
    tmp_path: Path, pg_dsn: str
) -> None:
    # ``--ledger "host=... password=..."`` was printed whole in the cost line (after opening a
    # SQLite file named after it); a keyword DSN is now PostgreSQL, shown as postgresql#id.
    import psycopg

    given = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    given["password"] = "hunter2-never-shown"  # trust auth ignores it
    dsn = psycopg.conninfo.make_conninfo(**given)
    result = pollux(
        "ask",
        "Hi?",
        "--mock",
        "--ledger",
        f"{dsn}#cli-keyword-dsn",
        "--quota-rpm",
        "50",
        "--quota-store",
        f"{dsn}#cli-keyword-dsn",
        cwd=tmp_path,
    )
    assert result.code == 0, result.stderr
    assert "postgresql#cli-keyword-dsn" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the DSN


def test_a_store_url_is_shown_without_its_password() -> None:
    from pollux._cli.options import _store_target

    for text in ("redis://:s3cret@db:6379/0", "rediss://worker:s3cret@db/1"):
        target, shown = _store_target(text)
        assert target == text and "s3cret" not in shown and "***@db" in shown
    assert _store_target("quota.db") == ("quota.db", "quota.db")


def test_pg_env_may_hold_a_keyword_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    from pollux._cli.options import _store_target

    monkeypatch.setenv("FLEET_DSN", "host=db dbname=quotas password=s3cret")
    target, shown = _store_target("pg-env:FLEET_DSN#fleet")
    assert target == "host=db dbname=quotas password=s3cret#fleet"
    assert shown == "pg-env:FLEET_DSN#fleet"
    assert _store_target("host=db password=s3cret#fleet")[1] == "postgresql#fleet"
