"""pollux agents in a team: a researcher's fan-out and a tool loop, one ledger, replayed offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pollard import AsyncRun, AsyncRuntime, Budget, Team, team_report
from pollard.adapters.pollux import governed_interact, governed_run_many
from pollux import Config, Environment, Input, ToolDeclaration, ToolResult
from pollux.providers.mock import MockProvider
from tests.integration._answers import answer

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)
QUESTIONS = [f"Question {i}: what did the twins see?" for i in range(50)]
FORECAST = ToolDeclaration(
    name="get_forecast",
    description="Tomorrow's forecast for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


async def plan(run: AsyncRun) -> tuple[Any, list[Any], dict[str, str]]:
    """A planner delegates 50 questions to a researcher and a forecast to a tool-using agent."""
    team = Team(run, "desk", budget=Budget(steps=60))
    planner = team.agent("planner", role="planner", task="answer the brief")
    researcher = planner.delegate("researcher", role="researcher", task="50 questions")
    forecaster = planner.delegate("forecaster", role="tools", task="forecast")
    answers = await governed_run_many(researcher.run, QUESTIONS, config=MOCK)
    env = Environment(instructions="Use the tool.", tools=[FORECAST])
    turn = await governed_interact(forecaster.run, env, Input("Weather in Paris?"), config=MOCK)
    turns = [turn]
    while turn.tool_calls:
        results = [ToolResult(call_id=c.id, content="sunny") for c in turn.tool_calls]
        nxt = Input(continuation=turn.continuation, tool_results=results)
        turn = await governed_interact(forecaster.run, env, nxt, config=MOCK)
        turns.append(turn)
    ids = {"researcher": researcher.node_id, "forecaster": forecaster.node_id}
    return answers, turns, ids


async def test_a_researcher_agent_fans_out_and_replays_offline(
    tmp_path: Path, monkeypatch: Any
) -> None:
    calls: list[int] = []
    execute = MockProvider.execute

    async def counted(self: MockProvider, compiled: Any) -> Any:
        calls.append(1)
        return await execute(self, compiled)

    monkeypatch.setattr(MockProvider, "execute", counted)
    db = tmp_path / "desk.db"
    async with AsyncRuntime(db) as rt:
        run = rt.run("brief")
        answers, turns, ids = await plan(run)
        report = team_report(rt.store, run.root_id)
    assert answers.status == "ok" and len(answers.outputs) == 50
    assert len(turns) == 2 and turns[0].tool_calls  # a tool call, then the answer
    agents = {a["name"]: a for a in report["agents"]}
    assert agents["researcher"]["own"]["steps"] == 50
    assert agents["forecaster"]["own"]["steps"] == 2
    assert agents["planner"]["total"]["steps"] == 52 and agents["planner"]["own"] == {}
    assert report["unattributed"] == {}
    assert len(calls) == 52
    calls.clear()
    async with AsyncRuntime(db, mode="replay") as rt:
        again, turns_again, ids_again = await plan(rt.run("brief"))
    assert calls == [] and ids_again == ids  # the same agents, served from the ledger
    assert answer(again) == answer(answers)
    assert answer(turns_again) == answer(turns)
