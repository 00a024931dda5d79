"""Against the real Gemini API: opt-in (``-m api``) and only with ``GEMINI_API_KEY`` set.

``GEMINI_MODEL`` picks the model (default ``gemini-2.5-flash``).
"""

from __future__ import annotations

import json
import os

import pydantic
import pytest

from pollux import Config, Continuation, Environment, Input, Session, ToolDeclaration, ToolResult

pytestmark = [
    pytest.mark.api,
    pytest.mark.skipif(not os.environ.get("GEMINI_API_KEY"), reason="needs GEMINI_API_KEY"),
]


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    return Config(provider="gemini", model=os.environ.get("GEMINI_MODEL", "gemini-2.5-flash"))


class Capital(pydantic.BaseModel):
    country: str
    capital: str


async def test_structured_output_and_usage(config: Config) -> None:
    async with Session(config) as session:
        result = await session.run_many("Capital of France?", output=Capital, max_tokens=2048)
    out = result.outputs[0]
    assert isinstance(out.structured, Capital) and out.structured.capital == "Paris"
    assert out.usage.input_tokens > 0 and out.metrics.completion_status == "clean"


async def test_tool_loop_through_json(config: Config) -> None:
    tool = ToolDeclaration(
        name="get_time",
        description="The current time in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    env = Environment(tools=[tool])
    async with Session(config) as session:
        first = await session.interact(
            env, Input("What time is it in Oslo? Use the tool."), tool_choice="required"
        )
        assert first.tool_calls and first.continuation is not None
        restored = Continuation.from_jsonable(
            json.loads(json.dumps(first.continuation.to_jsonable()))
        )
        second = await session.interact(
            env,
            Input(
                continuation=restored,
                tool_results=[
                    ToolResult(call_id=first.tool_calls[0].id, content='{"time": "09:41"}')
                ],
            ),
        )
    assert "9" in second.text
