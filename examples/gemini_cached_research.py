"""Gemini: one context cache for a fan-out, then a tool loop whose thought signatures survive JSON.

With ``GEMINI_API_KEY`` set, this script talks to Google (``GEMINI_MODEL`` picks the model,
default ``gemini-2.5-flash``). Without a key it runs offline: google-genai is pointed at the
pollux.testing emulator through ``GOOGLE_GEMINI_BASE_URL``. Run it with
``python examples/gemini_cached_research.py``.

1. ``prepare_environment(..., cache=CachePolicy(...))`` puts the long notes and the instructions
   into one Gemini context cache; the fan-out then sends only the questions.
2. A tool loop: the model asks for a tool, the continuation is saved as JSON (as an app would
   between requests) and restored, and the answer comes back with the thought signature intact.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator

from pollux import (
    CachePolicy,
    Config,
    Continuation,
    Environment,
    Input,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
)
from pollux.providers.gemini import delete_context_cache
from pollux.testing import Emulator, Reply, ToolCall

NOTES = Source.from_text(
    " ".join(
        f"Lab note {i}: the sample at station {i % 7} read {i * 3 % 101} ppm." for i in range(400)
    ),
    identifier="lab notes",
)
LOOKUP = ToolDeclaration(
    name="station_location",
    description="Where a monitoring station is.",
    parameters={"type": "object", "properties": {"station": {"type": "integer"}}},
)


@contextlib.contextmanager
def gemini_endpoint() -> Iterator[Config]:
    """A real Gemini config when a key is set; otherwise the emulator behind the same SDK."""
    if os.environ.get("GEMINI_API_KEY"):
        yield Config(provider="gemini", model=os.environ.get("GEMINI_MODEL", "gemini-2.5-flash"))
        return
    with Emulator() as emu:
        os.environ["GOOGLE_GEMINI_BASE_URL"] = emu.base_url("gemini")
        os.environ["GEMINI_API_KEY"] = "offline"
        emu.script(
            "gemini.generate",
            Reply("Station 3 readings rise through the notes."),
            Reply("The highest reading is 100 ppm."),
            Reply(tool_calls=[ToolCall("station_location", {"station": 3})]),
            Reply("Station 3 is on the north ridge."),
        )
        try:
            yield Config(provider="gemini", model="gemini-2.5-flash")
        finally:
            del os.environ["GOOGLE_GEMINI_BASE_URL"], os.environ["GEMINI_API_KEY"]


async def main(config: Config) -> None:
    async with Session(config) as session:
        env = await session.prepare_environment(
            sources=[NOTES],
            instructions="Answer from the lab notes, in one sentence.",
            cache=CachePolicy(ttl_seconds=900),
        )
        results = await session.run_many(
            ["What trend does station 3 show?", "What is the highest reading?"], environment=env
        )
        for output in results.outputs:
            metrics = output.metrics
            print(
                f"{output.text}  [cache hit={metrics.cache_hit}, cached tokens="
                f"{output.usage.cached_tokens}]"
            )

        tools = Environment(tools=[LOOKUP])
        turn = await session.interact(tools, Input("Where is station 3?"))
        (call,) = turn.tool_calls
        print(f"tool {call.name}({call.arguments_text}), signed: {bool(call.provider_state)}")
        assert turn.continuation is not None
        saved = json.dumps(turn.continuation.to_jsonable())  # persisted between requests
        answer = await session.interact(
            tools,
            Input(
                continuation=Continuation.from_jsonable(json.loads(saved)),
                tool_results=[ToolResult(call_id=call.id, content='{"place": "north ridge"}')],
            ),
        )
        print(f"answer: {answer.text}")
    deleted = await delete_context_cache(env, config=config)
    print(f"context cache deleted: {deleted}")


if __name__ == "__main__":
    with gemini_endpoint() as cfg:
        asyncio.run(main(cfg))
