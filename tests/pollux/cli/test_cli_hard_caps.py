"""`pollux many --max-tokens N --max-output-tokens M`: a hard token cap under concurrency."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ._run import pollux

PROMPTS = [f"Question number {n} about the twins?" for n in range(30)]


def _spent(path: Path) -> int:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT total FROM ledger WHERE meter = 'tokens'").fetchall()
    return max(int(float(total)) for (total,) in rows)


def test_an_output_cap_makes_the_token_budget_a_hard_cap(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    common = ["many", "q.txt", "--mock", "--max-tokens", "500", "--concurrency", "8"]
    # Without an output cap the budget is estimated: output tokens are charged after each
    # call, so eight calls in flight overshoot it.
    soft = pollux(*common, "--ledger", "soft.db", "--out", "soft.jsonl", cwd=tmp_path)
    assert soft.code == 1, soft.stderr  # some prompts refused
    assert _spent(tmp_path / "soft.db") > 500
    # With one, each call holds its input estimate plus the cap before it is sent.
    hard = pollux(
        *common, "--max-output-tokens", "20", "--ledger", "hard.db", "--out", "hard.jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    assert hard.code == 1, hard.stderr
    assert _spent(tmp_path / "hard.db") <= 500
    records = [json.loads(line) for line in (tmp_path / "hard.jsonl").read_text().splitlines()]
    assert {r["status"] for r in records} == {"ok", "refused"}
    # The cap is part of each request, so the replay names it too, and finds every answer.
    replay = pollux(
        "many", "q.txt", "--mock", "--max-output-tokens", "20", "--ledger", "hard.db",
        "--replay", "--out", "replay.jsonl", cwd=tmp_path,
    )  # fmt: skip
    answered = sum(1 for r in records if r["status"] == "ok")
    assert f"avoided steps={answered} " in replay.stderr, replay.stderr


def test_a_bad_output_cap_is_one_line(tmp_path: Path) -> None:
    result = pollux("ask", "Hi?", "--mock", "--max-output-tokens", "0", cwd=tmp_path)
    assert result.code == 2 and "--max-output-tokens" in result.stderr
    assert "Traceback" not in result.stderr
