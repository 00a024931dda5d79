"""Stores side by side: PostgreSQL against SQLite, one writer and eight on one exact budget.

Measured in one run on the same machine (loopback PostgreSQL at 127.0.0.1:5432):

1. One writer records a budgeted chain (``Budget(steps=..., tokens=...)``, one model call per
   step) on SQLite, on PostgreSQL with ``durable=False`` (acknowledged before the
   WAL flush: SQLite's WAL + ``synchronous=NORMAL`` promise) and with the default ``durable=True``.
   Target: >= 2,000 steps/s.
2. Where one default step's time goes: client CPU, the server backend's CPU (from
   ``/proc/<backend pid>/stat``) and the rest (waiting: scheduling on a shared machine, disk).
   Beside it the cost of one durable commit of a one-row ``INSERT`` against an unflushed one.
3. Round trips per budgeted step and per walked node on PostgreSQL (counted, not timed).
4. Eight processes share one exact step budget (half their attempts are refused). Aggregate
   throughput (settled steps / wall time from a common start) over one process's, per backend
   and PostgreSQL mode. Target: >= 3x on PostgreSQL, with zero overspend (checked; a violation
   is reported as 0).
5. Walking a 2,000-node run: PostgreSQL over SQLite wall time.
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
    for proc in procs:  # every worker has imported and opened its store: start-up is not timed
        assert proc.stdout is not None
        proc.stdout.readline()
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


def _split(store: Any, steps: int) -> tuple[float, float, float]:
    """Per default step: (client CPU, server backend CPU, the rest of the wall time) in ms."""

    def cpu(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    with Runtime(store) as runtime:
        run = runtime.run("split", budget=Budget(steps=10**9, tokens=10**12))
        run.model_call({"model": "m", "i": -1}, fn=_answer)
        backend = store._connection().info.backend_pid
        server, client, wall = cpu(backend), time.process_time(), time.perf_counter()
        for i in range(steps):
            run.model_call({"model": "m", "i": i}, fn=_answer)
        wall = time.perf_counter() - wall
        client = time.process_time() - client
        server = cpu(backend) - server
    return client / steps * 1e3, server / steps * 1e3, (wall - client - server) / steps * 1e3


def _commit_ms(dsn: str, flush: bool, count: int = 200) -> float:
    """Milliseconds per autocommitted one-row INSERT, flushed to disk or not."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        table = f"pollard_bench_{uuid.uuid4().hex[:8]}"
        conn.execute(f"CREATE TABLE {table} (x int)")
        try:
            conn.execute(f"SET synchronous_commit = {'on' if flush else 'off'}")
            start = time.perf_counter()
            for _ in range(count):
                conn.execute(f"INSERT INTO {table} VALUES (1)")
            return (time.perf_counter() - start) / count * 1e3
        finally:
            conn.execute(f"DROP TABLE {table}")


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
    fast_dsn = dsn + ("&" if "?" in dsn else "?") + "options=-csynchronous_commit%3Doff"
    ids = [f"bench-{uuid.uuid4().hex[:12]}" for _ in range(9)]
    results: list[Result] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            lite = _chain(SQLiteStore(Path(tmp) / "one.db"), STEPS)
            with PostgresStore(dsn, store_id=ids[0], durable=False) as store:
                pg = _chain(store, STEPS)
            with PostgresStore(dsn, store_id=ids[1], durable=True) as store:
                pg_durable = _chain(store, STEPS)
            with PostgresStore(dsn, store_id=ids[2]) as store:
                per_step, per_node = _round_trips(store)
            with PostgresStore(dsn, store_id=ids[6], durable=False) as store:
                split = _split(store, STEPS)
            flushed, unflushed = _commit_ms(dsn, True), _commit_ms(dsn, False)
            lite_one = _contend(str(Path(tmp) / "c1.db"), 1)
            lite_many = _contend(str(Path(tmp) / "c8.db"), WORKERS)
            pg_one = _contend(f"{fast_dsn}#{ids[3]}", 1)
            pg_many = _contend(f"{fast_dsn}#{ids[4]}", WORKERS)
            pgd_one = _contend(f"{dsn}#{ids[7]}", 1)
            pgd_many = _contend(f"{dsn}#{ids[8]}", WORKERS)
            lite_walk = _walk_seconds(SQLiteStore(Path(tmp) / "walk.db"))
            with PostgresStore(dsn, store_id=ids[5]) as store:
                pg_walk = _walk_seconds(store)
    finally:
        for store_id in ids:
            _drop(dsn, store_id)

    def ratio(many: tuple[float, int, int], one: tuple[float, int, int]) -> float:
        return many[0] / one[0] if one[0] else 0.0

    def contention(name: str, many: tuple[float, int, int], one: tuple[float, int, int]) -> str:
        return (
            f"{many[0]:.0f} vs {one[0]:.0f} steps/s; {many[1]}/{many[2]} settled, 0 overspend; "
            f"{name}"
        )

    results += [
        Result(
            "postgres 1 writer, budgeted steps, durable=False [wall]",
            pg,
            "steps/s",
            target=2_000,
            note=f"sqlite same run: {lite:.0f}/s; postgres/sqlite {pg / lite:.2f}x",
        ),
        Result(
            "postgres 1 writer, durable=True (default) [wall]",
            pg_durable,
            "steps/s",
            note=f"postgres/sqlite {pg_durable / lite:.2f}x",
        ),
        Result(
            "postgres durable=False step: client cpu + server cpu + waiting",
            sum(split),
            "ms",
            direction="lower",
            note=f"{split[0]:.2f} + {split[1]:.2f} + {split[2]:.2f} ms",
        ),
        Result(
            "one-row commit, flushed / unflushed",
            flushed / unflushed if unflushed else 0.0,
            "x",
            direction="lower",
            note=f"{flushed:.2f} ms vs {unflushed:.2f} ms",
        ),
        Result("postgres round trips per budgeted step", per_step, "", note="was about 17"),
        Result("postgres round trips per walked node", per_node, "", note="was 1 per node"),
        Result(
            f"postgres {WORKERS} processes / 1 on one exact budget (durable=False)",
            ratio(pg_many, pg_one),
            "x",
            target=3,
            note=contention(
                f"postgres/sqlite {WORKERS}: {ratio(pg_many, lite_many):.2f}x", pg_many, pg_one
            ),
        ),
        Result(
            f"postgres {WORKERS} processes / 1 on one exact budget (durable=True, default)",
            ratio(pgd_many, pgd_one),
            "x",
            target=3,
            note=contention(
                f"postgres/sqlite {WORKERS}: {ratio(pgd_many, lite_many):.2f}x", pgd_many, pgd_one
            ),
        ),
        Result(
            f"sqlite {WORKERS} processes / 1 on one exact budget",
            ratio(lite_many, lite_one),
            "x",
            note=contention("", lite_many, lite_one),
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
