"""8 processes on one exact step budget, on SQLite and on PostgreSQL: zero overspend."""

from __future__ import annotations

import socket
import tempfile
import time
import uuid
from pathlib import Path

from pollard import Runtime
from stress._proc import spawn, start_together
from stress._report import Deadline, Outcome

WORKERS = 8
ATTEMPTS = 200  # per worker
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def _round(store: str, budget: int, outcome: Outcome) -> float:
    label = f"shared-{uuid.uuid4().hex[:8]}"
    procs = [spawn("contend", store, label, str(budget), str(ATTEMPTS)) for _ in range(WORKERS)]
    start_together(procs)  # every worker has opened its store: start-up is not timed
    start = time.perf_counter()
    ran = 0
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            outcome.fail(f"worker exited {proc.returncode}: {err.strip().splitlines()[-1:]}")
            continue
        ran += int(out.split()[1])
    wall = time.perf_counter() - start
    with Runtime(store) as runtime:
        root = runtime.run(label).root_id
        settled = runtime.store.totals(root).get("steps", 0)
    outcome.worst = max(outcome.worst, ran - budget, int(settled) - budget)
    if ran > budget or settled > budget:
        outcome.fail(f"overspend: budget {budget}, {ran} calls ran, {settled} settled")
    elif ran != budget or settled != budget:
        outcome.fail(f"underspend with work left: budget {budget}, {ran} ran, {settled} settled")
    return wall


def _campaign(name: str, store: str, scale: float) -> Outcome:
    budget = WORKERS * ATTEMPTS // 2  # half the attempts must be refused
    outcome = Outcome(
        name,
        f"{WORKERS} processes on Budget(steps={budget}) never overspend",
        cap=max(1, int(3 * scale)),
    )
    started = time.monotonic()
    deadline = Deadline(120 * scale, outcome.cap)
    walls = []
    while deadline.more():
        walls.append(_round(store, budget, outcome))
        outcome.trials += 1
    best = min(walls)
    outcome.seconds = time.monotonic() - started
    outcome.figure = (
        f"worst overspend {max(outcome.worst, 0)} steps; "
        f"{WORKERS}x{ATTEMPTS} attempts in {best:.2f} s (best round)"
    )
    return outcome


def _pg_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=0.5).close()
        import psycopg  # noqa: F401
    except (OSError, ImportError):
        return False
    return True


def run(scale: float) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        outcomes.append(_campaign("contention sqlite", str(Path(tmp) / "shared.db"), scale))
    if _pg_up():
        store = f"{PG_DSN}#stress-{uuid.uuid4().hex[:12]}"
        outcomes.append(_campaign("contention postgres", store, scale))
        _drop(store)
    else:
        skipped = Outcome("contention postgres", "zero overspend on PostgreSQL")
        skipped.skipped = "no server at 127.0.0.1:5432 or no psycopg"
        outcomes.append(skipped)
    return outcomes


def _drop(store: str) -> None:
    import psycopg

    dsn, _, store_id = store.rpartition("#")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("nodes", "blobs", "ledger", "reservations", "window_events", "kv"):
            if conn.execute("SELECT to_regclass(%s)", (f"pollard_{table}",)).fetchone() == (None,):
                continue
            conn.execute(f"DELETE FROM pollard_{table} WHERE store_id = %s", (store_id,))
