"""Delegation across processes: a context another worker attaches to, verified first; checkpoints.

The workers are real processes (``python -c``) on one SQLite file: they attach to a delegated
agent from its JSON context, run under the team's limits, and resume at an exact cursor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pollard import (
    AgentCheckpoint,
    AsyncRuntime,
    Budget,
    DelegationContext,
    MemoryStore,
    PollardError,
    Runtime,
    Team,
    TeamAgent,
    WriterConflict,
)

from ._helpers import charged, hard_meters, registry

WORKER = textwrap.dedent(
    """
    import json, sys
    from pollard import AgentCheckpoint, BudgetExceeded, DelegationContext, Runtime, TeamAgent
    from tests.pollard.teams._helpers import hard_meters, model

    path, how, text, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with Runtime(path, meters=hard_meters()) as rt:
        if how == "attach":
            agent = TeamAgent.attach(rt, DelegationContext.from_json(text))
        else:
            agent = TeamAgent.resume(rt, AgentCheckpoint.from_json(text))
        ran = 0
        try:
            for i in range(calls):
                agent.run.model_call({"q": [agent.name, how, i], "max_tokens": 10}, fn=model)
                ran += 1
        except BudgetExceeded:
            pass
        print(json.dumps({"ran": ran, "checkpoint": agent.checkpoint().to_json()}))
    """
)


def worker(path: Path, how: str, text: str, calls: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(path), how, text, str(calls)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )


def result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    data: dict[str, object] = json.loads(out)
    return data


def test_context_and_checkpoint_round_trip_through_json() -> None:
    with Runtime(registry=registry()) as rt, rt.run("plan", budget=Budget(steps=9)) as run:
        agent = Team(run, "t", budget=Budget(steps=5)).agent(
            "scout", role="researcher", task="find", budget=Budget(steps=2), tools={"search"}
        )
        sub = agent.delegate("reader", role="reader")
        context = sub.context()
        assert DelegationContext.from_json(context.to_json()) == context
        assert context.path == ("scout", "reader") and context.tools == ("search",)
        assert [e["limits"] for e in context.scopes] == [
            {"steps": "9"},
            {"steps": "5"},
            {"steps": "2"},
        ]
        checkpoint = sub.checkpoint()
        assert AgentCheckpoint.from_json(checkpoint.to_json()) == checkpoint
        with pytest.raises(ValueError, match="delegation context"):
            DelegationContext.from_json('{"version": 9}')


def test_a_forged_or_widened_context_is_refused() -> None:
    store = MemoryStore()
    with Runtime(store, registry=registry()) as rt, rt.run("plan") as run:
        agent = Team(run, "t").agent("scout", budget=Budget(steps=2), tools={"search"})
        good = agent.context()
        forged = [
            dataclasses.replace(good, tools=("search", "write")),  # widened permissions
            dataclasses.replace(good, tools=None),  # every tool
            dataclasses.replace(good, limits={"steps": "200"}),  # a bigger budget
            dataclasses.replace(good, scopes=good.scopes[1:]),  # dropping the run's limits
            dataclasses.replace(good, node_id="0" * 64),  # no such delegation
            dataclasses.replace(good, agent="admin"),  # another identity
            dataclasses.replace(good, store_id="elsewhere"),
            dataclasses.replace(good, ancestry=()),
        ]
        before = sum(1 for _ in store.walk(run.root_id))
        for context in forged:
            with pytest.raises(PollardError, match="refused"):
                TeamAgent.attach(rt, context)
        assert sum(1 for _ in store.walk(run.root_id)) == before  # nothing was written
        attached = TeamAgent.attach(rt, good)
        assert attached.node_id == agent.node_id and attached.tools == frozenset({"search"})


def test_concurrent_workers_in_two_processes_share_the_team_budget(tmp_path: Path) -> None:
    """Two processes attach to two agents at once; the team's 7 steps hold across them."""
    path = tmp_path / "team.db"
    with Runtime(path, meters=hard_meters()) as rt, rt.run("plan") as run:
        team = Team(run, "t", budget=Budget(steps=7))
        scout, critic = team.agent("scout", budget=Budget(steps=5)), team.agent("critic")
        contexts = [scout.context().to_json(), critic.context().to_json()]
        team_id = team.node_id
    procs = [worker(path, "attach", context, 10) for context in contexts]
    outs = [result(proc) for proc in procs]
    with Runtime(path) as rt:
        assert sum(int(str(o["ran"])) for o in outs) == 7
        assert charged(rt.store, team_id, "steps") == rt.store.totals(team_id)["steps"] == 7
        assert charged(rt.store, scout.node_id, "steps") <= 5


def test_an_agent_resumes_at_its_exact_cursor_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "team.db"
    with Runtime(path, meters=hard_meters()) as rt, rt.run("plan") as run:
        agent = Team(run, "t").agent("scout")
        first = agent.run.model_call({"q": "1", "max_tokens": 10}, fn=lambda p: {"text": "1"})
        agent.run.rollback(first.parent)  # a cursor that is not the deepest leaf
        checkpoint = agent.checkpoint().to_json()
    out = result(worker(path, "resume", checkpoint, 2))
    assert out["ran"] == 2
    with Runtime(path) as rt:
        kids = rt.store.children(agent.node_id)
        # Resumed at the anchor (the exact cursor), not at the deepest leaf under it.
        assert len(kids) == 2 and first.id in {kid.id for kid in kids}
        after = AgentCheckpoint.from_json(str(out["checkpoint"]))
        assert rt.store.get(after.cursor_id).parent is not None
    # A checkpoint whose cursor is outside the agent's subtree is refused.
    bad = dataclasses.replace(AgentCheckpoint.from_json(checkpoint), cursor_id=run.root_id)
    with Runtime(path) as rt, pytest.raises(PollardError, match="not a node of agent"):
        TeamAgent.resume(rt, bad)


def test_a_live_writer_keeps_its_agent(tmp_path: Path) -> None:
    path = tmp_path / "team.db"
    with Runtime(path, meters=hard_meters()) as rt, rt.run("plan") as run:
        agent = Team(run, "t").agent("scout")
        agent.run.model_call({"q": "mine", "max_tokens": 10}, fn=lambda p: {})
        agent.run.rollback(steps=1)
        with Runtime(path, meters=hard_meters()) as other:
            twin = TeamAgent.attach(other, agent.context())
            with pytest.raises(WriterConflict):
                twin.run.model_call({"q": "theirs", "max_tokens": 10}, fn=lambda p: {})


def test_an_async_runtime_attaches_too() -> None:
    async def main() -> int:
        store = MemoryStore()
        async with AsyncRuntime(store) as rt:
            run = rt.run("plan")
            agent = Team(run, "t", budget=Budget(steps=3)).agent("scout")
            await agent.run.model_call({"q": 1}, fn=lambda p: {})
            again = TeamAgent.attach(rt, agent.context())
            await again.run.model_call({"q": 2}, fn=lambda p: {})
            return int(store.totals(agent.node_id)["steps"])

    assert asyncio.run(main()) == 2


def test_an_agent_cannot_leave_its_subtree() -> None:
    """A delegated worker cannot step out of its delegation (and out of its budgets)."""
    with Runtime() as rt, rt.run("plan") as run:
        team = Team(run, "t", budget=Budget(steps=2))
        agent = TeamAgent.attach(rt, team.agent("a").context())
        step = agent.run.model_call({"q": 1}, fn=lambda p: {})
        with pytest.raises(ValueError, match="outside agent 'a'"):
            agent.run.checkout(run.root_id)
        with pytest.raises(ValueError, match="outside agent 'a'"):
            agent.run.rollback(team.node_id)
        with pytest.raises(ValueError, match="outside agent 'a'"):
            agent.run.rollback(steps=2)
        assert agent.cursor_id == step.id
        agent.run.rollback(steps=1)  # back to its own anchor is fine
        with pytest.raises(ValueError, match="cannot prune its own anchor"):
            agent.run.prune()
        branch = agent.run.branch()
        with pytest.raises(ValueError, match="outside agent 'a'"):
            branch.checkout(run.root_id)


def test_a_worker_without_the_meters_of_its_limits_is_refused() -> None:
    from pollard.meters import CostMeter

    store = MemoryStore()
    with (
        Runtime(
            store, meters=[CostMeter({"m": {"input_per_1m": "1", "output_per_1m": "1"}})]
        ) as rt,
        rt.run("plan") as run,
    ):
        context = Team(run, "t", budget=Budget(usd=1)).agent("a").context()
    with Runtime(store) as worker, pytest.raises(PollardError, match=r"limited on \['usd'\]"):
        TeamAgent.attach(worker, context)
