"""Exactly once under crashes and races, on SQLite and PostgreSQL.

* ``once kill``: a resumed fan-out is SIGKILLed at every boundary of a step (before the
  reservation, after it, during the call, after the answer, around the commit), and a second
  process resumes it, right away (every other round: this host sees the killed writer is gone)
  or once its holds' leases expired, under a budget that fits the prompts exactly:
  every prompt must be answered and charged exactly once, the resume never refused, and no
  reservation left behind.
* ``once spend``: 8 processes on one token and dollar budget (one shared run label): the
  overspend (settled beyond the limit) and the false refusals (a refusal whose recorded
  remaining amount covered its request), with the output cap reserved (hard token and dollar
  caps, where any overspend fails) and without it (the input estimate only: estimated budgets,
  whose overspend is reported, not failed).
* ``once writers``: two processes append to one run label (not shared) at once: exactly one
  writes, the other gets `WriterConflict` (a forked run, both writing under the root, fails).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from pollard import Runtime
from stress._once import CAP, INPUT, TOKENS, USD, open_store, output_tokens
from stress._proc import ROOT, start_together
from stress._report import Deadline, Outcome
from stress.camp_contention import PG_DSN, _drop, _pg_up

BOUNDARIES = ("before_reserve", "after_reserve", "during_call", "after_answer", "during_commit")
PROMPTS = 8
LEASE = 0.5  # seconds: a killed process's holds expire this long after their last renewal
WORKERS = 8
ATTEMPTS = 60  # per spending worker
RACE_STEPS = 20  # per racing writer


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stress._once", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _fields(line: str) -> dict[str, int]:
    words = line.split()
    return {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)}


def _reservations(spec: str) -> int:
    if spec.startswith("postgresql://"):
        import psycopg

        dsn, _, store_id = spec.rpartition("#")
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pollard_reservations WHERE store_id = %s", (store_id,)
            ).fetchone()
        return int(row[0]) if row else -1
    import sqlite3

    with sqlite3.connect(spec) as conn:
        return int(conn.execute("SELECT count(*) FROM reservations").fetchone()[0])


class _Kills:
    def __init__(self) -> None:
        self.kills = self.answered = self.charged = self.extra = 0
        self.leaked = self.false_refusals = self.at_once = 0


def _kill_once(
    spec: str, boundary: str, at: int, outcome: Outcome, seen: _Kills, *, wait: bool
) -> None:
    label = f"once-{uuid.uuid4().hex[:8]}"
    first = _spawn("fan", spec, label, str(PROMPTS), boundary, str(at), str(LEASE))
    _, err = first.communicate(timeout=120)
    if first.returncode != -9:
        outcome.fail(f"{boundary}@{at}: not killed (exit {first.returncode}): {err[-300:]}")
        return
    seen.kills += 1
    if wait:
        time.sleep(LEASE + 0.3)  # the killed process's holds expire
    else:
        seen.at_once += 1  # resumed at once: its writer and holds are taken over as gone
    resume = _spawn("fan", spec, label, str(PROMPTS), "none", "-1", str(LEASE))
    out, err = resume.communicate(timeout=120)
    if resume.returncode != 0:
        outcome.fail(f"{boundary}@{at}: the resume exited {resume.returncode}: {err[-300:]}")
        return
    got = _fields(out)
    seen.false_refusals += got["refused"]
    if got["refused"]:
        outcome.fail(f"{boundary}@{at}: the resume was refused {got['refused']} time(s)")
    with Runtime(open_store(spec)) as rt:
        root = rt.run(label).root_id
        totals = rt.store.totals(root)
        children = rt.store.children(root)
    answers = sum(n.kind.value == "model_call" and n.result is not None for n in children)
    repeated = sum(
        n.kind.value == "note" and n.payload.get("event") == "call_repeated" for n in children
    )
    steps = int(totals.get("steps", 0))
    tokens = int(totals.get("tokens", 0))
    expected = sum(INPUT + output_tokens(i) for i in range(PROMPTS))
    seen.answered += answers
    seen.charged += steps
    seen.extra += max(steps - answers, 0) + repeated
    if answers != PROMPTS or steps != PROMPTS or repeated or tokens != expected:
        outcome.fail(
            f"{boundary}@{at}: {answers} answers, {steps} steps charged, {repeated} repeats, "
            f"{tokens} tokens charged for {expected}"
        )
    leaked = _reservations(spec)
    seen.leaked += leaked
    if leaked:
        outcome.fail(f"{boundary}@{at}: {leaked} reservation(s) left after the resume")


def _kills(name: str, spec: str, scale: float) -> Outcome:
    outcome = Outcome(
        name,
        "a step killed at any boundary is charged once after its resume; no leak, no refusal",
        cap=max(len(BOUNDARIES), int(30 * scale)),
    )
    rng = random.Random(25)
    started = time.monotonic()
    deadline = Deadline(120 * scale, outcome.cap)
    seen = _Kills()
    while deadline.more():
        boundary = BOUNDARIES[outcome.trials % len(BOUNDARIES)]
        # Every other round of boundaries resumes right after the kill (the same host can tell
        # the killed writer is gone), the others once its holds' leases expired.
        wait = (outcome.trials // len(BOUNDARIES)) % 2 == 1
        _kill_once(spec, boundary, rng.randrange(PROMPTS), outcome, seen, wait=wait)
        outcome.trials += 1
    outcome.seconds = time.monotonic() - started
    outcome.worst = seen.extra
    outcome.figure = (
        f"{seen.kills} kills over {len(BOUNDARIES)} boundaries ({seen.at_once} resumed at "
        f"once): {seen.answered} answers, "
        f"{seen.charged} steps charged ({seen.extra} extra), {seen.leaked} leaked holds, "
        f"{seen.false_refusals} false refusals"
    )
    return outcome


def _spend_round(spec: str, reserved: int) -> dict[str, Any]:
    label = f"spend-{uuid.uuid4().hex[:8]}"
    procs = [_spawn("spend", spec, label, str(ATTEMPTS), str(reserved)) for _ in range(WORKERS)]
    start_together(procs)
    errors = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            errors.append(err.strip().splitlines()[-1:])
    with Runtime(open_store(spec)) as rt:
        root = rt.run(label).root_id
        totals = rt.store.totals(root)
        children = rt.store.children(root)
    false = 0
    for node in children:
        if node.kind.value == "refusal":
            requested = Decimal(node.payload.get("requested", "0"))
            remaining = Decimal(node.payload.get("remaining", "0"))
            false += requested > 0 and remaining >= requested
    return {
        "tokens": max(int(totals.get("tokens", 0)) - TOKENS, 0),
        "usd": max(Decimal(totals.get("usd", 0)) - USD, Decimal(0)),
        "false": false,
        "answers": sum(n.kind.value == "model_call" for n in children),
        "errors": errors,
    }


def _spends(name: str, spec: str, scale: float) -> list[Outcome]:
    outcomes = []
    rows = (
        (CAP, "hard: output cap reserved", "never overspend"),
        (0, "estimated: input estimate only", "overspend measured (estimated budgets)"),
    )
    for reserved, what, claim in rows:
        outcome = Outcome(
            f"{name} ({what})",
            f"{WORKERS} processes on Budget(tokens={TOKENS}, usd={USD}): {claim}",
            cap=max(1, int(2 * scale)),
        )
        started = time.monotonic()
        deadline = Deadline(90 * scale, outcome.cap)
        over_tokens, over_usd, false, answers = 0, Decimal(0), 0, 0
        while deadline.more():
            got = _spend_round(spec, reserved)
            for error in got["errors"]:
                outcome.fail(f"a worker failed: {error}")
            over_tokens = max(over_tokens, got["tokens"])
            over_usd = max(over_usd, got["usd"])
            false += got["false"]
            answers += got["answers"]
            # Without the output cap the token and dollar budgets are estimated (named so):
            # their overspend is measured beside the hard caps, not a failure.
            if reserved and (got["tokens"] or got["usd"]):
                outcome.fail(f"overspend: {got['tokens']} tokens, {got['usd']} usd")
            if got["false"]:
                outcome.fail(f"{got['false']} refusals while the budget covered the request")
            outcome.trials += 1
        outcome.seconds = time.monotonic() - started
        outcome.worst = over_tokens
        outcome.figure = (
            f"worst overspend {over_tokens} tokens, {over_usd:f} usd; {false} false refusals; "
            f"{answers} answers in {outcome.trials} rounds"
        )
        outcomes.append(outcome)
    return outcomes


def _race_round(spec: str) -> tuple[int, int, int]:
    """Two processes append to one (unshared) run label at once: (writers that ran, refused,
    step functions run by the refused ones)."""
    label = f"race-{uuid.uuid4().hex[:8]}"
    procs = [_spawn("race", spec, label, str(RACE_STEPS)) for _ in range(2)]
    start_together(procs)
    got = []
    for proc in procs:  # both done before either closes (a closed writer lets the next in)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("ran "):
            _, err = proc.communicate(timeout=120)
            raise RuntimeError(f"a racing writer failed: {err.strip()[-300:]}")
        got.append(_fields(line))
    for proc in procs:
        _, err = proc.communicate("end\n", timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"a racing writer failed: {err.strip()[-300:]}")
    with Runtime(open_store(spec)) as rt:
        root = rt.run(label).root_id
        writers = {n.payload.get("w") for n in rt.store.children(root) if "w" in n.payload}
    refused = sum(g["conflict"] for g in got)
    return len(writers), refused, sum(g["ran"] for g in got if g["conflict"])


def _races(name: str, spec: str, scale: float) -> Outcome:
    outcome = Outcome(
        name,
        "two processes on one run label at once: one writes, the other gets WriterConflict",
        cap=max(2, int(10 * scale)),
    )
    started = time.monotonic()
    deadline = Deadline(60 * scale, outcome.cap)
    forked = refused = 0
    while deadline.more():
        try:
            writers, conflicts, _ = _race_round(spec)
        except RuntimeError as exc:
            outcome.fail(str(exc))
            outcome.trials += 1
            continue
        refused += conflicts
        if writers != 1:
            forked += 1
            outcome.fail(f"{writers} writers committed under one run root")
        outcome.trials += 1
    outcome.seconds = time.monotonic() - started
    outcome.worst = forked
    outcome.figure = (
        f"{outcome.trials} races: {forked} forked runs, {refused} second writers refused"
    )
    return outcome


def run(scale: float) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = str(Path(tmp) / "once.db")
        outcomes.append(_kills("once kill sqlite", spec, scale))
        outcomes += _spends("once spend sqlite", spec, scale)
        outcomes.append(_races("once writers sqlite", spec, scale))
    if _pg_up():
        spec = f"{PG_DSN}#stress-{uuid.uuid4().hex[:12]}"
        try:
            outcomes.append(_kills("once kill postgres", spec, scale))
            outcomes += _spends("once spend postgres", spec, scale)
            outcomes.append(_races("once writers postgres", spec, scale))
        finally:
            _drop(spec)
    else:
        skipped = Outcome("once postgres", "exactly once on PostgreSQL")
        skipped.skipped = "no server at 127.0.0.1:5432 or no psycopg"
        outcomes.append(skipped)
    return outcomes
