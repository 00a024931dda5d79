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


def test_the_html_page_data_carries_the_agent_of_each_step(tmp_path: Path) -> None:
    from pollard import SQLiteStore
    from pollard._edge._pagedata import page_data
    from pollard._edge._view import build_view

    path = tmp_path / "v.db"
    build(path)
    with SQLiteStore(path) as store:
        root = store.roots()[0].id
        rows = build_view(list(store.walk(root)))
    data = page_data(rows, payloads=False)
    by_label = {
        data["strings"][data["label"][n]]: data["details"].get(str(n), {}) for n in range(data["n"])
    }
    assert by_label["m2"]["actor"] == "reader"
    assert by_label["agent scout (researcher): find sources"]["agent"]["task"] == "find sources"
    assert "actor" not in by_label["m0"]
