"""The OpenAI adapter end to end: the real SDK against pollux's emulator, inside model_call."""

from __future__ import annotations

from typing import Any

import openai

from pollard import Runtime
from pollard.adapters.openai import make_chat_completions_fn, make_responses_fn
from pollux.testing import Emulator, Reply, ToolCall


def test_responses_through_model_call_plain_and_streaming() -> None:
    with Emulator() as emu:
        emu.script(
            "openai.responses",
            Reply(
                tool_calls=[ToolCall("lookup", {"number": "INV-7"})],
                input_tokens=40,
                output_tokens=6,
            ),
            Reply(
                "Paid in full.",
                input_tokens=50,
                output_tokens=4,
                cached_tokens=32,
                reasoning_tokens=2,
            ),
        )
        client = openai.OpenAI(base_url=emu.base_url("openai"), api_key="sk-test", max_retries=0)
        try:
            with Runtime().run("emulated") as run:
                first = run.model_call(
                    {"model": "gpt-5", "input": "Is INV-7 paid?"}, fn=make_responses_fn(client)
                )
                deltas: list[Any] = []
                second = run.model_call(
                    {"model": "gpt-5", "input": "And now?"},
                    fn=make_responses_fn(client, stream=True),
                    on_delta=deltas.append,
                )
        finally:
            client.close()
        emu.assert_consumed()
    call = first.result["tool_calls"][0]
    assert call["name"] == "lookup" and call["arguments"] == {"number": "INV-7"}
    assert first.meta["charges"]["tokens"] == 46
    assert second.result["text"] == "Paid in full."
    assert "".join(d["delta"]["text"] for d in deltas if "delta" in d) == "Paid in full."
    usage = second.result["usage"]
    assert usage["input_tokens"] == 50 and usage["cache_read_tokens"] == 32
    assert usage["output_tokens"] == 4 and usage["reasoning_tokens"] == 2
    assert second.meta["charges"]["tokens"] == 54  # settled once, from the provider's usage


def test_chat_completions_streaming_against_the_local_wire() -> None:
    with Emulator() as emu:
        client = openai.OpenAI(base_url=emu.base_url("local"), api_key="local", max_retries=0)
        try:
            fn = make_chat_completions_fn(client, stream=True, model="llama3.2")
            chunks = list(fn({"messages": [{"role": "user", "content": "hello there"}]}))
        finally:
            client.close()
        sent = emu.last_request.json
    result = chunks[-1]["result"]
    assert result["text"] == "Emulated reply to: hello there"
    assert "".join(c["delta"]["text"] for c in chunks[:-1]) == result["text"]
    assert result["usage"]["input_tokens"] > 0 and result["usage"]["output_tokens"] > 0
    assert sent["stream_options"]["include_usage"] is True
