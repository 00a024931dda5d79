"""Stores side by side: PostgreSQL against SQLite, one writer and eight on one exact budget.

Measured in one run on the same machine (loopback PostgreSQL at 127.0.0.1:5432), in a fresh
PostgreSQL schema created for the run and dropped after it, so no figure depends on rows (live or
dead) that earlier runs left behind: a server without autovacuum keeps every deleted row until a
VACUUM, and the store must not get slower with them (row 1 is measured on an empty schema, the
same store's 2,000-step drift is reported beside it).

1. One writer records a budgeted chain (``Budget(steps=..., tokens=...)``, one model call per
   step) on SQLite, on PostgreSQL with ``durable=False`` (acknowledged before the
   WAL flush: SQLite's WAL + ``synchronous=NORMAL`` promise) and with the default ``durable=True``.
   Target: >= 2,000 steps/s. Beside each PostgreSQL figure the floor: a raw psycopg loop doing
   the same two round trips with the least work a budgeted step needs (`bench._pg_floor`, its
   statements prepared as the store's are). The first two rows are issue 26's targets as ratios
   this machine can judge: one writer at >= 0.9 of the floor in the same run, and eight
   processes' gain over one (row 4) at >= 0.9 of the floor's gain. Beside the first, the
   floor's own statements driven by the real runtime over a `MemoryStore`
   (`_FloorUnderRuntime`): the floor's round trips plus the runtime's per-step work, in series
   as a store's are, so about the most any store design reaches on this machine; and the
   runtime's CPU per step on `MemoryStore` alone (in a tight loop; between round trips it
   costs two to three times as much).
2. Where one ``durable=False`` step's time goes: client CPU, the server backend's CPU (from
   ``/proc/<backend pid>/stat``) and the rest (waiting: scheduling on a shared machine, disk),
   with the rate the CPU alone allows one writer (client and server run in series), beside the
   floor's: a target above the floor's bound is out of this machine's reach. Then the cost of
   one durable commit of a one-row ``INSERT`` against an unflushed one.
3. Round trips per budgeted step and per walked node on PostgreSQL (counted, not timed).
4. Eight processes share one exact step budget against one process doing the SAME work: the
   same attempts in total (``WORKERS * ATTEMPTS``) on the same budget (half of them, so half
   the attempts are refused either way), round robin over eight cursors of the run, so its
   chains (and the rollback after a refusal, which reads the chain) are as deep as the eight
   workers' (one cursor of 800 attempts made each rollback read 400 ancestors instead of 50).
   Each worker opens its store and records one warm-up
   step before the common start, and reports its own start and end (``time.monotonic``), so
   process start-up and exit are not timed (they once made the one-process figure look four
   times slower than the one-writer row). The figure is the one process's wall time over the
   eight's. Target: >= 3x on PostgreSQL, with zero overspend (checked; a violation is reported
   as 0). Beside it the same ratio for the raw floor loop, and the machine's bound: cores x the
   one process's wall time / the CPU its steps cost (its own and its PostgreSQL backend's),
   since eight processes cannot use more than every core; a ratio of 3 needs a bound above 3.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import _pg_floor
from bench._result import Result
from pollard import Budget, MemoryStore, Runtime, SQLiteStore

STEPS = 400
WORKERS = 8
ATTEMPTS = 100  # per worker of the eight; the one process makes WORKERS * ATTEMPTS
WALK_NODES = 2_000
DRIFT_STEPS = 3_000
DRIFT_WINDOW = 500  # steps: /proc counts CPU in 10 ms ticks, so a window is about 25 of them
PG_DSN_VAR = "POLLARD_TEST_POSTGRES_DSN"
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
ROOT = Path(__file__).resolve().parent.parent
_WORKER = [sys.executable, "-m", "stress._workers", "contend"]
_FLOOR = [sys.executable, "-m", "bench._pg_floor"]

# (seconds from the first start to the last end, steps settled, budget, CPU seconds the workers
# and their PostgreSQL backends spent over their spans)
Contention = tuple[float, int, int, float]


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


class _FloorUnderRuntime(MemoryStore):
    """The floor's two statements driven by the real runtime: about the most a store reaches.

    A `MemoryStore` (the runtime's own bookkeeping, in memory) that also sends the floor's
    hold when it admits a step and the floor's commit when it records one, over one prepared
    psycopg connection. Its rate is the floor's round trips plus the runtime's per-step work,
    in series as a store's are: a store that added no server work and no client work beyond
    the in-memory store's would reach it; only that bookkeeping (its ``reserve`` and
    ``commit``, some 0.017 ms per step) is work a store could do with less.
    """

    def __init__(self, dsn: str) -> None:
        import psycopg

        super().__init__()
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._cur = self._conn.cursor()

    def reserve(self, claims: Any, windows: Any = (), **kwargs: Any) -> Any:
        admission = super().reserve(claims, windows, **kwargs)
        if admission.reservation_id is not None:
            self._cur.execute(_pg_floor._HOLD, (admission.reservation_id,), prepare=True)
            assert self._cur.fetchall(), "the floor's budget ran out"
        return admission

    def commit(self, node: Any, **kwargs: Any) -> bool:
        rid = kwargs.get("reservation_id")
        if rid is not None:
            text = node.payload_text or "{}"
            self._cur.execute(_pg_floor._COMMIT, (rid, node.id, text), prepare=True)
        return super().commit(node, **kwargs)

    def close(self) -> None:
        self._conn.close()
        super().close()


def _floor_under_runtime(dsn: str, steps: int) -> tuple[float, float]:
    """(steps/s of the floor's statements under the runtime, the runtime's client CPU ms per
    step on `MemoryStore` alone), both in this run."""
    _pg_floor.reset(dsn, 10**9)
    with _FloorUnderRuntime(dsn) as store:
        rate = _chain(store, steps)
    with Runtime(MemoryStore()) as runtime:
        run = runtime.run("runtime", budget=Budget(steps=10**9, tokens=10**12))
        run.model_call({"model": "m", "i": -1}, fn=_answer)
        cpu = time.process_time()
        for i in range(steps):
            run.model_call({"model": "m", "i": i}, fn=_answer)
        cpu = time.process_time() - cpu
    return rate, cpu / steps * 1e3


def _drift(store: Any) -> tuple[float, float]:
    """Server CPU ms per step over the first and the last `DRIFT_WINDOW` of `DRIFT_STEPS`."""
    with Runtime(store) as runtime:
        run = runtime.run("drift", budget=Budget(steps=10**9, tokens=10**12))
        run.model_call({"model": "m", "i": -1}, fn=_answer)
        backend = store._connection().info.backend_pid
        marks = []
        for i in range(DRIFT_STEPS):
            if i in (0, DRIFT_WINDOW, DRIFT_STEPS - DRIFT_WINDOW):
                marks.append(_cpu(backend))
            run.model_call({"model": "m", "i": i}, fn=_answer)
        marks.append(_cpu(backend))
    first, last = marks[1] - marks[0], marks[3] - marks[2]
    return first / DRIFT_WINDOW * 1e3, last / DRIFT_WINDOW * 1e3


def _start(procs: list[subprocess.Popen[str]]) -> list[str]:
    """Wait until every worker is ready, start them together, return their last lines."""
    for proc in procs:  # every worker has opened its store: start-up is not timed
        assert proc.stdout is not None
        proc.stdout.readline()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    lines = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"a bench worker exited {proc.returncode}")
        lines.append(out.strip().splitlines()[-1])
    return lines


def _span(lines: list[str]) -> tuple[float, int, float]:
    """(first start to last end in seconds, steps the workers ran, CPU seconds) from their lines."""
    fields = [line.split() for line in lines]
    starts = [float(f[f.index("start") + 1]) for f in fields]
    ends = [float(f[f.index("end") + 1]) for f in fields]
    cpu = sum(float(f[f.index("cpu") + 1]) + float(f[f.index("server") + 1]) for f in fields)
    return max(ends) - min(starts), sum(int(f[1]) for f in fields), cpu


def _env() -> dict[str, str]:
    """The workers' environment: this checkout first, then any ``PYTHONPATH`` already set."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _contend(store: str, workers: int) -> Contention:
    """The shared-budget workload (see the module doc) split over ``workers`` processes."""
    budget = WORKERS * ATTEMPTS // 2
    attempts = WORKERS * ATTEMPTS // workers
    label = f"shared-{uuid.uuid4().hex[:8]}"
    env = _env()
    procs = [
        subprocess.Popen(
            [*_WORKER, store, label, str(budget), str(attempts), str(WORKERS // workers)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    wall, ran, cpu = _span(_start(procs))
    with Runtime(store) as runtime:
        settled = int(runtime.store.totals(runtime.run(label).root_id).get("steps", 0))
    if max(ran, settled) > budget:
        return 0.0, settled, budget, cpu  # overspent: the figure is void
    return wall, settled, budget, cpu


def _floor_contend(dsn: str, workers: int, durable: bool) -> Contention:
    budget = WORKERS * ATTEMPTS // 2
    _pg_floor.reset(dsn, budget)
    env = _env()
    procs = [
        subprocess.Popen(
            [*_FLOOR, dsn, str(WORKERS * ATTEMPTS // workers), "1" if durable else "0"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    wall, ran, cpu = _span(_start(procs))
    taken, stored = _pg_floor.used(dsn)
    if max(ran, taken, stored) > budget:
        return 0.0, stored, budget, cpu
    return wall, stored, budget, cpu


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _split(store: Any, steps: int) -> tuple[float, float, float]:
    """Per step: (client CPU, server backend CPU, the rest of the wall time) in ms."""
    with Runtime(store) as runtime:
        run = runtime.run("split", budget=Budget(steps=10**9, tokens=10**12))
        run.model_call({"model": "m", "i": -1}, fn=_answer)
        backend = store._connection().info.backend_pid
        server, client, wall = _cpu(backend), time.process_time(), time.perf_counter()
        for i in range(steps):
            run.model_call({"model": "m", "i": i}, fn=_answer)
        wall = time.perf_counter() - wall
        client = time.process_time() - client
        server = _cpu(backend) - server
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


def _with_options(dsn: str, *options: str) -> str:
    """``dsn`` with libpq ``options`` (``-c name=value``) added (a URL DSN)."""
    text = "%20".join(f"-c{option.replace('=', '%3D')}" for option in options)
    return f"{dsn}{'&' if '?' in dsn else '?'}options={text}"


@contextmanager
def _fresh_schema(dsn: str) -> Iterator[str]:
    """A new empty schema for the run (dropped after it); yields its name."""
    import psycopg

    schema = f"pollard_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _floor_chain(
    dsn: str, steps: int, durable: bool, prepared: bool = True
) -> tuple[float, float, float]:
    _pg_floor.reset(dsn, 10**9)
    return _pg_floor.single(dsn, steps, durable, prepared)


def run() -> list[Result]:
    if not _pg_up():
        return [Result("stores (skipped: no PostgreSQL server or no psycopg)", 0, "")]
    from pollard import PostgresStore

    base = os.environ.get(PG_DSN_VAR, PG_DSN)
    with _fresh_schema(base) as schema, tempfile.TemporaryDirectory() as tmp:
        dsn = _with_options(base, f"search_path={schema}")
        fast_dsn = _with_options(base, f"search_path={schema}", "synchronous_commit=off")
        PostgresStore(dsn, store_id="setup").close()  # tables and functions, not timed
        _pg_floor.setup(dsn, 0)
        ids = iter(f"bench-{i}" for i in range(20))
        lite = _chain(SQLiteStore(Path(tmp) / "one.db"), STEPS)
        floor, floor_client, floor_server = _floor_chain(dsn, STEPS, durable=False)
        simple_floor = _floor_chain(dsn, STEPS, durable=False, prepared=False)[0]
        under, runtime_ms = _floor_under_runtime(dsn, STEPS)
        with PostgresStore(dsn, store_id=next(ids), durable=False) as store:
            pg = _chain(store, STEPS)
        floor_durable = _floor_chain(dsn, STEPS, durable=True)[0]
        with PostgresStore(dsn, store_id=next(ids), durable=True) as store:
            pg_durable = _chain(store, STEPS)
        with PostgresStore(dsn, store_id=next(ids)) as store:
            per_step, per_node = _round_trips(store)
        with PostgresStore(dsn, store_id=next(ids), durable=False) as store:
            split = _split(store, STEPS)
        with PostgresStore(dsn, store_id=next(ids), durable=False) as store:
            drift = _drift(store)
        flushed, unflushed = _commit_ms(dsn, True), _commit_ms(dsn, False)
        lite_one = _contend(str(Path(tmp) / "c1.db"), 1)
        lite_many = _contend(str(Path(tmp) / "c8.db"), WORKERS)
        pg_one = _contend(f"{fast_dsn}#{next(ids)}", 1)
        pg_many = _contend(f"{fast_dsn}#{next(ids)}", WORKERS)
        floor_one = _floor_contend(dsn, 1, durable=False)
        floor_many = _floor_contend(dsn, WORKERS, durable=False)
        pgd_one = _contend(f"{dsn}#{next(ids)}", 1)
        pgd_many = _contend(f"{dsn}#{next(ids)}", WORKERS)
        floord_one = _floor_contend(dsn, 1, durable=True)
        floord_many = _floor_contend(dsn, WORKERS, durable=True)
        lite_walk = _walk_seconds(SQLiteStore(Path(tmp) / "walk.db"))
        with PostgresStore(dsn, store_id=next(ids)) as store:
            pg_walk = _walk_seconds(store)

    floor_cap = 1e3 / (floor_client + floor_server)

    def ratio(many: Contention, one: Contention) -> float:
        return one[0] / many[0] if many[0] and one[0] else 0.0

    def rate(c: Contention) -> float:
        return c[1] / c[0] if c[0] else 0.0

    def bound(one: Contention) -> float:
        # The most any number of processes can gain on this machine: every core busy with the
        # CPU one process's steps cost (its own and its backend's), none of it shared.
        cores = os.cpu_count() or 1
        return min(float(WORKERS), cores * one[0] / one[3]) if one[3] else float(WORKERS)

    def busy(one: Contention) -> float:
        return one[3] / one[0] * 100 if one[0] else 0.0

    def contention(many: Contention, one: Contention, extra: str) -> str:
        return (
            f"{rate(many):.0f} vs {rate(one):.0f} steps/s; {many[1]}/{many[2]} settled, "
            f"0 overspend; CPU bound of this machine {bound(one):.2f}x "
            f"({os.cpu_count()} cores, {busy(one):.0f}% of one busy for 1 process)"
            f"{extra}"
        )

    def gain_share(many: Contention, one: Contention, fmany: Contention, fone: Contention) -> float:
        store, base = ratio(many, one), ratio(fmany, fone)
        return store / base if base else 0.0

    return [
        Result(
            "postgres 1 writer / the floor, durable=False (same run)",
            pg / floor if floor else 0.0,
            "x",
            target=0.9,
            note=f"{pg:.0f} vs {floor:.0f} steps/s; by CPU per step (less swayed by a busy "
            f"machine) {(floor_client + floor_server) / sum(split[:2]):.2f}x; the floor's "
            f"statements under the runtime (about the most a store reaches here) {under:.0f}/s, "
            f"{under / floor:.2f}x of the floor: the runtime's own work costs "
            f"{runtime_ms:.3f} ms of CPU per step on MemoryStore; durable=True "
            f"{pg_durable:.0f} vs {floor_durable:.0f}/s ({pg_durable / floor_durable:.2f}x)",
        ),
        Result(
            f"postgres {WORKERS} processes' gain over 1 / the floor's (same run)",
            gain_share(pg_many, pg_one, floor_many, floor_one),
            "x",
            target=0.9,
            note=f"durable=False; durable=True "
            f"{gain_share(pgd_many, pgd_one, floord_many, floord_one):.2f}x",
        ),
        Result(
            "postgres 1 writer, budgeted steps, durable=False [wall]",
            pg,
            "steps/s",
            target=2_000,
            note=f"floor (raw 2-round-trip loop, prepared) {floor:.0f}/s; the simple-query floor "
            f"of before {simple_floor:.0f}/s; sqlite {lite:.0f}/s; "
            f"postgres/sqlite {pg / lite:.2f}x",
        ),
        Result(
            "postgres 1 writer, durable=True (default) [wall]",
            pg_durable,
            "steps/s",
            note=f"floor {floor_durable:.0f}/s; postgres/sqlite {pg_durable / lite:.2f}x",
        ),
        Result(
            "postgres durable=False step: client cpu + server cpu + waiting",
            sum(split),
            "ms",
            direction="lower",
            note=f"{split[0]:.2f} + {split[1]:.2f} + {split[2]:.2f} ms; in series, the CPU alone "
            f"caps one writer at {1e3 / sum(split[:2]):.0f} steps/s; the floor's "
            f"{floor_client:.2f} + {floor_server:.2f} ms at {floor_cap:.0f}/s",
        ),
        Result(
            f"postgres server cpu per step, last {DRIFT_WINDOW} of {DRIFT_STEPS:,} / first",
            drift[1] / drift[0] if drift[0] else 0.0,
            "x",
            direction="lower",
            note=f"{drift[0]:.2f} -> {drift[1]:.2f} ms (no vacuum runs in between)",
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
                pg_many,
                pg_one,
                f"; floor {ratio(floor_many, floor_one):.2f}x "
                f"({rate(floor_many):.0f} vs {rate(floor_one):.0f}/s)",
            ),
        ),
        Result(
            f"postgres {WORKERS} processes / 1 on one exact budget (durable=True, default)",
            ratio(pgd_many, pgd_one),
            "x",
            target=3,
            note=contention(
                pgd_many,
                pgd_one,
                f"; floor {ratio(floord_many, floord_one):.2f}x "
                f"({rate(floord_many):.0f} vs {rate(floord_one):.0f}/s)",
            ),
        ),
        Result(
            f"sqlite {WORKERS} processes / 1 on one exact budget",
            ratio(lite_many, lite_one),
            "x",
            note=contention(lite_many, lite_one, ""),
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
