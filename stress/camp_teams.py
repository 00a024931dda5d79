"""8 agent processes in two teams on two roots, one shared scope: no limit is ever passed.

Each round builds two runs (independent roots), a team on each (100 steps), four agents per team
(40 steps and 450 tokens each, 30 calls' worth), all under one `SharedBudget` of 150 steps, then
starts 8 processes at once, each attached to one agent from its `DelegationContext`, calling
until a budget refuses. The demand (240 calls) is above the shared limit, so the shared scope
must end exactly full. Every limit is then checked twice, from the ledger's totals and by summing
the charges node by node: the worst overshoot over all limits (floor: 0) is the figure.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from pollard import Budget, Runtime, SharedBudget, Store, Team
from pollard.meters import StepMeter, TokenMeter
from stress._proc import spawn, start_together
from stress._report import Deadline, Outcome
from stress.camp_contention import PG_DSN, _drop, _pg_up

AGENT = {"steps": 40, "tokens": 450}
TEAM_STEPS = 100
SHARED_STEPS = 150
LIMITS = 1 + 2 + 8 * len(AGENT)  # the shared scope, two teams, each agent's steps and tokens


class _FiveTokens:
    def estimate_input_tokens(self, payload: object) -> int:
        return 5


def _charged(store: Store, node_id: str, meter: str) -> Decimal:
    total = Decimal(0)
    for node in store.walk(node_id):
        value = node.meta.get("charges", {}).get(meter)
        if value is not None:
            total += Decimal(str(value))
    return total


def _round(store_spec: str, outcome: Outcome) -> float:
    tag = uuid.uuid4().hex[:8]
    pool = SharedBudget(f"pool-{tag}", Budget(steps=SHARED_STEPS))
    limits: list[tuple[str, str, int]] = [(pool.scope_id, "steps", SHARED_STEPS)]
    contexts, roots = [], []
    meters: list[Any] = [StepMeter(), TokenMeter(_FiveTokens())]
    with Runtime(store_spec, meters=meters) as runtime:
        for side in ("left", "right"):
            run = runtime.run(f"{side}-{tag}")
            roots.append(run.root_id)
            team = Team(run, "crew", budget=Budget(steps=TEAM_STEPS), shared=pool)
            limits.append((team.node_id, "steps", TEAM_STEPS))
            for i in range(4):
                budget = Budget(steps=AGENT["steps"], tokens=AGENT["tokens"])
                agent = team.agent(f"{side}{i}", budget=budget)
                limits += [(agent.node_id, m, v) for m, v in AGENT.items()]
                contexts.append(agent.context().to_json())
    procs = [spawn("team_agent", store_spec, context, "100") for context in contexts]
    start_together(procs)
    start = time.perf_counter()
    ran = 0
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            outcome.fail(f"worker exited {proc.returncode}: {err.strip().splitlines()[-1:]}")
            continue
        ran += int(out.split()[1])
    wall = time.perf_counter() - start
    with Runtime(store_spec) as runtime:
        store = runtime.store
        for scope, meter, limit in limits:
            settled = store.totals(scope).get(meter, Decimal(0))
            counted = (
                sum(_charged(store, root, meter) for root in roots)
                if scope == pool.scope_id
                else _charged(store, scope, meter)
            )
            worst = int(max(settled, counted)) - limit
            outcome.worst = max(outcome.worst, worst)
            if worst > 0 or settled != counted:
                outcome.fail(f"{scope[:12]} {meter}: limit {limit}, {settled} settled, {counted}")
        shared = store.totals(pool.scope_id).get("steps", Decimal(0))
    if ran != shared or shared != SHARED_STEPS:
        outcome.fail(f"{ran} calls ran, shared scope settled {shared} of {SHARED_STEPS}")
    return wall


def _campaign(name: str, store: str, scale: float) -> Outcome:
    outcome = Outcome(
        name,
        "8 agent processes, nested and shared limits: overshoot 0",
        cap=max(1, int(3 * scale)),
    )
    started = time.monotonic()
    deadline = Deadline(120 * scale, outcome.cap)
    walls = []
    while deadline.more():
        walls.append(_round(store, outcome))
        outcome.trials += 1
    outcome.seconds = time.monotonic() - started
    outcome.figure = (
        f"worst overshoot {max(outcome.worst, 0)} (floor 0) over {LIMITS} limits; "
        f"{SHARED_STEPS} calls in {min(walls):.2f} s (best round)"
    )
    return outcome


def run(scale: float) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        outcomes.append(_campaign("teams sqlite", str(Path(tmp) / "teams.db"), scale))
    if _pg_up():
        store = f"{PG_DSN}#stress-teams-{uuid.uuid4().hex[:12]}"
        try:
            outcomes.append(_campaign("teams postgres", store, scale))
        finally:
            _drop(store)
    else:
        skipped = Outcome("teams postgres", "overshoot 0 on PostgreSQL")
        skipped.skipped = "no server at 127.0.0.1:5432 or no psycopg"
        outcomes.append(skipped)
    return outcomes
