"""Against the real OpenAI API: opt-in (``-m api``) and only with ``OPENAI_API_KEY`` set.

``OPENAI_MODEL`` picks the model (default ``gpt-5-nano``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pydantic
import pytest

from pollux import (
    Config,
    Environment,
    Input,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
    run,
)

pytestmark = [
    pytest.mark.api,
    pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY"),
]


@pytest.fixture
def config() -> Config:
    return Config(provider="openai", model=os.environ.get("OPENAI_MODEL", "gpt-5-nano"))


class Capital(pydantic.BaseModel):
    country: str
    capital: str


async def test_structured_output_over_an_inlined_file(config: Config, tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Travel\nWe fly to the capital of Norway in May.\n", encoding="utf-8")
    out = await run(
        "Which country and capital does the note mention?",
        source=Source.from_file(notes),
        config=config,
        output=Capital,
    )
    assert isinstance(out.structured, Capital)
    assert out.structured.capital.lower() == "oslo"
    assert out.usage.total_tokens > 0


async def test_tool_loop_through_previous_response_id(config: Config) -> None:
    tool = ToolDeclaration(
        name="get_time",
        description="Current time in a city, as HH:MM.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    env = Environment(instructions="Always use the tool.", tools=[tool])
    async with Session(config) as session:
        first = await session.interact(
            env, Input("What time is it in Tokyo?"), tool_choice="required"
        )
        assert first.tool_calls and first.continuation is not None
        results = [ToolResult(call_id=c.id, content="09:41") for c in first.tool_calls]
        second = await session.interact(
            env, Input(continuation=first.continuation, tool_results=results)
        )
    assert "9:41" in second.text
