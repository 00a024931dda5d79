"""Bedrock (a fake boto3 client with Converse wire fixtures) and LiteLLM (a fake completion)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pollard.adapters.bedrock import make_async_converse_fn, make_converse_fn
from pollard.adapters.litellm import make_async_completion_fn, make_completion_fn
from pollard.errors import PollardError

CONVERSE = {
    "ResponseMetadata": {
        "RequestId": "r-1",
        "HTTPStatusCode": 200,
        "HTTPHeaders": {"date": "Sun, 29 Nov 2026 20:00:00 GMT"},
    },
    "output": {
        "message": {
            "role": "assistant",
            "content": [
                {"text": "Looking it up."},
                {"toolUse": {"toolUseId": "tu_1", "name": "lookup", "input": {"q": "x"}}},
            ],
        }
    },
    "stopReason": "tool_use",
    "usage": {
        "inputTokens": 12,
        "outputTokens": 7,
        "totalTokens": 49,
        "cacheReadInputTokens": 25,
        "cacheWriteInputTokens": 5,
    },
    "metrics": {"latencyMs": 321},
}
BEDROCK_USAGE = {
    "input_tokens": 42,
    "output_tokens": 7,
    "cache_read_tokens": 25,
    "cache_write_tokens": 5,
    "reasoning_tokens": 0,
}

STREAM_EVENTS: list[dict[str, Any]] = [
    {"messageStart": {"role": "assistant"}},
    {"contentBlockDelta": {"delta": {"text": "Looking "}, "contentBlockIndex": 0}},
    {"contentBlockDelta": {"delta": {"text": "it up."}, "contentBlockIndex": 0}},
    {"contentBlockStop": {"contentBlockIndex": 0}},
    {
        "contentBlockStart": {
            "start": {"toolUse": {"toolUseId": "tu_1", "name": "lookup"}},
            "contentBlockIndex": 1,
        }
    },
    {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"q":'}}, "contentBlockIndex": 1}},
    {"contentBlockDelta": {"delta": {"toolUse": {"input": '"x"}'}}, "contentBlockIndex": 1}},
    {"contentBlockStop": {"contentBlockIndex": 1}},
    {"messageStop": {"stopReason": "tool_use"}},
    {"metadata": {"usage": CONVERSE["usage"], "metrics": {"latencyMs": 400}}},
]


class FakeEventStream:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(copy.deepcopy(self.events))

    def close(self) -> None:
        self.closed = True


class FakeBedrock:
    """The slice of a boto3 bedrock-runtime client the adapter uses."""

    def __init__(self, events: list[dict[str, Any]] = STREAM_EVENTS) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.stream = FakeEventStream(events)

    def converse(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("converse", kwargs))
        return copy.deepcopy(CONVERSE)

    def converse_stream(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("converse_stream", kwargs))
        return {"ResponseMetadata": {}, "stream": self.stream}

    def count_tokens(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("count_tokens", kwargs))
        return {"inputTokens": 77}


MESSAGES = [{"role": "user", "content": [{"text": "hi"}]}]


def test_converse_normalizes_and_merges_defaults() -> None:
    client = FakeBedrock()
    fn = make_converse_fn(client, modelId="anthropic.claude", inferenceConfig={"maxTokens": 50})
    result = fn({"messages": MESSAGES, "_pollard": {"provider": "bedrock"}})
    assert result["text"] == "Looking it up."
    assert result["tool_calls"] == [{"id": "tu_1", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == BEDROCK_USAGE
    assert result["stop_reason"] == "tool_use"
    assert "ResponseMetadata" not in result["raw"]
    assert client.calls == [
        (
            "converse",
            {
                "modelId": "anthropic.claude",
                "inferenceConfig": {"maxTokens": 50},
                "messages": MESSAGES,
            },
        )
    ]


def test_converse_stream_rebuilds_the_message_and_closes_the_stream() -> None:
    client = FakeBedrock()
    chunks = list(make_converse_fn(client, stream=True, modelId="m")({"messages": MESSAGES}))
    assert [c["delta"]["text"] for c in chunks[:-1]] == ["Looking ", "it up."]
    result = chunks[-1]["result"]
    assert result["text"] == "Looking it up."
    assert result["tool_calls"] == [{"id": "tu_1", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == BEDROCK_USAGE
    assert result["raw"]["metrics"] == {"latencyMs": 400}
    assert client.stream.closed


def test_converse_stream_cut_off_is_an_error() -> None:
    client = FakeBedrock(STREAM_EVENTS[:3])
    with pytest.raises(PollardError, match="messageStop"):
        list(make_converse_fn(client, stream=True, modelId="m")({"messages": MESSAGES}))
    assert client.stream.closed


def test_converse_stream_stopped_without_metadata_settles_and_closes() -> None:
    # messageStop completes the response; a missing metadata event (usage) is not a cut-off.
    client = FakeBedrock(STREAM_EVENTS[:-1])
    chunks = list(make_converse_fn(client, stream=True, modelId="m")({"messages": MESSAGES}))
    result = chunks[-1]["result"]
    assert result["text"] == "Looking it up."
    assert result["stop_reason"] == "tool_use"
    assert client.stream.closed


async def test_async_converse_stream_stopped_without_metadata_settles() -> None:
    client = FakeBedrock(STREAM_EVENTS[:-1])
    fn = make_async_converse_fn(client, stream=True, modelId="m")
    chunks = [c async for c in fn({"messages": MESSAGES})]
    assert chunks[-1]["result"]["text"] == "Looking it up."
    assert client.stream.closed


async def test_async_converse_stream_cut_off_is_an_error() -> None:
    client = FakeBedrock(STREAM_EVENTS[:3])
    fn = make_async_converse_fn(client, stream=True, modelId="m")
    with pytest.raises(PollardError, match="messageStop"):
        [c async for c in fn({"messages": MESSAGES})]
    assert client.stream.closed


def test_converse_stream_exception_event_is_an_error() -> None:
    client = FakeBedrock([*STREAM_EVENTS[:2], {"throttlingException": {"message": "slow"}}])
    with pytest.raises(PollardError, match="throttlingException"):
        list(make_converse_fn(client, stream=True, modelId="m")({"messages": MESSAGES}))


def test_count_tokens_estimator_is_opt_in() -> None:
    client = FakeBedrock()
    with pytest.raises(PollardError, match="count_tokens=True"):
        make_converse_fn(client, modelId="m").estimate_input_tokens({"messages": MESSAGES})
    fn = make_converse_fn(client, count_tokens=True, modelId="m", inferenceConfig={"x": 1})
    assert fn.estimate_input_tokens({"messages": MESSAGES, "system": [{"text": "s"}]}) == 77
    assert client.calls[-1] == (
        "count_tokens",
        {"modelId": "m", "input": {"converse": {"messages": MESSAGES, "system": [{"text": "s"}]}}},
    )


async def test_async_converse_with_a_blocking_boto3_client() -> None:
    client = FakeBedrock()
    result = await make_async_converse_fn(client, modelId="m")({"messages": MESSAGES})
    assert result["usage"] == BEDROCK_USAGE
    fn = make_async_converse_fn(client, stream=True, modelId="m")
    chunks = [c async for c in fn({"messages": MESSAGES})]
    assert chunks[-1]["result"]["text"] == "Looking it up."
    assert client.stream.closed


class AsyncFakeBedrock:
    """An aioboto3-style client: awaitable calls and an async event stream."""

    async def converse(self, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(CONVERSE)

    async def converse_stream(self, **kwargs: Any) -> dict[str, Any]:
        async def events() -> AsyncIterator[dict[str, Any]]:
            for event in STREAM_EVENTS:
                yield event

        return {"stream": events()}


async def test_async_converse_with_an_async_client() -> None:
    client = AsyncFakeBedrock()
    assert (await make_async_converse_fn(client)({"messages": MESSAGES}))["usage"] == BEDROCK_USAGE
    chunks = [c async for c in make_async_converse_fn(client, stream=True)({"messages": []})]
    assert chunks[-1]["result"]["tool_calls"][0]["arguments"] == {"q": "x"}


# -- LiteLLM ------------------------------------------------------------------------------------

LITELLM_RESPONSE = {
    "id": "chatcmpl-l",
    "object": "chat.completion",
    "model": "anthropic/claude-sonnet-4-6",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hi there", "tool_calls": None},
        }
    ],
    # LiteLLM's Anthropic route reports the cache through Anthropic-style fields.
    "usage": {
        "prompt_tokens": 140,
        "completion_tokens": 9,
        "total_tokens": 149,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
    },
}
LITELLM_USAGE = {
    "input_tokens": 140,
    "output_tokens": 9,
    "cache_read_tokens": 100,
    "cache_write_tokens": 20,
    "reasoning_tokens": 0,
}
LITELLM_CHUNKS = [
    {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi "}}]},
    {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "there"}, "finish_reason": "stop"}],
    },
    {"id": "c", "model": "m", "choices": [], "usage": LITELLM_RESPONSE["usage"]},
]


class FakeCompletion:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return iter(copy.deepcopy(LITELLM_CHUNKS)) if kwargs.get("stream") else LITELLM_RESPONSE


def test_litellm_completion_plain_and_streaming() -> None:
    completion = FakeCompletion()
    result = make_completion_fn(completion, model="anthropic/claude")({"messages": []})
    assert result["text"] == "hi there"
    assert result["tool_calls"] == []
    assert result["usage"] == LITELLM_USAGE
    chunks = list(make_completion_fn(completion, stream=True)({"model": "m", "messages": []}))
    assert [c["delta"]["text"] for c in chunks[:-1]] == ["hi ", "there"]
    assert chunks[-1]["result"]["usage"] == LITELLM_USAGE
    assert completion.calls[1]["stream_options"] == {"include_usage": True}


async def test_litellm_async_plain_and_streaming() -> None:
    async def acompletion(**kwargs: Any) -> Any:
        if kwargs.get("stream"):

            async def chunks() -> AsyncIterator[dict[str, Any]]:
                for item in LITELLM_CHUNKS:
                    yield item

            return chunks()
        return LITELLM_RESPONSE

    result = await make_async_completion_fn(acompletion)({"model": "m", "messages": []})
    assert result["usage"] == LITELLM_USAGE
    fn = make_async_completion_fn(acompletion, stream=True)
    chunks = [c async for c in fn({"model": "m", "messages": []})]
    assert chunks[-1]["result"]["text"] == "hi there"


def test_litellm_missing_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r'pip install "pollard\[litellm\]"'):
        make_completion_fn()
