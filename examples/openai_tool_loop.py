"""An agent loop on the OpenAI Responses API: tools, continuation and a streamed final answer.

With ``OPENAI_API_KEY`` set, this script talks to OpenAI (``OPENAI_MODEL`` picks the model,
default ``gpt-5-nano``). Without a key it runs offline: the official SDK is pointed at the
pollux.testing emulator, which plays a model that first calls the tool and then answers. Run it
with ``python examples/openai_tool_loop.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator

from pollux import (
    Config,
    Environment,
    Input,
    Session,
    ToolDeclaration,
    ToolResult,
)
from pollux.testing import Emulator, Reply, ToolCall

FORECASTS = {"Paris": {"sky": "sunny", "high_c": 24}, "Oslo": {"sky": "rain", "high_c": 11}}

WEATHER = ToolDeclaration(
    name="get_forecast",
    description="Tomorrow's forecast for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def get_forecast(city: str) -> dict[str, object]:
    return FORECASTS.get(city, {"error": f"no forecast for {city}"})


@contextlib.contextmanager
def openai_endpoint() -> Iterator[Config]:
    """A real OpenAI config when a key is set; otherwise the emulator behind the same SDK."""
    if os.environ.get("OPENAI_API_KEY"):
        yield Config(provider="openai", model=os.environ.get("OPENAI_MODEL", "gpt-5-nano"))
        return
    with Emulator() as emu:
        emu.script(
            "openai.responses",
            Reply(
                tool_calls=[
                    ToolCall("get_forecast", {"city": "Paris"}),
                    ToolCall("get_forecast", {"city": "Atlantis"}),
                ]
            ),
            Reply("Paris: sunny, 24 °C. No forecast exists for Atlantis."),
        )
        os.environ["OPENAI_BASE_URL"] = emu.base_url("openai")
        try:
            yield Config(provider="openai", model="gpt-5-nano", api_key="offline")
        finally:
            del os.environ["OPENAI_BASE_URL"]


async def main(config: Config) -> None:
    env = Environment(
        instructions="Answer with the forecast tool; say so when a city has no forecast.",
        tools=[WEATHER],
    )
    async with Session(config) as session:
        turn = await session.interact(
            env, Input("What's the weather tomorrow in Paris and Atlantis?")
        )
        while turn.tool_calls:
            results = []
            for call in turn.tool_calls:
                forecast = get_forecast(str(call.arguments_dict().get("city", "")))
                failed = "error" in forecast
                print(f"tool {call.name}({call.arguments_text}) -> {json.dumps(forecast)}")
                results.append(
                    ToolResult.from_value(call_id=call.id, value=forecast, is_error=failed)
                )
            next_input = Input(continuation=turn.continuation, tool_results=results)
            print("answer: ", end="")
            async for event in session.stream(env, next_input):
                if event.type == "text_delta":
                    print(event.text, end="", flush=True)
                elif event.type == "done" and event.output is not None:
                    turn = event.output
            print()
        print(f"tokens: {turn.usage.total_tokens}, finish: {turn.metrics.finish_reason}")


if __name__ == "__main__":
    with openai_endpoint() as cfg:
        asyncio.run(main(cfg))
