"""Record a run, then inspect, seal, export, import and merge it offline with pollard's tooling.

Run it with ``python examples/audit_tooling.py``: no keys, no network. It writes everything to a
temporary directory and prints what each step did, including the ``pollard`` CLI's own output.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from pollard import (
    Budget,
    BudgetExceeded,
    Runtime,
    SQLiteStore,
    export_subtree,
    gc,
    import_subtree,
    merge,
    seal,
)
from pollard.html import write_html


def fake_model(payload: dict) -> dict:
    return {
        "text": f"summary of {payload['input']}",
        "usage": {"input_tokens": 30, "output_tokens": 10},
    }


def cli(*args: object) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pollard.cli", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout + done.stderr


with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp)
    team_a, team_b = work / "team-a.db", work / "team-b.db"

    # Two workers record the same run label in their own stores.
    with Runtime(team_a) as runtime, runtime.run("triage", budget=Budget(tokens=100)) as run:
        run.model_call({"model": "mock-1", "input": "ticket 1"}, fn=fake_model)
        with run.branch() as draft:
            draft.note({"status": "draft"})
            draft.prune()
        run.model_call({"model": "mock-1", "input": "ticket 2"}, fn=fake_model)
        try:
            run.model_call({"model": "mock-1", "input": "ticket 3"}, fn=fake_model)
            run.model_call({"model": "mock-1", "input": "ticket 4"}, fn=fake_model)
        except BudgetExceeded as refused:
            print(f"refused before calling the model: {refused}")
        root_id = run.root_id
    with Runtime(team_b) as runtime, runtime.run("triage") as run:
        run.model_call({"model": "mock-1", "input": "ticket 9"}, fn=fake_model)

    print(cli("show", team_a, "triage"))
    print(cli("report", team_a, "triage"))

    with Runtime(team_a) as runtime:
        store = runtime.store
        sealed = seal(store, root_id)
        exported = export_subtree(store, root_id, work / "triage.json")
        page = work / "triage.html"
        write_html(store, root_id, page)
        print(f"sealed {len(sealed.entries)} nodes: {sealed.digest[:16]}...")
        print(f"exported {exported.nodes} nodes; HTML page of {page.stat().st_size} bytes")

    with Runtime(work / "archive.db") as runtime:
        imported = import_subtree(
            work / "triage.json", runtime.store, expected_digest=sealed.digest
        )
        print(f"imported {imported.imported} nodes into the archive, seal verified")
        with SQLiteStore(team_b, read_only=True) as other:
            merged = merge(runtime.store, other)
        print(f"merged team-b: copied {merged.copied}, already present {merged.existing}")
        collected = gc(runtime.store, "drop-pruned")
        print(f"gc removed {collected.removed_count} pruned node(s); survivors sealed")

    print(cli("verify", work / "archive.db"))
