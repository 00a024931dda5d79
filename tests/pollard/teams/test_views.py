"""``pollard show`` (text, JSON) and the HTML view show agents on their subtrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollard import Runtime, Team
from pollard.cli import main


def build(path: Path) -> None:
    with Runtime(path) as rt, rt.run("plan") as run:
        team = Team(run, "desk")
        scout = team.agent("scout", role="researcher", task="find sources")
        sub = scout.delegate("reader", role="reader")
        scout.run.model_call({"model": "m1"}, fn=lambda p: {})
        sub.run.model_call({"model": "m2"}, fn=lambda p: {})
        run.model_call({"model": "m0"}, fn=lambda p: {})


def test_show_labels_agents_and_marks_their_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v.db"
    build(path)
    assert main(["show", str(path), "plan"]) == 0
    text = capsys.readouterr().out
    assert "team desk" in text
    assert "agent scout (researcher): find sources" in text
    assert "agent reader (reader)" in text
    assert main(["show", str(path), "plan", "--json"]) == 0
    rows = {row["label"]: row for row in json.loads(capsys.readouterr().out)["nodes"]}
    assert rows["m1"]["actor"] == "scout" and rows["m2"]["actor"] == "reader"
    assert rows["m0"]["actor"] is None
    agent = rows["agent scout (researcher): find sources"]["agent"]
    assert agent == {"name": "scout", "role": "researcher", "task": "find sources", "team": "desk"}
    page = tmp_path / "v.html"
    assert main(["show", str(path), "plan", "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "agent scout (researcher): find sources" in html
