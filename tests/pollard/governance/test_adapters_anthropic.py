"""The Anthropic adapter through the real SDK against pollux's emulator (no network, no mock)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from pollard import Budget, Runtime
from pollard.adapters.anthropic import make_async_messages_fn, make_messages_fn
from pollard.errors import BudgetExceeded, PollardError
from pollard.meters import StepMeter, TokenMeter
from pollux.testing import AnthropicReply, CutStream, Emulator, StreamError, ToolCall

TEXT = "Checking the invoice ledger now."
LOOKUP = ToolCall("lookup", {"q": "x"}, "toolu_1")
USAGE = {
    "input_tokens": 150,
    "output_tokens": 15,
    "cache_read_tokens": 100,
    "cache_write_tokens": 20,
    "reasoning_tokens": 6,
}
# 320 words and the one-word system prompt: the emulator counts 321 input tokens.
LONG = " ".join(["word"] * 320)
HI = [{"role": "user", "content": "hi"}]


def reply() -> AnthropicReply:
    """A tool-using answer with the cache and thinking usage the folding rules are about."""
    return AnthropicReply(
        TEXT,
        tool_calls=[LOOKUP],
        input_tokens=30,
        output_tokens=15,
        cached_tokens=100,
        cache_write_tokens=20,
        reasoning_tokens=6,
    )


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def client(emu: Emulator) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="test-key", base_url=emu.base_url("anthropic"), max_retries=0
    )


def async_client(emu: Emulator) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="test-key", base_url=emu.base_url("anthropic"), max_retries=0
    )


def sent(emu: Emulator, route: str = "anthropic.messages.create") -> list[Any]:
    return [r.json for r in emu.requests_for(route)]


def test_messages_normalizes_and_folds_cache_tokens_into_input(emu: Emulator) -> None:
    emu.script("anthropic.messages.create", reply())
    with client(emu) as c:
        fn = make_messages_fn(c, model="claude-sonnet-4-6", max_tokens=256)
        result = fn({"messages": [{"role": "user", "content": "hi"}], "_pollard": {"x": 1}})
    assert result["text"] == TEXT
    assert result["tool_calls"] == [{"id": "toolu_1", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == USAGE
    assert result["provider_usage"]["cache_read_input_tokens"] == 100
    assert result["stop_reason"] == "tool_use"
    assert "_pollard" not in sent(emu)[0]
    assert sent(emu)[0]["max_tokens"] == 256


def test_messages_fn_is_an_estimator_without_create_only_fields(emu: Emulator) -> None:
    with client(emu) as c:
        fn = make_messages_fn(c, model="claude-sonnet-4-6", max_tokens=256, temperature=0.5)
        payload = {"messages": [{"role": "user", "content": LONG}], "system": "s", "stream": False}
        # The emulator refuses create-only fields on count_tokens, as the API does.
        assert fn.estimate_input_tokens(payload) == 321
    assert sent(emu, "anthropic.messages.count_tokens") == [
        {
            "model": "claude-sonnet-4-6",
            "system": "s",
            "messages": [{"role": "user", "content": LONG}],
        }
    ]
    assert sent(emu) == []


def test_messages_streaming(emu: Emulator) -> None:
    emu.script("anthropic.messages.create", reply())
    with client(emu) as c:
        chunks = list(make_messages_fn(c, stream=True, model="m", max_tokens=64)({"messages": HI}))
    deltas = [ch["delta"]["text"] for ch in chunks[:-1]]
    assert len(deltas) >= 2 and "".join(deltas) == TEXT
    result = chunks[-1]["result"]
    assert result["text"] == TEXT
    assert result["tool_calls"] == [{"id": "toolu_1", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == USAGE
    assert sent(emu)[0]["stream"] is True


def test_messages_stream_cut_off_is_an_error(emu: Emulator) -> None:
    # A stream that ends cleanly before message_stop (message_start, a text block's start, a
    # delta, its stop) must not settle a truncated result.
    emu.script("anthropic.messages.create", CutStream(after_events=4, clean=True))
    with client(emu) as c:
        stream = make_messages_fn(c, stream=True, model="m", max_tokens=64)({"messages": HI})
        with pytest.raises(PollardError, match="message_stop"):
            list(stream)


def test_messages_stream_error_event_is_an_error(emu: Emulator) -> None:
    emu.script("anthropic.messages.create", StreamError(after_events=3))
    with client(emu) as c:
        stream = make_messages_fn(c, stream=True, model="m", max_tokens=64)({"messages": HI})
        with pytest.raises(anthropic.APIStatusError) as info:
            list(stream)
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


async def test_async_messages_plain_and_streaming(emu: Emulator) -> None:
    emu.script("anthropic.messages.create", reply(), reply())
    async with async_client(emu) as c:
        result = await make_async_messages_fn(c, model="m", max_tokens=64)({"messages": HI})
        assert result["usage"] == USAGE
        fn = make_async_messages_fn(c, stream=True, model="m", max_tokens=64)
        chunks = [ch async for ch in fn({"messages": HI})]
    assert chunks[-1]["result"]["text"] == TEXT
    assert chunks[-1]["result"]["usage"] == USAGE


def test_the_messages_fn_as_estimator_refuses_before_the_call(emu: Emulator) -> None:
    with client(emu) as c:
        fn = make_messages_fn(c, model="claude-sonnet-4-6", max_tokens=64)
        meter = TokenMeter(fn, reserved_output_tokens=64)  # count_tokens answers 321
        runtime = Runtime(meters=[StepMeter(), meter])
        content = LONG + " word"
        with runtime, runtime.run("estimate", budget=Budget(tokens=300)) as run:
            with pytest.raises(BudgetExceeded) as info:
                run.model_call({"messages": [{"role": "user", "content": content}]}, fn=fn)
            refusal = run.store.get(info.value.refusal_id)
    assert refusal.payload["estimated"] == "true"
    assert refusal.payload["requested"] == "385"
    assert sent(emu, "anthropic.messages.count_tokens") == [  # counted, never sent
        {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": content}]}
    ]
    assert sent(emu) == []
