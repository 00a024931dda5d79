"""`pollux many --max-tokens/--max-usd ... --max-output-tokens M`: hard caps under concurrency."""

from __future__ import annotations

import json
import sqlite3
import wave
from decimal import Decimal
from pathlib import Path

from ._run import pollux

PROMPTS = [f"Question number {n} about the twins?" for n in range(30)]


def _spent(path: Path, meter: str = "tokens") -> Decimal:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT total FROM ledger WHERE meter = ?", (meter,)).fetchall()
    return max(Decimal(str(total)) for (total,) in rows)


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


def test_an_output_cap_makes_the_dollar_budget_a_hard_cap(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(PROMPTS) + "\n")
    common = ["many", "q.txt", "--mock", "--max-usd", "0.0001", "--concurrency", "8"]
    # Without an output cap the dollar budget is estimated: each call is charged after it
    # answers, so eight calls in flight pass the limit together.
    soft = pollux(*common, "--ledger", "soft.db", "--out", "soft.jsonl", cwd=tmp_path)
    assert soft.code == 1, soft.stderr
    assert _spent(tmp_path / "soft.db", "usd") > Decimal("0.0001")
    # With one, each call holds its priced worst case (input estimate + cap) before it is sent.
    hard = pollux(
        *common, "--max-output-tokens", "20", "--ledger", "hard.db", "--out", "hard.jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    assert hard.code == 1, hard.stderr
    assert _spent(tmp_path / "hard.db", "usd") <= Decimal("0.0001")
    records = [json.loads(line) for line in (tmp_path / "hard.jsonl").read_text().splitlines()]
    assert {r["status"] for r in records} == {"ok", "refused"}
    assert "Traceback" not in hard.stderr


def test_the_help_names_the_estimated_and_the_hard_dollar_budget(tmp_path: Path) -> None:
    result = pollux("many", "--help", cwd=tmp_path)
    text = " ".join(result.stdout.split())
    assert "dollar budget: hard with --max-output-tokens" in text
    assert "else estimated" in text


def test_a_bad_output_cap_is_one_line(tmp_path: Path) -> None:
    result = pollux("ask", "Hi?", "--mock", "--max-output-tokens", "0", cwd=tmp_path)
    assert result.code == 2 and "--max-output-tokens" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_hard_token_budget_answers_about_a_photo_its_bytes_would_have_refused(
    tmp_path: Path,
) -> None:
    # A 1023 x 767 PNG padded to 300 KB: by its bytes a 75,000-token call, refused under
    # --max-tokens 20000 before any provider call; by its pixels about 1,900 tokens.
    png = (Path(__file__).resolve().parents[1] / "media" / "wide.png").read_bytes()
    (tmp_path / "photo.png").write_bytes(png + bytes(300_000))
    asked = pollux(
        "ask", "Describe it.", "--source", "photo.png", "--mock", "--ledger", "runs.db",
        "--max-tokens", "20000", "--max-output-tokens", "256", cwd=tmp_path,
    )  # fmt: skip
    assert asked.code == 0, asked.stderr
    assert "Mock answer" in asked.stdout
    assert 1_890 < _spent(tmp_path / "runs.db") < 2_000  # what gpt-5-nano counts for its patches


def test_a_hard_token_budget_answers_about_a_recording_by_its_seconds(tmp_path: Path) -> None:
    # Two minutes of 8 kHz audio (960 KB): 240,000 tokens by its bytes, 3,840 by its seconds.
    with wave.open(str(tmp_path / "call.wav"), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(8000)
        out.writeframes(bytes(8000 * 120))
    asked = pollux(
        "ask", "Transcribe it.", "--source", "call.wav", "--mock", "--ledger", "runs.db",
        "--max-tokens", "20000", "--max-output-tokens", "256", cwd=tmp_path,
    )  # fmt: skip
    assert asked.code == 0, asked.stderr
    assert 3_840 < _spent(tmp_path / "runs.db") < 4_000
