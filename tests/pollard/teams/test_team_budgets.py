"""Teams from the user's side: identities, cursors, tool sets, nested budgets that hold.

The overshoot proof: 8 agents on 8 threads, released at once, each calling until a budget
refuses; the steps and tokens charged against every limit (counted node by node and read from
the ledger) never pass it, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import (
    AsyncRun,
    AsyncRuntime,
    Budget,
    BudgetExceeded,
    PolicyViolation,
    PollardError,
    PostgresStore,
    Runtime,
    SharedBudget,
    SQLiteStore,
    Store,
    Team,
    TeamAgent,
    WindowMeter,
)
from pollard.policy import Decision, PolicyContext
from tests.pollard._postgres import drop_store, fresh_store_id

from ._helpers import charged, hard_meters, model, registry, work_until_refused


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        with SQLiteStore(tmp_path / "team.db") as opened:
            yield opened
        return
    dsn = request.getfixturevalue("pg_dsn")
    store_id = fresh_store_id("team")
    try:
        with PostgresStore(dsn, store_id=store_id) as opened:
            yield opened
    finally:
        drop_store(dsn, store_id)


def test_agents_are_recorded_identities_with_cursors_of_their_own() -> None:
    with Runtime() as rt, rt.run("plan") as run:
        team = Team(run, "research")
        scout = team.agent("scout", role="researcher", task="find sources")
        critic = team.agent("critic", role="reviewer", task="check sources")
        a = scout.run.model_call({"q": "a"}, fn=lambda p: {"text": "a"})
        b = critic.run.model_call({"q": "b"}, fn=lambda p: {"text": "b"})
        # Each agent appends under its own anchor; the run's cursor never moved.
        assert a.parent == scout.node_id and b.parent == critic.node_id
        assert run.cursor_id == run.root_id
        anchor = rt.store.get(scout.node_id)
        assert anchor.parent == team.node_id
        assert anchor.payload["name"] == "scout"
        assert anchor.payload["role"] == "researcher"
        assert anchor.payload["task"] == "find sources"
        # The same name under the same team is the same agent (re-entering it).
        assert team.agent("scout", role="researcher", task="find sources").node_id == scout.node_id


def test_an_agent_calls_only_its_tools_and_policies_see_the_actor() -> None:
    seen: list[PolicyContext] = []

    class Watch:
        def decide(self, context: PolicyContext) -> Decision:
            seen.append(context)
            return Decision.ALLOW

    with Runtime(registry=registry(), policies=[Watch()]) as rt, rt.run("plan") as run:
        team = Team(run, "ops")
        reader = team.agent("reader", role="researcher", tools={"search"})
        reader.run.tool_call("search", {})
        with pytest.raises(PolicyViolation, match="agent 'reader' may not call write") as info:
            reader.run.tool_call("write", {})
        refusal = rt.store.get(info.value.refusal_id)  # a refusal recorded as data
        assert refusal.payload["rule"] == "not_permitted"
        assert refusal.parent is not None
        # Refused before any policy or dispatch: the policy saw only the permitted call.
        assert [(c.spec.name, c.actor) for c in seen] == [("search", "reader")]
        # A delegation cannot widen its parent's tools.
        with pytest.raises(ValueError, match="cannot widen"):
            reader.delegate("helper", tools={"search", "write"})
        helper = reader.delegate("helper")  # inherits {"search"}
        assert helper.tools == frozenset({"search"})
        run.tool_call("write", {})  # outside the team nothing changed
        assert seen[-1].actor is None


def test_tools_need_a_registry() -> None:
    with Runtime() as rt, rt.run("plan") as run, pytest.raises(PollardError, match="registry"):
        Team(run, "t").agent("a", tools={"search"})


def test_eight_concurrent_agents_never_overshoot_nested_limits(store: Store) -> None:
    """Team: 20 steps; each agent: 4 steps and 45 tokens (3 calls of 15). 8 agents want 24."""
    with Runtime(store, meters=hard_meters()) as rt, rt.run("overshoot") as run:
        team = Team(run, "t", budget=Budget(steps=20, tokens=10_000))
        agents = [
            team.agent(f"a{i}", role="worker", budget=Budget(steps=4, tokens=45)) for i in range(8)
        ]
        ran = work_until_refused(agents)
        team_steps = charged(store, team.node_id, "steps")
        # The demand (24) is above the team's limit: the limit is reached, and not passed.
        assert sum(ran.values()) == team_steps == store.totals(team.node_id)["steps"] == 20
        for agent in agents:
            assert charged(store, agent.node_id, "steps") <= 4
            tokens = charged(store, agent.node_id, "tokens")
            assert tokens == store.totals(agent.node_id).get("tokens", 0) <= 45
            assert tokens == 15 * ran[agent.name]
        assert store.totals(run.root_id)["steps"] == 20


def test_a_shared_budget_holds_across_independent_roots(store: Store) -> None:
    """Two runs that share no node, 4 agents each, 8 threads: the shared 12 steps hold."""
    shared = SharedBudget(f"nightly-{id(store)}", Budget(steps=12))
    with Runtime(store, meters=hard_meters()) as rt:
        agents = []
        for label in ("left", "right"):
            team = Team(rt.run(label), "t", shared=shared)
            agents += [team.agent(f"{label}{i}") for i in range(4)]
        ran = work_until_refused(agents)
        left, right = (rt.run(label).root_id for label in ("left", "right"))
        steps = charged(store, left, "steps") + charged(store, right, "steps")
        assert sum(ran.values()) == steps == store.totals(shared.scope_id)["steps"] == 12


def test_a_conflicting_shared_declaration_fails_before_any_dispatch(tmp_path: Path) -> None:
    calls: list[Any] = []
    with Runtime(tmp_path / "s.db") as rt:
        Team(rt.run("one"), "t", shared=SharedBudget("pool", Budget(steps=5)))
        run = rt.run("two")
        with pytest.raises(PollardError, match=r"shared budget 'pool' is declared with limits"):
            team = Team(run, "t", shared=SharedBudget("pool", Budget(steps=50)))
            team.agent("a").run.model_call({}, fn=calls.append)
        assert calls == [] and rt.store.children(run.root_id) == []
        # The same declaration again is fine (another worker, another root).
        Team(rt.run("three"), "t", shared=SharedBudget("pool", Budget(steps=5)))


def test_a_conflicting_named_window_fails_before_any_dispatch(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    with Runtime(path, meters=[WindowMeter("rpm", 60, 60, scope="fleet")]) as rt:
        Team(rt.run("one"), "t")
    wider = [WindowMeter("rpm", 600, 60, scope="fleet")]
    with Runtime(path, meters=wider) as rt, pytest.raises(PollardError, match="scope 'fleet'"):
        Team(rt.run("two"), "t")


def test_agent_limits_are_carved_from_the_team() -> None:
    with Runtime() as rt, rt.run("plan") as run:
        team = Team(run, "t", budget=Budget(steps=3))
        big = team.agent("big", budget=Budget(steps=100))
        sub = big.delegate("sub", budget=Budget(steps=100))
        for i in range(3):
            sub.run.model_call({"q": i}, fn=lambda p: {})
        with pytest.raises(BudgetExceeded, match="remaining 0 of 3"):
            sub.run.model_call({"q": 9}, fn=lambda p: {})
        # Nested work is counted once per scope: the sub-agent's steps are the agent's too.
        assert rt.store.totals(sub.node_id)["steps"] == rt.store.totals(big.node_id)["steps"] == 3
        assert rt.store.totals(team.node_id)["steps"] == Decimal(3)


def test_eight_async_agents_never_overshoot(tmp_path: Path) -> None:
    """The same proof on the async shell: 8 agents as tasks of one event loop."""

    async def main() -> tuple[int, Decimal]:
        async with AsyncRuntime(tmp_path / "a.db", meters=hard_meters()) as rt:
            team = Team(rt.run("async"), "t", budget=Budget(steps=20))
            agents = [team.agent(f"a{i}", budget=Budget(steps=4)) for i in range(8)]

            async def work(agent: TeamAgent[AsyncRun]) -> int:
                ran = 0
                with contextlib.suppress(BudgetExceeded):
                    for i in range(100):
                        await agent.run.model_call({"q": i, "max_tokens": 10}, fn=model)
                        ran += 1
                return ran

            ran = await asyncio.gather(*(work(agent) for agent in agents))
            return sum(ran), charged(rt.store, team.node_id, "steps")

    assert asyncio.run(main()) == (20, Decimal(20))


def test_a_call_inside_an_agent_gets_its_own_budget_too() -> None:
    """The innermost level: a branch of an agent's run, with every enclosing limit on top."""
    with Runtime(registry=registry()) as rt, rt.run("plan") as run:
        agent = Team(run, "t", budget=Budget(steps=10)).agent("a", tools={"search"})
        call = agent.run.branch(budget=Budget(steps=1))
        call.tool_call("search", {"q": 1})
        with pytest.raises(BudgetExceeded, match="remaining 0 of 1"):
            call.tool_call("search", {"q": 2})
        with pytest.raises(PolicyViolation, match="may not call write"):
            call.tool_call("write", {})  # the branch acts for the agent, with its tools
        assert rt.store.totals(agent.node_id)["steps"] == 1


def test_a_team_with_shared_scopes_replays_from_a_read_only_store(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    pool = SharedBudget("replayed-pool", Budget(steps=5))
    with Runtime(path) as rt:
        agent = Team(rt.run("plan"), "t", shared=pool).agent("a")
        recorded = agent.run.model_call({"q": 1}, fn=lambda p: {"text": "live"})
    with Runtime(path, mode="replay") as rt:
        agent = Team(rt.run("plan"), "t", shared=pool).agent("a")
        served = agent.run.model_call({"q": 1}, fn=lambda p: {"text": "not called"})
    assert served.id == recorded.id and served.result == {"text": "live"}
