"""`--ledger`: ask and many as governed pollard steps, budgets, replay, `pollard` on the file."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import SQLiteStore
from pollux._cli.main import main
from pollux.testing import Emulator
from tests.pollard._postgres import drop_store, fresh_schema, fresh_store_id, row_count

from ._run import clean_env, pollard, pollux

PROMPTS = ["Who are the twins?", "Which myth?", "Who are the twins?"]  # a repeated prompt


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _local(emu: Emulator | None) -> list[str]:
    url = ["--base-url", emu.base_url("local")] if emu is not None else []
    return ["--provider", "local", "--model", "m", *url]


def _records(text: str) -> dict[int, dict[str, object]]:
    lines = [json.loads(line) for line in text.splitlines()]
    return {line["index"]: line for line in lines}


def test_record_then_replay_without_a_provider(tmp_path: Path, emu: Emulator) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    record = pollux("many", "q.txt", "--ledger", "runs.db", *_local(emu), cwd=tmp_path)
    assert record.code == 0, record.stderr
    assert len(emu.requests_for("local.chat")) == 3  # the repeated prompt is its own step
    recorded = _records(record.stdout)
    nodes = {str(r["node"]) for r in recorded.values()}
    assert len(nodes) == 3
    assert "ledger runs.db run 'pollux many q.txt': spent steps=3 tokens=" in record.stderr

    emu.clear_requests()
    # No base URL and no server: replay answers from the ledger alone.
    replay = pollux("many", "q.txt", "--ledger", "runs.db", "--replay", *_local(None), cwd=tmp_path)
    assert replay.code == 0, replay.stderr
    assert emu.requests == []
    replayed = _records(replay.stdout)
    assert {i: r["text"] for i, r in replayed.items()} == {
        i: r["text"] for i, r in recorded.items()
    }
    assert {str(r["node"]) for r in replayed.values()} == nodes
    assert "spent nothing; avoided steps=3" in replay.stderr

    report = pollard("report", "runs.db", "pollux many q.txt", "--json", cwd=tmp_path)
    assert report.code == 0, report.stderr
    assert json.loads(report.stdout)["spent"]["steps"] == 3
    shown = pollard("show", "runs.db", "pollux many q.txt", cwd=tmp_path)
    assert shown.code == 0 and shown.stdout.count("model_call") == 3


def test_a_call_budget_refuses_the_rest_and_reports_them(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    args = ["many", "q.txt", "--mock", "--ledger", "runs.db", "--max-calls", "2"]
    result = pollux(*args, "--concurrency", "1", cwd=tmp_path)
    assert result.code == 1
    records = _records(result.stdout)
    assert [records[i]["status"] for i in range(3)] == ["ok", "ok", "refused"]
    error = records[2]["error"]
    assert (
        isinstance(error, dict) and error["type"] == "BudgetExceeded" and error["meter"] == "steps"
    )
    assert "1 refused" in result.stderr
    # The hint speaks the shell's terms: the flag of the meter that refused, and the report's
    # command (pollard's own hint says "raise the Budget limit" and "run.report()").
    assert error["hint"] == (
        "raise --max-calls (the run's earlier calls count against it) or pass another --label "
        "for a fresh budget; pollard report runs.db 'pollux many q.txt' shows what was spent"
    )
    # The budget belongs to the run label: a second run has nothing left, and the ledger (not
    # an --out file) decides what was answered: the two answers are served, not asked again.
    again = pollux(*args, cwd=tmp_path)
    assert again.code == 1
    assert [_records(again.stdout)[i]["status"] for i in range(3)] == ["ok", "ok", "refused"]
    assert "spent nothing; avoided steps=2 " in again.stderr
    # Replay serves the refusal as recorded, and no budget can be given to it.
    replay = pollux("many", "q.txt", "--mock", "--ledger", "runs.db", "--replay", cwd=tmp_path)
    assert replay.code == 1 and _records(replay.stdout)[2]["status"] == "refused"


def test_answers_in_the_ledger_but_not_in_out_are_served_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A command killed (or interrupted) after a step committed and before its line was written
    # leaves answers that only the ledger has; the resume serves them from it. In process (the
    # console script is the same main()), so the test stays fast.
    monkeypatch.chdir(tmp_path)
    prompts = [f"Question {i}?" for i in range(6)]
    (tmp_path / "q.txt").write_text("\n".join(prompts) + "\n")
    args = [
        "many",
        "q.txt",
        "--mock",
        "--ledger",
        "runs.db",
        "--max-calls",
        "6",
        "--out",
        "a.jsonl",
    ]
    assert main(args) == 0
    out = tmp_path / "a.jsonl"
    lines = out.read_text().splitlines()
    out.write_text("".join(f"{x}\n" for x in lines if json.loads(x)["index"] not in (1, 4)))
    capsys.readouterr()
    assert main(args) == 0
    stderr = capsys.readouterr().err
    assert "6 of 6 answered (4 earlier)" in stderr
    assert "spent nothing; avoided steps=2 " in stderr
    assert "run total steps=6 " in stderr  # 6 prompts, exactly 6 charged steps
    assert sorted(json.loads(x)["index"] for x in out.read_text().splitlines()) == [*range(6)]
    with SQLiteStore(tmp_path / "runs.db") as store:
        (root,) = store.roots()
        children = store.children(root.id)
    assert [n.kind.value for n in children] == ["model_call"] * 6  # no call_repeated note


def test_a_token_budget_refuses_before_the_call(tmp_path: Path, emu: Emulator) -> None:
    (tmp_path / "big.txt").write_text("word " * 4_000)
    result = pollux(
        "ask", "Summarize.", "--source", "big.txt", "--ledger", "runs.db", "--max-tokens", "100",
        *_local(emu), cwd=tmp_path,
    )  # fmt: skip
    assert result.code == 1
    first, hint, report = result.stderr.splitlines()
    assert first.startswith("pollux: refused by the budget before any provider call")
    assert hint.startswith("hint: raise --max-tokens (the run's earlier calls count against it)")
    assert hint.endswith("pollard report runs.db 'pollux ask' shows what was spent")
    assert report.startswith("pollux: ledger runs.db run 'pollux ask': spent nothing")
    assert emu.requests_for("local.chat") == []


def test_ask_records_then_replays_and_misses(tmp_path: Path) -> None:
    ask = ["ask", "Who are the twins?", "--mock", "--ledger", "runs.db"]
    recorded = pollux(*ask, cwd=tmp_path)
    assert recorded.code == 0, recorded.stderr
    replayed = pollux(*ask, "--replay", cwd=tmp_path)
    assert replayed.code == 0 and replayed.stdout == recorded.stdout
    assert "avoided steps=1" in replayed.stderr
    missing = pollux(
        "ask", "Never asked?", "--mock", "--ledger", "runs.db", "--replay", cwd=tmp_path
    )
    assert missing.code == 1
    assert "not in the ledger" in missing.stderr and "without --replay" in missing.stderr


def test_an_identical_ask_is_served_from_the_ledger_not_asked_again(
    tmp_path: Path, emu: Emulator
) -> None:
    ask = ["ask", "Who are the twins?", "--ledger", "runs.db", *_local(emu)]
    first = pollux(*ask, cwd=tmp_path)
    assert first.code == 0, first.stderr
    again = pollux(*ask, cwd=tmp_path)
    assert again.code == 0 and again.stdout == first.stdout, again.stderr
    assert len(emu.requests_for("local.chat")) == 1  # the ledger answered the second time
    assert "spent nothing; avoided steps=1" in again.stderr
    with SQLiteStore(tmp_path / "runs.db") as store:
        (root,) = store.roots()
        children = store.children(root.id)
        assert [n.kind.value for n in children] == ["model_call"]  # no call_repeated note
        assert store.totals(root.id)["steps"] == 1
    # Another question is asked (and charged) as usual.
    other = pollux("ask", "Which myth?", "--ledger", "runs.db", *_local(emu), cwd=tmp_path)
    assert other.code == 0 and len(emu.requests_for("local.chat")) == 2


def test_a_many_replay_of_unrecorded_prompts_marks_them_missing(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("Who are the twins?\n")
    assert pollux("many", "q.txt", "--mock", "--ledger", "runs.db", cwd=tmp_path).code == 0
    (tmp_path / "q.txt").write_text("Who are the twins?\nA new question?\n")
    result = pollux("many", "q.txt", "--mock", "--ledger", "runs.db", "--replay", cwd=tmp_path)
    assert result.code == 1
    records = _records(result.stdout)
    assert records[0]["status"] == "ok" and records[1]["status"] == "missing"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replay"], "--replay needs --ledger"),
        (["--max-calls", "3"], "--max-calls needs --ledger"),
        (["--ledger", "x.db", "--replay"], "does not exist"),
        (["--ledger", "x.db", "--replay", "--max-calls", "1"], "takes no budget"),
        (["--ledger", "x.db", "--max-usd", "-1"], "--max-usd needs a number >= 0"),
        # A call is whole: 2.5 calls was accepted as a budget of 2.
        (["--ledger", "x.db", "--max-calls", "2.5"], "--max-calls needs a whole number >= 0"),
        # One parser per limit: -1 calls was refused in the dollars' words first.
        (["--ledger", "x.db", "--max-calls", "-1"], "--max-calls needs a whole number >= 0"),
        (["--ledger", "mysql://x/y"], "cannot open the store"),
        (["--ledger", "pg-env:NO_SUCH_VARIABLE#s"], "NO_SUCH_VARIABLE is not set"),
        (["--ledger", "pg-env:HOME#s"], "HOME does not hold a postgresql:// DSN"),
    ],
)
def test_ledger_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = pollux("ask", "Hi?", "--mock", *args, cwd=tmp_path)
    assert result.code == 2
    assert message in result.stderr and "hint: " in result.stderr
    assert "Traceback" not in result.stderr


def test_max_usd_needs_a_priced_model(tmp_path: Path, emu: Emulator) -> None:
    result = pollux("ask", "Hi?", "--ledger", "r.db", "--max-usd", "1", *_local(emu), cwd=tmp_path)
    assert result.code == 2
    assert "no price is known for model 'm'" in result.stderr
    assert emu.requests == []


def test_max_usd_prices_a_known_model(tmp_path: Path) -> None:
    result = pollux("ask", "Hi?", "--mock", "--ledger", "r.db", "--max-usd", "0.5", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert " usd=0.0000" in result.stderr


@pytest.mark.parametrize("command", ["defer", "collect"])
def test_deferred_ledger_usage_errors_leave_no_ledger(tmp_path: Path, command: str) -> None:
    (tmp_path / "q.txt").write_text("Hi?\n")
    (tmp_path / "plain.json").write_text("{}")
    # defer --ledger without the per-answer cap; collect --ledger of a file that is no job
    target = ["q.txt", "--handle", "job.json"] if command == "defer" else ["plain.json"]
    result = pollux(command, *target, "--ledger", "runs.db", cwd=tmp_path)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs.db").exists()


@pytest.mark.postgres
def test_a_postgresql_ledger(tmp_path: Path, pg_dsn: str) -> None:
    pytest.importorskip("pollard.stores.postgres")
    store_id = fresh_store_id("pollux-cli")
    spec = f"{pg_dsn}#{store_id}"
    try:
        (tmp_path / "q.txt").write_text("One?\nTwo?\n")
        result = pollux("many", "q.txt", "--mock", "--ledger", spec, cwd=tmp_path)
        assert result.code == 0, result.stderr
        assert f"ledger postgresql#{store_id} run" in result.stderr
        assert pg_dsn not in result.stderr + result.stdout
        # pg-env: keeps the DSN out of the command line; pollard reads the same spec.
        env = clean_env(LEDGER_DSN=pg_dsn)
        by_env = f"pg-env:LEDGER_DSN#{store_id}"
        replay = pollux(
            "many", "q.txt", "--mock", "--ledger", by_env, "--replay", cwd=tmp_path, env=env
        )
        assert replay.code == 0 and "avoided steps=2" in replay.stderr
        assert f"ledger {by_env} run" in replay.stderr
        assert pg_dsn not in replay.stderr + replay.stdout
        report = pollard("report", by_env, "pollux many q.txt", "--json", cwd=tmp_path, env=env)
        assert report.code == 0 and json.loads(report.stdout)["spent"]["steps"] == 2
    finally:
        drop_store(pg_dsn, store_id)


@pytest.mark.postgres
def test_replay_from_a_missing_postgresql_store_says_what_is_missing(
    tmp_path: Path, pg_dsn: str
) -> None:
    # The CLI used to say only "cannot open the store (PollardError)" with a generic hint.
    pytest.importorskip("pollard.stores.postgres")
    known = fresh_store_id("pollux-cli")
    typo = known[:-1] + ("y" if known[-1] != "y" else "z")
    try:
        assert (
            pollux("ask", "Hi?", "--mock", "--ledger", f"{pg_dsn}#{known}", cwd=tmp_path).code == 0
        )
        env = clean_env(LEDGER_DSN=pg_dsn)
        spec = f"pg-env:LEDGER_DSN#{typo}"
        result = pollux("ask", "Hi?", "--mock", "--ledger", spec, "--replay", cwd=tmp_path, env=env)
        assert result.code == 2
        assert f"--ledger {spec}: no store '{typo}'" in result.stderr
        assert f"did you mean '{known}'" in result.stderr
        assert pg_dsn not in result.stderr + result.stdout
        assert row_count(pg_dsn, "kv", typo) == 0
        with fresh_schema(pg_dsn) as empty:
            env = clean_env(LEDGER_DSN=empty)
            result = pollux(
                "ask", "Hi?", "--mock", "--ledger", spec, "--replay", cwd=tmp_path, env=env
            )
        assert result.code == 2 and "no pollard store" in result.stderr
        assert "never creates" in result.stderr
    finally:
        drop_store(pg_dsn, known)


@pytest.mark.parametrize("command", ["many", "ask"])
def test_a_tampered_ledger_is_one_integrity_line_on_replay(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.txt").write_text("Who are the twins?\n")
    ledger = ["--mock", "--ledger", "runs.db", "--label", "twins"]
    what = ["q.txt"] if command == "many" else ["Who are the twins?"]
    assert main([command, *what, *ledger]) == 0
    with sqlite3.connect(tmp_path / "runs.db") as conn:  # an answer changed behind pollard
        conn.execute("UPDATE nodes SET result = replace(result, 'Mock', 'Evil') WHERE kind = 1")
    capsys.readouterr()
    assert main([command, *what, *ledger, "--replay"]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if "integrity" in line]
    assert len(errors) == 1 and errors[0].startswith("pollux: ledger integrity error: node ")
    assert "hint: run 'pollard verify runs.db'" in captured.err
    assert "Evil" not in captured.out


@pytest.mark.postgres
def test_a_postgresql_connection_loss_mid_many_is_reported_and_resumed(
    tmp_path: Path,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The server ends the store's sessions (pg_terminate_backend, as a restart would) while
    # the fan-out commits: no traceback, every prompt is accounted for, and the resume after a
    # kill asks nothing the ledger already has.
    psycopg = pytest.importorskip("psycopg")
    from pollard import PostgresStore
    from pollux._cli.ledger import Ledger

    store_id = fresh_store_id("pollux-cli")

    def lose(store: PostgresStore) -> None:
        # Only this store's connections: others share the server.
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            pids = [c.info.backend_pid for _, c in list(store._connections) if not c.closed]
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # pg_terminate_backend only signals: wait until the sessions are gone, or the next
            # statement may still run on one (the race made this test flaky).
            deadline = time.monotonic() + 10
            while pids and time.monotonic() < deadline:
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
                ).fetchone()
                if row is None or row[0] == 0:
                    break
                time.sleep(0.01)

    def losing(method: Any, at: int) -> Any:
        calls = 0

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == at and isinstance(self, PostgresStore):
                lose(self)
            elif calls == at:  # the store went away for good (a server that stays down)
                self.runtime.store.close()
            return method(self, *args, **kwargs)

        return call

    # Connections lost before a reservation and before a commit; no store for the cost line.
    for owner, name, at in (
        (PostgresStore, "reserve", 5),
        (PostgresStore, "commit", 7),
        (Ledger, "report_line", 1),
    ):
        monkeypatch.setattr(owner, name, losing(getattr(owner, name), at))
    monkeypatch.chdir(tmp_path)
    prompts = [f"Question {i}?" for i in range(10)]
    (tmp_path / "q.txt").write_text("\n".join(prompts) + "\n")
    spec = f"{pg_dsn}#{store_id}"
    args = ["many", "q.txt", "--mock", "--ledger", spec, "--max-calls", "10", "--out", "a.jsonl"]
    try:
        code = main(args)  # in process: a traceback would be this call raising
        stderr = capsys.readouterr().err
        assert code in (0, 1), stderr
        out = tmp_path / "a.jsonl"
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted(r["index"] for r in records) == [*range(10)]  # not abandoned
        failed = [r for r in records if r["status"] == "failed"]
        # A prompt whose reservation or commit met the lost session fails with pollard's
        # message; whether one does depends on which thread's session the statement used (a
        # session opened after the loss is fresh), so none failing is also right.
        assert all("lost the connection" in r["error"]["message"] for r in failed)
        assert f"{10 - len(failed)} of 10 answered" in stderr
        assert f"ledger postgresql#{store_id} run" in stderr and pg_dsn not in stderr
        assert "the cost report could not be read (PollardError: the PostgreSQL store" in stderr
        # Killed before it wrote some lines: the resume serves those from the ledger.
        monkeypatch.undo()
        monkeypatch.chdir(tmp_path)
        ok = [r for r in records if r["status"] == "ok"]
        if failed:
            # The store was gone when the command ended, so it could not give up its claim on
            # the run: until its lease ends a resume that must ask is refused, in one line.
            assert main(args) == 2
            stderr = capsys.readouterr().err
            assert "is being written by another process" in stderr and "Traceback" not in stderr
        with psycopg.connect(pg_dsn, autocommit=True) as admin:  # its lease ends
            admin.execute(
                "UPDATE pollard_kv SET value = '0' WHERE store_id = %s AND key LIKE 'writer:%%'",
                (store_id,),
            )
        out.write_text("".join(json.dumps(r) + "\n" for r in ok[2:]))
        assert main(args) == 0
        stderr = capsys.readouterr().err
        assert "10 of 10 answered" in stderr
        assert "avoided steps=2 " in stderr
        with PostgresStore(pg_dsn, store_id=store_id) as store:
            (root,) = store.roots()
            children = store.children(root.id)
        answers = [n for n in children if n.kind.value == "model_call"]
        assert len(answers) == 10
        assert not any(n.payload.get("event") == "call_repeated" for n in children)
    finally:
        drop_store(pg_dsn, store_id)


def _stamp_newer(path: Path) -> None:
    # What a newer pollard release's format migration leaves: its version in the kv row.
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE kv SET value = 'pollard-sql/2' WHERE key = 'schema_version'")
    conn.close()


@pytest.mark.parametrize("replay", [False, True])
def test_a_ledger_a_newer_pollard_wrote_is_refused_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    replay: bool,
) -> None:
    monkeypatch.chdir(tmp_path)
    ledger = ["--mock", "--ledger", "runs.db", "--label", "twins"]
    assert main(["ask", "Who are the twins?", *ledger]) == 0
    _stamp_newer(tmp_path / "runs.db")
    before = (tmp_path / "runs.db").read_bytes()
    capsys.readouterr()
    assert main(["ask", "Who are the twins?", *ledger, *(["--replay"] if replay else [])]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.out == ""
    errors = [line for line in captured.err.splitlines() if line.startswith("pollux:")]
    assert len(errors) == 1, captured.err
    assert "'pollard-sql/2'" in errors[0] and "'pollard-sql/1'" in errors[0]
    assert "upgrade pollard" in captured.err
    assert (tmp_path / "runs.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


@pytest.mark.postgres
def test_a_postgresql_ledger_a_newer_pollard_wrote_is_refused_in_one_line(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    psycopg = pytest.importorskip("psycopg")
    store_id = fresh_store_id("pollux-newer")
    spec = f"{pg_dsn}#{store_id}"
    try:
        assert main(["ask", "Who are the twins?", "--mock", "--ledger", spec]) == 0
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE pollard_kv SET value = 'pollard-sql/2' "
                "WHERE store_id = %s AND key = 'schema_version'",
                (store_id,),
            )
        steps = row_count(pg_dsn, "nodes", store_id)
        capsys.readouterr()
        assert main(["ask", "Another question?", "--mock", "--ledger", spec]) == 2
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        errors = [line for line in captured.err.splitlines() if line.startswith("pollux:")]
        assert len(errors) == 1 and "'pollard-sql/2'" in errors[0], captured.err
        assert "upgrade pollard" in captured.err
        assert row_count(pg_dsn, "nodes", store_id) == steps
    finally:
        drop_store(pg_dsn, store_id)
