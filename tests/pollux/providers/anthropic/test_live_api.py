"""Against the real Anthropic API: opt-in (``-m api``) and only with ``ANTHROPIC_API_KEY`` set.

``ANTHROPIC_MODEL`` picks the model (default ``claude-haiku-4-5``).
"""

from __future__ import annotations

import json
import os

import pydantic
import pytest

from pollux import (
    Config,
    Continuation,
    Environment,
    Input,
    Session,
    ToolDeclaration,
    ToolResult,
    run,
)

pytestmark = [
    pytest.mark.api,
    pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="needs ANTHROPIC_API_KEY"),
]


@pytest.fixture
def config() -> Config:
    return Config(provider="anthropic", model=os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5"))


class Capital(pydantic.BaseModel):
    country: str
    capital: str


async def test_structured_output(config: Config) -> None:
    out = await run("What is the capital of France?", config=config, output=Capital)
    assert isinstance(out.structured, Capital)
    assert out.structured.capital.lower() == "paris"


async def test_thinking_tool_loop_across_a_json_round_trip(config: Config) -> None:
    tool = ToolDeclaration(
        name="get_time",
        description="The current time in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    env = Environment(tools=[tool])
    async with Session(config) as session:
        first = await session.interact(
            env, Input("What time is it in Oslo? Use the tool."), reasoning_budget_tokens=1024
        )
        assert first.tool_calls
        saved = json.dumps(first.continuation.to_jsonable() if first.continuation else None)
        second = await session.interact(
            env,
            Input(
                continuation=Continuation.from_jsonable(json.loads(saved)),
                tool_results=[ToolResult(call_id=first.tool_calls[0].id, content="14:05")],
            ),
            reasoning_budget_tokens=1024,
        )
    assert "14" in second.text
