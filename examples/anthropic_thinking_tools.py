"""An extended-thinking tool loop on Anthropic, with prompt caching and a saved continuation.

The loop thinks (``reasoning_budget_tokens``), calls a tool, saves the continuation as JSON (as
an agent would between processes), restores it and answers; the signed thinking blocks travel
inside the continuation and are replayed verbatim. Then a ``run_many`` fan-out over one long
style guide shows prompt caching: the first call writes the cache, the rest read it.

With ``ANTHROPIC_API_KEY`` set, this script talks to Anthropic (``ANTHROPIC_MODEL`` picks the
model, default ``claude-haiku-4-5``). Without a key it runs offline: the official SDK is pointed
at the pollux.testing emulator. Run it with ``python examples/anthropic_thinking_tools.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator

from pollux import (
    Config,
    Continuation,
    Environment,
    Input,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
)
from pollux.testing import Emulator, Reply, ToolCall

STOCK = {"widget": 12, "gadget": 0}

LOOKUP = ToolDeclaration(
    name="get_stock",
    description="How many units of an item are in stock.",
    parameters={"type": "object", "properties": {"item": {"type": "string"}}},
)

STYLE_GUIDE = "Answer in one short sentence. Prefer plain words over jargon. " * 300


@contextlib.contextmanager
def anthropic_endpoint() -> Iterator[Config]:
    """A real Anthropic config when a key is set; otherwise the emulator behind the same SDK."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        yield Config(
            provider="anthropic", model=os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5")
        )
        return
    with Emulator() as emu:
        # The emulated model asks for the tool first, then answers from the tool results.
        emu.script(
            "anthropic.messages.create",
            Reply(tool_calls=[ToolCall("get_stock", {"item": "widget"})]),
        )
        os.environ["ANTHROPIC_BASE_URL"] = emu.base_url("anthropic")
        try:
            yield Config(provider="anthropic", model="claude-haiku-4-5", api_key="offline")
        finally:
            del os.environ["ANTHROPIC_BASE_URL"]


async def main(config: Config) -> None:
    env = Environment(
        instructions="Check the stock with the tool before answering.", tools=[LOOKUP]
    )
    async with Session(config) as session:
        turn = await session.interact(
            env, Input("Is the widget in stock? Use get_stock."), reasoning_budget_tokens=2048
        )
        print(f"thought: {turn.reasoning!r}")
        while turn.tool_calls:
            results = []
            for call in turn.tool_calls:
                item = str(call.arguments_dict().get("item", ""))
                count = STOCK.get(item)
                print(f"tool {call.name}({call.arguments_text}) -> {count}")
                results.append(
                    ToolResult.from_value(
                        call_id=call.id,
                        value={"units": count} if count is not None else f"unknown item {item!r}",
                        is_error=count is None,
                    )
                )
            # Between processes an agent stores the continuation as JSON and restores it later.
            saved = json.dumps(turn.continuation.to_jsonable() if turn.continuation else None)
            restored = Continuation.from_jsonable(json.loads(saved))
            turn = await session.interact(
                env,
                Input(continuation=restored, tool_results=results),
                reasoning_budget_tokens=2048,
            )
        print(f"answer: {turn.text}")

        guide = Environment(sources=[Source.from_text(STYLE_GUIDE)])
        answers = await session.run_many(
            ["What is a widget?", "What is a gadget?", "What is stock?"], environment=guide
        )
        usage = answers.usage
        print(
            f"fan-out: {len(answers.answers)} answers, cache writes {usage.cache_write_tokens}, "
            f"cache reads {usage.cached_tokens} of {usage.input_tokens} input tokens"
        )


if __name__ == "__main__":
    with anthropic_endpoint() as cfg:
        asyncio.run(main(cfg))
