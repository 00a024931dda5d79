"""Code written against pollux-ai 2.0.0's public API keeps working (issue 24, API half).

Each expectation was observed on the released ``pollux-ai==2.0.0`` run as a black box.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import pollux
from pollux import (
    APIError,
    CachePolicy,
    Config,
    Continuation,
    Metrics,
    Output,
    OutputCollection,
    Source,
    SourceError,
    ToolCall,
    ToolCallParseError,
)

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)

# What pollux 2.0.0 wrote for a Chat Completions conversation (its to_jsonable() layout).
SAVED_BY_20 = {
    "version": 2,
    "provider": "openai",
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
}


def test_tool_call_parse_error_is_an_api_error_again() -> None:
    call = ToolCall.from_text(id="c1", name="lookup", arguments_text="{not json")
    with pytest.raises(APIError) as info:
        call.arguments_dict()
    error = info.value
    assert isinstance(error, ToolCallParseError) and isinstance(error, ValueError)
    assert error.error_category == "tool_call_parse" and error.retryable is False
    assert error.tool_name == "lookup" and error.hint


def test_local_reasoning_builds_the_local_provider_options() -> None:
    assert pollux.local_reasoning() == {
        "local": {"chat_template_kwargs": {"enable_thinking": False}}
    }
    assert pollux.local_reasoning(enabled=True)["local"]["chat_template_kwargs"] == {
        "enable_thinking": True
    }
    with pytest.raises(TypeError):
        pollux.local_reasoning(True)  # type: ignore[misc]  # keyword-only, as in 2.0


def test_collection_status_comes_from_execution_failures() -> None:
    empty = Output(text="")
    failed = Output(text="half", metrics=Metrics(completion_status="error"))
    assert OutputCollection([empty]).status == "ok"  # an empty clean answer is not an error
    assert OutputCollection([empty, failed]).status == "partial"
    assert OutputCollection([failed]).status == "error"


def test_a_failing_loader_is_a_source_error() -> None:
    def broken() -> bytes:
        raise OSError("disk gone")

    source = Source("text", "broken-thing", "text/plain", 5, broken)
    with pytest.raises(SourceError, match="Failed to load content from source: broken-thing"):
        asyncio.run(pollux.run("hi", sources=[source], config=MOCK))


def test_the_mock_accepts_a_cache_policy() -> None:
    async def main() -> str:
        env = await pollux.prepare_environment(
            sources=[Source.from_text("hello")], config=MOCK, cache=CachePolicy(ttl_seconds=3600)
        )
        assert env.cache == CachePolicy(ttl_seconds=3600)
        return (await pollux.run("hi", config=MOCK, environment=env)).text

    assert asyncio.run(main())


def test_continuation_json_keeps_the_2_0_keys_and_reads_both_layouts() -> None:
    out = asyncio.run(pollux.run("hi", config=MOCK))
    assert out.continuation is not None
    data: dict[str, Any] = json.loads(json.dumps(out.continuation.to_jsonable()))
    # What a 2.0 reader needs: version 2, the provider, and the messages at the top level.
    assert data["version"] == 2 and data["provider"] == "openai"
    assert data["messages"] == data["state"]["messages"] and data["messages"]
    assert Continuation.from_jsonable(data) == out.continuation
    old = Continuation.from_jsonable(SAVED_BY_20)
    assert old._state["messages"] == SAVED_BY_20["messages"]
