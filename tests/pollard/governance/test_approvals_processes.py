"""An approval after a worker restart, with real processes, on SQLite and PostgreSQL.

Worker 1 asks for a refund and exits (the request is in the ledger); a second process (the
``pollard`` command) approves it; worker 2, a fresh process resuming the run, executes it once;
worker 3 executes nothing; calls with other arguments, another actor, another action or another
registry are refused. A worker that dies inside the approved handler leaves an ambiguous step
that the next worker does not run again. Every execution appends a line to a file, so the count
is the world's, not the ledger's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import get_approval, list_approvals
from pollard._cli.specs import open_store, parse_store_spec
from tests.pollard._postgres import drop_store, fresh_store_id

# argv: STORE LOG HOW ACTION ARGS_JSON ACTOR [REGISTRY_VARIANT [CRASH]]
# HOW is "run" (the script re-run from its first step) or "resume" (the cursor where it stopped).
WORKER = r"""
import json, os, sys
from pollard import (ActionSpec, ApprovalPolicy, ApprovalRequired, PollardError, Registry,
                     Runtime)
store, log, how, action, args, actor = sys.argv[1:7]
variant = sys.argv[7] if len(sys.argv) > 7 else "v1"
crash = len(sys.argv) > 8 and sys.argv[8] == "crash"

def refund(payload):
    with open(log, "a") as handle:
        handle.write("refund %s\n" % payload["number"])
    if crash:
        os._exit(3)  # dies mid-effect: the refund happened, nothing was recorded
    return {"refunded": payload["number"]}

def lookup(payload):
    return {"invoice": payload["number"], "status": "paid"}

schema = {"type": "object", "properties": {"number": {"type": "string"}}, "required": ["number"]}
specs = [
    ActionSpec("lookup", "1", "Look up an invoice.", schema, False, handler=lookup),
    ActionSpec("refund", "1", "Refund an invoice.", schema, True, handler=refund),
    ActionSpec("void", "1", "Void an invoice.", schema, True, handler=refund),
]
if variant == "v2":  # another registry: one more action
    specs.append(ActionSpec("note", "1", "Add a note.", schema, False, handler=lookup))
policies = [ApprovalPolicy(["refund", "void"])]
# A crashing worker holds a short writer lease, so the next one may take the run over soon.
lease = 1 if crash else 60
runtime = Runtime(
    store, registry=Registry(specs), policies=policies, reservation_lease_seconds=lease
)
try:
    with runtime as rt:
        run = rt.run("refunds") if how == "run" else rt.resume("refunds")
        if how == "run":
            run.tool_call("lookup", {"number": "INV-7"}, actor=actor)
        node = run.tool_call(action, json.loads(args), actor=actor)
        print(json.dumps({"node": node.id, "result": node.result}))
except ApprovalRequired as exc:
    print(json.dumps({"pending": exc.request_id}))
except PollardError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""

INV7 = json.dumps({"number": "INV-7"})


def _worker(store: str, log: Path, how: str, *argv: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, store, str(log), how, *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode == 3:
        return {"crashed": True}
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pollard.cli", *argv], capture_output=True, text=True, timeout=120
    )


def _executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(params=["sqlite", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    request.applymarker(pytest.mark.postgres)
    dsn: str = request.getfixturevalue("pg_dsn")
    store_id = fresh_store_id("approvals")
    try:
        yield f"{dsn}#{store_id}"
    finally:
        drop_store(dsn, store_id)


@pytest.mark.slow
def test_an_approval_after_a_worker_restart_runs_once_and_nothing_else(
    store_spec: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    # Worker 1 asks and exits: the request is in the ledger, nothing ran.
    first = _worker(store_spec, log, "run", "refund", INV7, "billing")
    request_id = first["pending"]
    assert _executions(log) == []
    # A second process decides: the pollard command, from the listing.
    listed = _cli("approvals", store_spec, "--json")
    assert listed.returncode == 0, listed.stderr
    (pending,) = json.loads(listed.stdout)["approvals"]
    assert pending["request_id"] == request_id and pending["actor"] == "billing"
    decided = _cli("approve", store_spec, request_id[:12], "--by", "ada", "--reason", "ok")
    assert decided.returncode == 0, decided.stderr
    # Worker 2, a fresh process resuming the run where it stopped, executes it once.
    second = _worker(store_spec, log, "resume", "refund", INV7, "billing")
    assert second["result"] == {"refunded": "INV-7"}
    assert _executions(log) == ["refund INV-7"]
    # Worker 3 (the whole script again) executes nothing: the step is served from the ledger.
    third = _worker(store_spec, log, "run", "refund", INV7, "billing")
    assert third["node"] == second["node"]
    assert _executions(log) == ["refund INV-7"]
    # Nothing else is approved: other arguments, another actor, another action ...
    other_args = _worker(
        store_spec, log, "run", "refund", json.dumps({"number": "INV-8"}), "billing"
    )
    other_actor = _worker(store_spec, log, "run", "refund", INV7, "mallory")
    other_action = _worker(store_spec, log, "run", "void", INV7, "billing")
    asked = {other_args["pending"], other_actor["pending"], other_action["pending"]}
    assert len(asked) == 3 and request_id not in asked
    # ... or another registry (the run is bound to the registry it was recorded under).
    other_registry = _worker(store_spec, log, "run", "refund", INV7, "billing", "v2")
    assert other_registry["error"] == "IntegrityError"
    assert "different registry" in other_registry["message"]
    assert _executions(log) == ["refund INV-7"]
    # The ledger agrees: the approval was spent on the one node, the others wait.
    store = open_store(parse_store_spec(store_spec))
    try:
        approval = get_approval(store, request_id)
        assert approval.status == "approved" and approval.decided_by == "ada"
        assert approval.spent_on == second["node"]
        assert {a.request_id for a in list_approvals(store, status="pending")} == asked
    finally:
        store.close()


@pytest.mark.slow
def test_a_worker_dying_inside_the_approved_action_is_ambiguous_never_rerun(
    tmp_path: Path,
) -> None:
    # SQLite only: the effect intents are store claims, whose atomicity on PostgreSQL the
    # other two tests here (and the store conformance suite) already exercise.
    store_spec = str(tmp_path / "runs.db")
    log = tmp_path / "effects.log"
    request_id = _worker(store_spec, log, "run", "refund", INV7, "billing")["pending"]
    assert _cli("approve", store_spec, request_id, "--by", "ada").returncode == 0
    crashed = _worker(store_spec, log, "run", "refund", INV7, "billing", "v1", "crash")
    assert crashed == {"crashed": True}
    assert _executions(log) == ["refund INV-7"]  # the effect happened, nothing was recorded
    time.sleep(1.5)  # the dead worker's writer lease (1 s) ends: the next worker may write
    for how in ("run", "resume"):
        after = _worker(store_spec, log, how, "refund", INV7, "billing")
        assert after["error"] == "EffectAmbiguous", after
    assert _executions(log) == ["refund INV-7"]


@pytest.mark.slow
def test_processes_deciding_at_once_record_one_decision(store_spec: str, tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    request_id = _worker(store_spec, log, "run", "refund", INV7, "billing")["pending"]
    start = time.time() + 1.5  # every process imports pollard and opens the store first
    racer = (
        "import sys, time\n"
        "from pollard import ApprovalConflict, decide_approval\n"
        "store, request, verdict, who, start = sys.argv[1:6]\n"
        "while time.time() < float(start):\n"
        "    time.sleep(0.001)\n"
        "try:\n"
        "    decide_approval(store, request, verdict, by=who)\n"
        "    print('won')\n"
        "except ApprovalConflict:\n"
        "    print('conflict')\n"
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                racer,
                store_spec,
                request_id,
                "approve" if i % 2 else "deny",
                f"person{i}",
                str(start),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes.append(out.strip())
    assert sorted(outcomes) == ["conflict", "conflict", "conflict", "won"]
    store = open_store(parse_store_spec(store_spec))
    try:
        notes = [c for c in store.children(request_id) if c.node.kind.value == "note"]
        assert len(notes) == 1
        assert get_approval(store, request_id).decided_by == notes[0].node.payload["by"]
    finally:
        store.close()
