"""SIGKILL a SQLite writer at random moments: no acknowledged node is ever lost."""

from __future__ import annotations

import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

from pollard import SQLiteStore, verify
from stress._proc import spawn
from stress._report import Deadline, Outcome


def _kill_once(path: Path, label: str, rng: random.Random, outcome: Outcome) -> int:
    proc = spawn("write", str(path), label)
    acked: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            acked.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # Wait for the first acknowledgement, then kill at a random moment of the write loop.
    start = time.monotonic()
    while not acked and time.monotonic() - start < 30 and proc.poll() is None:
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.25))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=10)
    if proc.stderr is not None:
        proc.stderr.close()
    seen = [node_id for node_id in acked if len(node_id) == 64]
    with SQLiteStore(path) as store:
        lost = [node_id for node_id in seen if not store.exists(node_id)]
        report = verify(store)
    if lost:
        outcome.fail(f"{len(lost)} acknowledged node(s) lost after a kill (first {lost[0][:12]})")
    if not report.ok:
        outcome.fail(f"the store does not verify after a kill: {report.findings[0].message}")
    return len(seen)


def run(scale: float) -> list[Outcome]:
    outcome = Outcome(
        "crash loop sqlite",
        "a SIGKILLed writer never loses an acknowledged node; the file verifies",
        cap=max(1, int(40 * scale)),
    )
    started = time.monotonic()
    rng = random.Random(14)
    acked = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crash.db"
        deadline = Deadline(90 * scale, outcome.cap)
        while deadline.more():
            acked += _kill_once(path, f"crash-{outcome.trials}", rng, outcome)
            outcome.trials += 1
    outcome.seconds = time.monotonic() - started
    outcome.figure = (
        f"{outcome.trials} kills, {acked} acknowledged nodes, 0 lost"
        if not (outcome.failures)
        else f"{outcome.trials} kills, {acked} acknowledged nodes, {outcome.failures} broke"
    )
    return [outcome]
