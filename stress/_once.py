"""Children of the ``once`` campaign: ``python -m stress._once KIND ARGS...``.

``fan STORE LABEL N BOUNDARY AT LEASE``: a resumed fan-out of N prompts (each its own
``model_call(..., resume=True)`` step under the run's root, ``Budget(steps=N, tokens=...)``
exactly what N answers cost at their worst case), which SIGKILLs itself at BOUNDARY of prompt AT
(``before_reserve``, ``after_reserve``, ``during_call``, ``after_answer``, ``during_commit``;
``none`` runs to the end). Reservations are leased for LEASE seconds. Prints ``ran R served S
refused F`` when it ends.

``spend STORE LABEL ATTEMPTS RESERVED``: up to ATTEMPTS model calls on the shared run LABEL
under ``Budget(tokens=TOKENS, usd=USD)`` (every worker names the same run, opened with
``shared=True``, so they share one budget), each answer using 1 to CAP output tokens;
``RESERVED`` output tokens are reserved on top of the input estimate (CAP: the worst case, hard
token and dollar meters; 0: the input estimate only, the estimated meters). Prints ``ready``,
waits for a line on stdin, then prints ``ran R refused F``.

``race STORE LABEL N``: N model calls under the root of run LABEL (not shared), started with
another process doing the same: prints ``ready``, waits for a line on stdin, then prints ``ran R
conflict C`` (C: 1 when the store refused this process as a second writer), and stays open
until a second line on stdin.

STORE is a SQLite path or ``postgresql://...#store_id``.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
from decimal import Decimal
from typing import Any

from pollard import (
    Budget,
    BudgetExceeded,
    PostgresStore,
    Runtime,
    SQLiteStore,
    Store,
    WriterConflict,
)
from pollard.meters import CostMeter, Meter, StepMeter, TokenMeter

INPUT = 40  # every prompt's input tokens (the estimate is exact)
CAP = 60  # the most output tokens one answer uses
PRICES = {"m": {"input_per_1m": "1.25", "output_per_1m": "10"}}
TOKENS = 20_000  # about 280 answers (70.5 tokens each on average) of the 480 attempted
USD = Decimal("0.1")  # about as many answers as TOKENS (0.000355 per answer on average)


class _Estimator:
    def estimate_input_tokens(self, payload: Any) -> int:
        return INPUT


def output_tokens(prompt: int) -> int:
    """The output tokens of prompt ``prompt``'s answer (the same in every process)."""
    return random.Random(prompt).randint(1, CAP)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _Plan:
    """Where this process dies: a boundary of one prompt's step."""

    boundary = "none"
    at = -1
    index = -1

    def armed(self, boundary: str) -> bool:
        return self.boundary == boundary and self.index == self.at


PLAN = _Plan()


def _killing(base: type[Any]) -> type[Any]:
    class Killing(base):  # type: ignore[misc]
        def reserve(self, *args: Any, **kwargs: Any) -> Any:
            if PLAN.armed("before_reserve"):
                _die()
            admission = super().reserve(*args, **kwargs)
            if PLAN.armed("after_reserve"):
                _die()
            return admission

        def commit(self, *args: Any, **kwargs: Any) -> Any:
            if PLAN.armed("after_answer"):
                _die()
            if PLAN.armed("during_commit"):  # a moment within about a commit's time
                threading.Timer(random.uniform(0, 0.002), _die).start()
            return super().commit(*args, **kwargs)

    return Killing


def open_store(spec: str, *, killing: bool = False) -> Store:
    if spec.startswith("postgresql://"):
        dsn, _, store_id = spec.rpartition("#")
        cls = _killing(PostgresStore) if killing else PostgresStore
        store: Store = cls(dsn, store_id=store_id)
        return store
    kind = _killing(SQLiteStore) if killing else SQLiteStore
    sqlite: Store = kind(spec)
    return sqlite


def _answer_of(prompt: int) -> Any:
    def answer(_payload: Any) -> dict[str, Any]:
        if PLAN.armed("during_call"):
            _die()
        usage = {"input_tokens": INPUT, "output_tokens": output_tokens(prompt)}
        return {"text": f"answer {prompt}", "usage": usage}

    return answer


def fan(spec: str, label: str, n: int, boundary: str, at: int, lease: float) -> None:
    PLAN.boundary, PLAN.at = boundary, at
    meters: list[Meter] = [StepMeter(), TokenMeter(_Estimator(), reserved_output_tokens=CAP)]
    budget = Budget(steps=n, tokens=n * (INPUT + CAP))
    ran = served = refused = 0
    with Runtime(
        open_store(spec, killing=True), meters=meters, reservation_lease_seconds=lease
    ) as rt:
        for i in range(n):
            PLAN.index = i
            called: list[int] = []
            answer = _answer_of(i)

            def fn(payload: Any, answer: Any = answer, called: list[int] = called) -> Any:
                called.append(1)
                return answer(payload)

            try:
                rt.run(label, budget=budget).model_call({"model": "m", "p": i}, fn=fn, resume=True)
            except BudgetExceeded:
                refused += 1
                continue
            ran += bool(called)
            served += not called
    print(f"ran {ran} served {served} refused {refused}", flush=True)


def spend(spec: str, label: str, attempts: int, reserved: int) -> None:
    # RESERVED = CAP: hard token and dollar meters (each call holds its worst case, priced);
    # RESERVED = 0: the estimated meters, named so (the input estimate only, dollars after).
    estimated = reserved == 0
    meters: list[Meter] = [
        StepMeter(),
        TokenMeter(_Estimator(), reserved_output_tokens=reserved, estimated=estimated),
        CostMeter(
            PRICES,
            estimator=_Estimator(),
            reserved_output_tokens=reserved,
            estimated=estimated,
        ),
    ]
    ran = refused = 0
    with Runtime(open_store(spec), meters=meters) as rt:
        rt.run(f"warm-{os.getpid()}").model_call({"model": "m", "warm": 1}, fn=_answer_of(0))
        print("ready", flush=True)
        sys.stdin.readline()  # start together
        for i in range(attempts):
            # Every worker starts its own steps under the one label: a shared run.
            run = rt.run(label, budget=Budget(tokens=TOKENS, usd=USD), shared=True)
            prompt = os.getpid() * 1000 + i
            try:
                run.model_call({"model": "m", "p": prompt}, fn=_answer_of(prompt))
                ran += 1
            except BudgetExceeded:
                refused += 1
    print(f"ran {ran} refused {refused}", flush=True)


def race(spec: str, label: str, n: int) -> None:
    ran = conflict = 0
    with Runtime(open_store(spec)) as rt:
        rt.run(f"warm-{os.getpid()}").model_call({"model": "m", "warm": 1}, fn=_answer_of(0))
        print("ready", flush=True)
        sys.stdin.readline()  # start together
        try:
            for i in range(n):  # each step at the root (a run object per step, as many do)
                payload = {"model": "m", "w": os.getpid(), "i": i}
                rt.run(label).model_call(payload, fn=_answer_of(i))
                ran += 1
        except WriterConflict:
            conflict = 1
        print(f"ran {ran} conflict {conflict}", flush=True)
        # Open until both racers are done: a writer that closed lets the next one in, which
        # is a takeover, not a race.
        sys.stdin.readline()


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "fan":
        fan(rest[0], rest[1], int(rest[2]), rest[3], int(rest[4]), float(rest[5]))
    elif kind == "spend":
        spend(rest[0], rest[1], int(rest[2]), int(rest[3]))
    elif kind == "race":
        race(rest[0], rest[1], int(rest[2]))
    else:
        raise SystemExit(f"unknown worker {kind!r}")
