"""Child processes of the campaigns: ``python -m stress._workers KIND ARGS...``.

``contend STORE LABEL BUDGET ATTEMPTS [CURSORS]``: record up to ATTEMPTS model calls on the run
LABEL under ``Budget(steps=BUDGET)`` (every worker names the same run, so they share one budget),
round robin over CURSORS cursors of that run (default 1: one process doing the work of N
workers uses N, so its chains, and the rollback after each refusal, cost what theirs do); prints
``ready`` once its store is open, waits for a line on stdin, then prints
``ran <n> refused <m> seconds <s> start <t0> end <t1> cpu <c> server <b>``, where ``t0``/``t1``
are ``time.monotonic()`` readings (one system-wide clock on Linux, so a parent can time several
workers from the first start to the last end without their start-up and exit), ``c`` is the
worker's CPU seconds over that span and ``b`` its PostgreSQL backend's (0 for other stores, or
where ``/proc`` is not readable): what the machine spent on those steps.

``team_agent STORE CONTEXT ATTEMPTS``: attach to a team agent from its `DelegationContext`
JSON, print ``ready``, wait for a line on stdin, then call (each call holds its worst case of 15
tokens) until a budget refuses or ATTEMPTS ran; prints ``ran <n>``.

``write PATH LABEL``: record steps forever on a SQLite store, printing each acknowledged node id
(after ``model_call`` returned) on its own line; the parent kills it with SIGKILL.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from pollard import Budget, BudgetExceeded, PostgresStore, Runtime


def _answer(payload: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 3, "output_tokens": 1}}


def backend_cpu(store: Any) -> float:
    """CPU seconds of the PostgreSQL backend serving this thread (0 elsewhere)."""
    if not isinstance(store, PostgresStore):
        return 0.0
    try:
        stat = Path(f"/proc/{store._connection().info.backend_pid}/stat").read_text()
    except OSError:  # not Linux, or the server runs elsewhere
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def contend(store: str, label: str, budget: int, attempts: int, cursors: int = 1) -> None:
    ran = refused = 0
    # The store is opened (driver imported, connection made) before the common start, so the
    # figure measures steps, not start-up.
    with Runtime(store) as runtime:
        # One step on a run of its own warms the session (a PostgreSQL store's plans, the
        # driver's caches), as any long-lived worker is warm.
        warm = runtime.run(f"warm-{os.getpid()}", budget=Budget(steps=1))
        warm.model_call({"model": "m", "warm": os.getpid()}, fn=_answer)
        print("ready", flush=True)  # the parent waits for every worker's line, then says go
        sys.stdin.readline()  # start together
        start, began = time.perf_counter(), time.monotonic()
        cpu, server = time.process_time(), backend_cpu(runtime.store)
        # Many workers on one label, each on its own line: a shared run.
        runs = [
            runtime.run(label, budget=Budget(steps=budget), shared=True) for _ in range(cursors)
        ]
        for i in range(attempts):
            run = runs[i % cursors]  # round robin: each cursor's chain grows like one worker's
            try:
                run.model_call({"model": "m", "worker": os.getpid(), "i": i}, fn=_answer)
                ran += 1
            except BudgetExceeded:
                refused += 1
                run.rollback()
        seconds, ended = time.perf_counter() - start, time.monotonic()
        cpu, server = time.process_time() - cpu, backend_cpu(runtime.store) - server
    print(
        f"ran {ran} refused {refused} seconds {seconds:.4f} start {began:.6f} end {ended:.6f} "
        f"cpu {cpu:.4f} server {server:.4f}",
        flush=True,
    )


class _FiveTokens:
    def estimate_input_tokens(self, payload: Any) -> int:
        return 5


def team_agent(store: str, context: str, attempts: int) -> None:
    from pollard import DelegationContext, TeamAgent
    from pollard.meters import StepMeter, TokenMeter

    ran = 0
    with Runtime(store, meters=[StepMeter(), TokenMeter(_FiveTokens())]) as runtime:
        agent = TeamAgent.attach(runtime, DelegationContext.from_json(context))
        print("ready", flush=True)
        sys.stdin.readline()  # start together
        try:
            for i in range(attempts):
                payload = {"model": "m", "i": i, "max_tokens": 10}
                agent.run.model_call(
                    payload,
                    fn=lambda p: {"usage": {"input_tokens": 5, "output_tokens": 10}},
                )
                ran += 1
        except BudgetExceeded:
            pass
    print(f"ran {ran}", flush=True)


def write(path: str, label: str) -> None:
    with Runtime(path) as runtime:
        run = runtime.run(label)
        i = 0
        while True:
            node = run.model_call({"model": "m", "i": i, "text": "x" * (i % 3000)}, fn=_answer)
            sys.stdout.write(node.id + "\n")
            sys.stdout.flush()
            i += 1


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "contend":
        contend(rest[0], rest[1], int(rest[2]), int(rest[3]), *map(int, rest[4:5]))
    elif kind == "team_agent":
        team_agent(rest[0], rest[1], int(rest[2]))
    elif kind == "write":
        write(rest[0], rest[1])
    else:
        raise SystemExit(f"unknown worker {kind!r}")
