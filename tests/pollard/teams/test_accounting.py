"""Accounting from the user's side: reports by agent, task and role; verifiable references."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from pollard import (
    Budget,
    NodeKind,
    ResultReference,
    Runtime,
    Team,
    record_dependency,
    record_handoff,
    team_report,
    verify_dependencies,
)
from pollard.cli import main

from ._helpers import hard_meters, model


def build(path: Path) -> dict[str, str]:
    """A planner with a researcher (and its reader) and a writer, plus work outside the team."""
    with Runtime(path, meters=hard_meters()) as rt, rt.run("plan") as run:
        run.model_call({"q": "outside", "max_tokens": 10}, fn=model)  # unattributed: 15 tokens
        team = Team(run, "t", budget=Budget(steps=20))
        planner = team.agent("planner", role="planner", task="plan")
        researcher = planner.delegate("researcher", role="researcher", task="research")
        reader = researcher.delegate("reader", role="researcher", task="read")
        writer = team.agent("writer", role="writer", task="write")
        planner.run.model_call({"q": "p", "max_tokens": 10}, fn=model)
        for i in range(2):
            researcher.run.model_call({"q": i, "max_tokens": 10}, fn=model)
        found = reader.run.model_call({"q": "r", "max_tokens": 10}, fn=model)
        record_dependency(writer, ResultReference.of(found, agent="reader"), note="cites it")
        record_handoff(researcher, writer, [ResultReference.of(found)], note="draft this")
        writer.run.model_call({"q": "w", "max_tokens": 10}, fn=model)
        return {"root": run.root_id, "team": team.node_id, "found": found.id}


def test_the_report_counts_nested_work_once_and_shows_unattributed_work(tmp_path: Path) -> None:
    ids = build(tmp_path / "t.db")
    with Runtime(tmp_path / "t.db") as rt:
        report = team_report(rt.store, ids["root"])
    agents = {a["name"]: a for a in report["agents"]}
    assert agents["planner"]["total"]["steps"] == 4  # itself, researcher (2) and reader (1)
    assert agents["planner"]["own"]["steps"] == 1
    assert agents["researcher"]["own"]["steps"] == 2
    assert agents["researcher"]["parent"] == agents["planner"]["node_id"]
    assert report["by_role"]["researcher"]["steps"] == 3  # researcher and reader
    assert report["by_task"]["read"]["tokens"] == 15
    assert report["by_agent"]["writer"]["steps"] == 1
    assert report["unattributed"] == {"steps": 1, "tokens": 15}
    # The parts add up to the whole: nested work counted once, nothing hidden.
    assert sum(a["own"]["steps"] for a in report["agents"]) + 1 == report["total"]["steps"] == 6
    assert report["teams"][0]["total"]["steps"] == 5


def test_team_report_and_verify_dependencies_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.db"
    ids = build(path)
    assert main(["team-report", str(path), "plan"]) == 0
    text = capsys.readouterr().out
    assert "planner/researcher/reader" in text and "unattributed: steps=1 tokens=15" in text
    assert main(["team-report", str(path), ids["team"], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"]["steps"] == "5" and data["unattributed"] == {}
    assert main(["verify-dependencies", str(path), "plan"]) == 0
    assert "checked 3 reference(s): ok" in capsys.readouterr().out
    # The referenced result is changed behind pollard's back: verification fails.
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE nodes SET result = replace(result, 'ok', 'KO') WHERE id = ?",
            (bytes.fromhex(ids["found"]),),
        )
    assert main(["verify-dependencies", str(path), "plan", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and len(report["findings"]) == 2
    assert all(ids["found"] in f["message"] for f in report["findings"])


def test_a_reference_to_a_missing_node_fails() -> None:
    with Runtime() as rt, rt.run("plan") as run:
        agent = Team(run, "t").agent("a")
        record_dependency(agent, ResultReference("0" * 64, "1" * 64, agent="ghost"))
        report = verify_dependencies(rt.store, run.root_id)
        assert not report.ok and "not stored" in report.findings[0].message
        ref = ResultReference.of(agent.run.model_call({}, fn=lambda p: {"x": 1}))
        assert ResultReference.from_dict(json.loads(json.dumps(ref.to_dict()))) == ref


def test_the_command_runs_as_a_program(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    build(path)
    done = subprocess.run(
        [sys.executable, "-m", "pollard.cli", "team-report", str(path), "plan", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["by_agent"]["reader"]["steps"] == "1"


def test_team_report_prints_small_amounts_as_pollard_report_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A few cheap calls cost millionths of a dollar: team-report printed "usd=5.7e-06" where
    # `pollard report` prints "usd=0.0000057".
    path = tmp_path / "t.db"
    with Runtime(path) as rt, rt.run("cheap") as run:
        team = Team(run, "t")
        agent = team.agent("a", role="r", task="k")
        agent.run.record_charged(  # a charge in millionths, as a cheap model call's
            NodeKind.NOTE, {"cost": 1}, charges={"usd": Decimal("0.0000057")}, fn=lambda p: {}
        )
    assert main(["team-report", str(path), "cheap"]) == 0
    text = capsys.readouterr().out
    assert "usd=0.0000057" in text and "e-0" not in text
