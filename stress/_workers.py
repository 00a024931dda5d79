"""Child processes of the campaigns: ``python -m stress._workers KIND ARGS...``.

``contend STORE LABEL BUDGET ATTEMPTS``: record up to ATTEMPTS model calls on the run LABEL
under ``Budget(steps=BUDGET)`` (every worker names the same run, so they share one budget); prints
``ready`` once its store is open, waits for a line on stdin, then prints
``ran <n> refused <m> seconds <s>``.

``write PATH LABEL``: record steps forever on a SQLite store, printing each acknowledged node id
(after ``model_call`` returned) on its own line; the parent kills it with SIGKILL.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pollard import Budget, BudgetExceeded, Runtime


def _answer(payload: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 3, "output_tokens": 1}}


def contend(store: str, label: str, budget: int, attempts: int) -> None:
    ran = refused = 0
    # The store is opened (driver imported, connection made) before the common start, so the
    # figure measures steps, not start-up.
    with Runtime(store) as runtime:
        print("ready", flush=True)  # the parent waits for every worker's line, then says go
        sys.stdin.readline()  # start together
        start = time.perf_counter()
        run = runtime.run(label, budget=Budget(steps=budget))
        for i in range(attempts):
            try:
                run.model_call({"model": "m", "worker": os.getpid(), "i": i}, fn=_answer)
                ran += 1
            except BudgetExceeded:
                refused += 1
                run.rollback()
    print(f"ran {ran} refused {refused} seconds {time.perf_counter() - start:.4f}", flush=True)


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
        contend(rest[0], rest[1], int(rest[2]), int(rest[3]))
    elif kind == "write":
        write(rest[0], rest[1])
    else:
        raise SystemExit(f"unknown worker {kind!r}")
