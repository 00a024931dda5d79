"""The floor under `PostgresStore`'s figures: the least a budgeted step can cost on this server.

A raw psycopg loop doing what a step must do in its two round trips and nothing else: a hold (one
statement: take one unit of an exact shared budget row if any is left and insert a hold row) and
a commit (one statement: insert the step row and delete its hold), both acknowledged before
their WAL flush; with ``durable`` the commit is acknowledged after it. A refused attempt costs
what a refused pollard step costs in the contention workload: the refusal's record (flushed when
durable) and the two reads of the rollback after it. No JSON, no hashing, no ledger of
several meters, no runtime. Every statement is prepared once per session (``prepare=True``: the
server parses and plans it once, as the store's step functions are; psycopg's default cursor
does the same after five executions), and its parameters are bound by the server. Until issue 26
the floor sent each statement as a simple query bound on the client (`psycopg.ClientCursor`), so
the server parsed and planned both on every step: about 1.7x the floor's server CPU, which made
the store look closer to it than it is; ``prepared=False`` keeps that loop, printed beside.
``python -m bench._pg_floor DSN ATTEMPTS DURABLE`` is one worker:
it prints ``ready``, waits for a line on stdin, then prints ``ran <n> start <t0> end <t1> cpu
<c> server <b>`` (``time.monotonic()`` readings and CPU seconds, as `stress._workers` does).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

TABLES = (
    "CREATE TABLE pollard_floor_budget (id int PRIMARY KEY, used int NOT NULL, lim int NOT NULL)",
    "CREATE TABLE pollard_floor_holds (id text PRIMARY KEY)",
    "CREATE TABLE pollard_floor_steps (id text PRIMARY KEY, payload text NOT NULL)",
)
_ASYNC = "SELECT set_config('synchronous_commit', 'off', true)"
_HOLD = (
    f"WITH s AS ({_ASYNC}), u AS (UPDATE pollard_floor_budget SET used = used + 1 "
    "WHERE id = 1 AND used < lim AND EXISTS (SELECT 1 FROM s) RETURNING 1) "
    "INSERT INTO pollard_floor_holds SELECT %s FROM u RETURNING 1"
)
_COMMIT = (
    f"WITH s AS ({_ASYNC}), d AS (DELETE FROM pollard_floor_holds WHERE id = %s "
    "AND EXISTS (SELECT 1 FROM s) RETURNING 1) "
    "INSERT INTO pollard_floor_steps SELECT %s, %s FROM d"
)
# Durable: the same commit acknowledged after its flush (it holds no shared row's lock).
_COMMIT_FLUSHED = (
    "WITH d AS (DELETE FROM pollard_floor_holds WHERE id = %s RETURNING 1) "
    "INSERT INTO pollard_floor_steps SELECT %s, %s FROM d"
)

_REFUSAL = f"WITH s AS ({_ASYNC}) INSERT INTO pollard_floor_steps SELECT %s, %s FROM s"
_REFUSAL_FLUSHED = "INSERT INTO pollard_floor_steps VALUES (%s, %s)"
_READ = "SELECT id, payload FROM pollard_floor_steps WHERE id = %s"


def setup(dsn: str, budget: int) -> None:
    """Create the floor's tables (in the DSN's search_path schema) with an exact budget."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in TABLES:
            conn.execute(statement)
        conn.execute("INSERT INTO pollard_floor_budget VALUES (1, 0, %s)", (budget,))


def used(dsn: str) -> tuple[int, int]:
    """(units taken from the budget, steps stored)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT used FROM pollard_floor_budget WHERE id = 1), "
            "(SELECT count(*) FROM pollard_floor_steps WHERE payload NOT LIKE '{\"refused\"%%')"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def reset(dsn: str, budget: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pollard_floor_holds, pollard_floor_steps")
        conn.execute("UPDATE pollard_floor_budget SET used = 0, lim = %s", (budget,))


def _steps(cur: Any, attempts: int, durable: bool, prepared: bool = True) -> int:
    ran = 0
    fetchall = cur.fetchall
    # None: psycopg's default (prepared after five runs); a ClientCursor never prepares.
    prepare = True if prepared else None

    def execute(sql: str, params: tuple[Any, ...]) -> None:
        cur.execute(sql, params, prepare=prepare)

    for i in range(attempts):
        rid = uuid.uuid4().hex
        execute(_HOLD, (rid,))
        if not fetchall():
            # Refused, as a pollard step is: the refusal is recorded (flushed when durable),
            # then the worker's rollback reads the chain and the node it moves to.
            execute(_REFUSAL_FLUSHED if durable else _REFUSAL, (rid, f'{{"refused":{i}}}'))
            execute(_READ, (rid,))
            fetchall()
            execute(_READ, (rid,))
            fetchall()
            continue
        execute(_COMMIT_FLUSHED if durable else _COMMIT, (rid, rid, f'{{"i":{i}}}'))
        ran += 1
    return ran


def _open_cursor(conn: Any, prepared: bool) -> Any:
    import psycopg

    return conn.cursor() if prepared else psycopg.ClientCursor(conn)


def single(
    dsn: str, steps: int, durable: bool, prepared: bool = True
) -> tuple[float, float, float]:
    """One in-process loop (the budget must allow ``steps``): (steps/s, client and server CPU
    milliseconds per step). ``prepared=False``: the simple-query loop of before issue 26."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = _open_cursor(conn, prepared)
        _steps(cur, 20, durable, prepared)  # warm: every statement prepared
        start, cpu, server = time.perf_counter(), time.process_time(), _backend_cpu(conn)
        ran = _steps(cur, steps, durable, prepared)
        seconds = time.perf_counter() - start
        cpu, server = time.process_time() - cpu, _backend_cpu(conn) - server
    assert ran == steps
    return steps / seconds, cpu / steps * 1e3, server / steps * 1e3


def main(dsn: str, attempts: int, durable: bool) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SELECT 1")  # connected and warm before the common start
        print("ready", flush=True)
        sys.stdin.readline()
        began, cpu, server = time.monotonic(), time.process_time(), _backend_cpu(conn)
        ran = _steps(cur, attempts, durable)
        ended = time.monotonic()
        cpu, server = time.process_time() - cpu, _backend_cpu(conn) - server
    print(
        f"ran {ran} start {began:.6f} end {ended:.6f} cpu {cpu:.4f} server {server:.4f}",
        flush=True,
    )


def _backend_cpu(conn: Any) -> float:
    """CPU seconds of the connection's server backend (0 where ``/proc`` cannot tell)."""
    try:
        with open(f"/proc/{conn.info.backend_pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1")
