"""`pollux many`'s summary and `pollard report` show a run's cache hit ratio and savings."""

from __future__ import annotations

import json
from pathlib import Path

from pollux.testing import Emulator

from ._run import clean_env, pollard, pollux


def test_a_cached_fan_out_reports_its_hit_ratio_and_savings(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(f"Question {i}?" for i in range(4)) + "\n")
    (tmp_path / "doc.txt").write_text("The archive records every voyage of the Argo. " * 600)
    with Emulator() as emu:
        env = clean_env(OPENAI_BASE_URL=emu.base_url("openai"), OPENAI_API_KEY="offline")
        args = ["--provider", "openai", "--model", "gpt-5-nano", "--source", "doc.txt"]
        done = pollux("many", "q.txt", *args, "--ledger", "runs.db", cwd=tmp_path, env=env)
    assert done.code == 0, done.stderr
    summary = next(line for line in done.stderr.splitlines() if "answered" in line)
    assert "cache hit " in summary and ", saved $" in summary

    report = pollard("report", "runs.db", "pollux many q.txt", "--json", cwd=tmp_path)
    assert report.code == 0, report.stderr
    cache = json.loads(report.stdout)["cache"]
    assert cache["cache_read_tokens"] > 0 and 0.5 < cache["hit_ratio"] < 1
    assert cache["saved"]["usd"] > 0
    text = pollard("report", "runs.db", "pollux many q.txt", cwd=tmp_path)
    assert "cache     hit ratio " in text.stdout and "saved usd " in text.stdout
