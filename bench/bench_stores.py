"""Stores side by side: PostgreSQL against SQLite, one writer and eight on one exact budget.

Measured in one run on the same machine (loopback PostgreSQL at 127.0.0.1:5432):

1. One writer records a budgeted chain (``Budget(steps=..., tokens=...)``, one model call per
   step) on SQLite, on PostgreSQL, and on PostgreSQL with ``synchronous_commit=off`` in the DSN
   (``options=-csynchronous_commit=off``: commits are acknowledged before the WAL flush, the
   durability class of SQLite's WAL with ``synchronous=NORMAL``). Target: >= 2,000 steps/s.
2. Round trips per budgeted step and per walked node on PostgreSQL (counted, not timed).
3. Eight processes share one exact step budget (half their attempts are refused). Aggregate
   throughput (settled steps / wall time from a common start) over one process's, per backend.
   Target: >= 3x on PostgreSQL, with zero overspend (checked; a violation is reported as 0).
4. Walking a 2,000-node run: PostgreSQL over SQLite wall time.

On a shared machine every PostgreSQL figure is bounded by the disk flush of each durable commit
(one per step) and by CPU left for the server; the ``synchronous_commit=off`` row shows what
the round trips alone cost.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._result import Result
from pollard import Budget, Runtime, SQLiteStore

STEPS = 400
WORKERS = 8
ATTEMPTS = 150
WALK_NODES = 2_000
PG_DSN_VAR = "POLLARD_TEST_POSTGRES_DSN"
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
ROOT = Path(__file__).resolve().parent.parent
_WORKER = [sys.executable, "-m", "stress._workers", "contend"]


def _answer(payload: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 12, "output_tokens": 3}}


def _chain(store: Any, steps: int) -> float:
    with Runtime(store) as runtime:
        run = runtime.run("bench", budget=Budget(steps=10**9, tokens=10**12))
        run.model_call({"model": "m", "i": -1}, fn=_answer)  # connections, schema, caches
        start = time.perf_counter()
        for i in range(steps):
            run.model_call({"model": "m", "i": i}, fn=_answer)
        return steps / (time.perf_counter() - start)


def _contend(store: str, workers: int) -> tuple[float, int, int]:
    """(settled steps per second from a common start, settled, budget) for ``workers`` processes."""
    budget = workers * ATTEMPTS // 2
    label = f"shared-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [*_WORKER, store, label, str(budget), str(ATTEMPTS)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    time.sleep(1.0)  # let every worker import and open its store
    start = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    ran = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        ran += int(out.split()[1])
    wall = time.perf_counter() - start
    with Runtime(store) as runtime:
        settled = int(runtime.store.totals(runtime.run(label).root_id).get("steps", 0))
    if max(ran, settled) > budget:
        return 0.0, settled, budget  # overspent: the figure is void
    return settled / wall, settled, budget


def _walk_seconds(store: Any) -> float:
    with Runtime(store) as runtime:
        run = runtime.run("walk")
        for i in range(WALK_NODES):
            run.note({"i": i})
        start = time.perf_counter()
        count = sum(1 for _ in store.walk(run.root_id))
        seconds = time.perf_counter() - start
    assert count == WALK_NODES + 1
    return seconds


def _round_trips(store: Any) -> tuple[float, float]:
    from pollard.stores import postgres

    counted = {"n": 0}
    batch, cursor = postgres.PostgresStore._batch, postgres.PostgresStore._cursor

    def counted_batch(self: Any, queue: Any) -> Any:
        counted["n"] += 1
        return batch(self, queue)

    def counted_cursor(self: Any) -> Any:
        counted["n"] += 1
        return cursor(self)

    postgres.PostgresStore._batch = counted_batch  # type: ignore[method-assign]
    postgres.PostgresStore._cursor = counted_cursor  # type: ignore[method-assign]
    try:
        with Runtime(store) as runtime:
            run = runtime.run("trips", budget=Budget(steps=1_000, tokens=10**9))
            run.model_call({"i": -1}, fn=_answer)
            counted["n"] = 0
            for i in range(50):
                run.model_call({"i": i}, fn=_answer)
            per_step = counted["n"] / 50
            counted["n"] = 0
            nodes = sum(1 for _ in store.walk(run.root_id))
            per_node = counted["n"] / nodes
    finally:
        postgres.PostgresStore._batch = batch  # type: ignore[method-assign]
        postgres.PostgresStore._cursor = cursor  # type: ignore[method-assign]
    return per_step, per_node


def _pg_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=0.5).close()
        import psycopg  # noqa: F401
    except (OSError, ImportError):
        return False
    return True


def _drop(dsn: str, store_id: str) -> None:
    import psycopg

    tables = ("nodes", "blobs", "ledger", "reservations", "window_events", "kv")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"DELETE FROM pollard_{table} WHERE store_id = %s", (store_id,))


def run() -> list[Result]:
    if not _pg_up():
        return [Result("stores (skipped: no PostgreSQL server or no psycopg)", 0, "")]
    from pollard import PostgresStore

    dsn = os.environ.get(PG_DSN_VAR, PG_DSN)
    fast = dsn + ("&" if "?" in dsn else "?") + "options=-csynchronous_commit%3Doff"
    ids = [f"bench-{uuid.uuid4().hex[:12]}" for _ in range(6)]
    results: list[Result] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            lite = _chain(SQLiteStore(Path(tmp) / "one.db"), STEPS)
            with PostgresStore(dsn, store_id=ids[0]) as store:
                pg = _chain(store, STEPS)
            with PostgresStore(fast, store_id=ids[1]) as store:
                pg_fast = _chain(store, STEPS)
            with PostgresStore(dsn, store_id=ids[2]) as store:
                per_step, per_node = _round_trips(store)
            lite_one = _contend(str(Path(tmp) / "c1.db"), 1)
            lite_many = _contend(str(Path(tmp) / "c8.db"), WORKERS)
            pg_one = _contend(f"{dsn}#{ids[3]}", 1)
            pg_many = _contend(f"{dsn}#{ids[4]}", WORKERS)
            lite_walk = _walk_seconds(SQLiteStore(Path(tmp) / "walk.db"))
            with PostgresStore(dsn, store_id=ids[5]) as store:
                pg_walk = _walk_seconds(store)
    finally:
        for store_id in ids:
            _drop(dsn, store_id)
    results += [
        Result(
            "postgres 1 writer, budgeted steps [wall]",
            pg,
            "steps/s",
            target=2_000,
            note=f"sqlite same run: {lite:.0f}/s; postgres/sqlite {pg / lite:.2f}x",
        ),
        Result(
            "postgres 1 writer, synchronous_commit=off [wall]",
            pg_fast,
            "steps/s",
            target=2_000,
            note=f"postgres/sqlite {pg_fast / lite:.2f}x",
        ),
        Result("postgres round trips per budgeted step", per_step, "", note="was about 17"),
        Result("postgres round trips per walked node", per_node, "", note="was 1 per node"),
        Result(
            f"postgres {WORKERS} processes / 1 on one exact budget",
            pg_many[0] / pg_one[0] if pg_one[0] else 0.0,
            "x",
            target=3,
            note=f"{pg_many[0]:.0f} vs {pg_one[0]:.0f} steps/s; {pg_many[1]}/{pg_many[2]} "
            "settled, 0 overspend",
        ),
        Result(
            f"sqlite {WORKERS} processes / 1 on one exact budget",
            lite_many[0] / lite_one[0] if lite_one[0] else 0.0,
            "x",
            note=f"{lite_many[0]:.0f} vs {lite_one[0]:.0f} steps/s; {lite_many[1]}/{lite_many[2]} "
            "settled, 0 overspend",
        ),
        Result(
            f"postgres {WORKERS} processes / sqlite {WORKERS} processes",
            pg_many[0] / lite_many[0] if lite_many[0] else 0.0,
            "x",
        ),
        Result(
            f"walk {WALK_NODES:,} nodes: postgres / sqlite wall time",
            pg_walk / lite_walk,
            "x",
            direction="lower",
            note=f"{pg_walk * 1000:.0f} ms vs {lite_walk * 1000:.0f} ms",
        ),
        Result(
            "load average during the run (1 min)",
            os.getloadavg()[0],
            "",
            note=f"{os.cpu_count()} cores",
        ),
    ]
    return results
