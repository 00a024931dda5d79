"""The OpenAI adapter through the real SDK over httpx.MockTransport (no network)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from pollard.adapters.openai import (
    make_async_chat_completions_fn,
    make_async_responses_fn,
    make_chat_completions_fn,
    make_responses_fn,
)
from pollard.errors import PollardError

RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "gpt-5.5",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "Hello ", "annotations": []},
                {"type": "output_text", "text": "world", "annotations": []},
            ],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"q": "invoice"}',
            "status": "completed",
        },
    ],
    "usage": {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 10},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 5},
        "total_tokens": 120,
    },
}

EXPECTED_USAGE = {
    "input_tokens": 100,
    "output_tokens": 20,
    "cache_read_tokens": 40,
    "cache_write_tokens": 10,
    "reasoning_tokens": 5,
}


def sse(events: list[dict[str, Any]], *, done: bool = False) -> bytes:
    lines = []
    for event in events:
        if "type" in event:
            lines.append(f"event: {event['type']}")
        lines.append("data: " + json.dumps(event))
        lines.append("")
    if done:
        lines += ["data: [DONE]", ""]
    return ("\n".join(lines) + "\n").encode()


Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    def __init__(self, body: bytes | dict[str, Any], *, stream: bool = False) -> None:
        self.body = body
        self.stream = stream
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        if isinstance(self.body, dict):
            return httpx.Response(200, json=self.body)
        return httpx.Response(200, content=self.body, headers={"content-type": "text/event-stream"})


def sync_client(handler: Handler) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="test-key",
        base_url="http://pollard.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def async_client(handler: Handler) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="test-key",
        base_url="http://pollard.test/v1",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )


def test_responses_normalizes_text_tool_calls_and_usage() -> None:
    recorder = Recorder(RESPONSE)
    with sync_client(recorder) as client:
        fn = make_responses_fn(client, model="gpt-5.5", temperature=0)
        result = fn({"input": "Summarize", "_pollard": {"provider": "openai"}})
    assert result["text"] == "Hello world"
    assert result["tool_calls"] == [
        {"id": "call_1", "name": "lookup", "arguments": {"q": "invoice"}}
    ]
    assert result["usage"] == EXPECTED_USAGE
    assert result["provider_usage"]["input_tokens_details"]["cached_tokens"] == 40
    assert result["stop_reason"] == "completed"
    assert result["raw"]["id"] == "resp_1"
    json.dumps(result)  # the whole result is JSON, ready to be stored
    # Defaults merged under the payload, pollard's private key never sent.
    assert recorder.requests == [{"model": "gpt-5.5", "temperature": 0, "input": "Summarize"}]


RESPONSE_EVENTS = [
    {"type": "response.created", "sequence_number": 0, "response": {**RESPONSE, "output": []}},
    {
        "type": "response.output_text.delta",
        "sequence_number": 1,
        "delta": "Hello ",
        "item_id": "msg_1",
        "output_index": 1,
        "content_index": 0,
    },
    {
        "type": "response.output_text.delta",
        "sequence_number": 2,
        "delta": "world",
        "item_id": "msg_1",
        "output_index": 1,
        "content_index": 0,
    },
    {"type": "response.completed", "sequence_number": 3, "response": RESPONSE},
]


def test_responses_streaming_yields_deltas_then_the_result() -> None:
    recorder = Recorder(sse(RESPONSE_EVENTS))
    with sync_client(recorder) as client:
        chunks = list(make_responses_fn(client, stream=True)({"model": "m", "input": "x"}))
    assert chunks[:2] == [{"delta": {"text": "Hello "}}, {"delta": {"text": "world"}}]
    assert chunks[-1]["result"]["text"] == "Hello world"
    assert chunks[-1]["result"]["usage"] == EXPECTED_USAGE
    assert recorder.requests[0]["stream"] is True


def test_responses_stream_without_terminal_event_is_an_error() -> None:
    recorder = Recorder(sse(RESPONSE_EVENTS[:2]))
    with sync_client(recorder) as client:
        stream = make_responses_fn(client, stream=True)({"model": "m", "input": "x"})
        with pytest.raises(PollardError, match="terminal event"):
            list(stream)


async def test_async_responses_plain_and_streaming() -> None:
    async with async_client(Recorder(RESPONSE)) as client:
        result = await make_async_responses_fn(client)({"model": "m", "input": "x"})
    assert result["usage"] == EXPECTED_USAGE
    async with async_client(Recorder(sse(RESPONSE_EVENTS))) as client:
        chunks = [c async for c in make_async_responses_fn(client, stream=True)({"input": "x"})]
    assert [c["delta"]["text"] for c in chunks[:-1]] == ["Hello ", "world"]
    assert chunks[-1]["result"]["tool_calls"][0]["name"] == "lookup"


COMPLETION = {
    "id": "chatcmpl_1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4.1",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q":"x"}'},
                    }
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 50,
        "completion_tokens": 12,
        "total_tokens": 62,
        "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 4},
    },
}
CHAT_USAGE = {
    "input_tokens": 50,
    "output_tokens": 12,
    "cache_read_tokens": 32,
    "cache_write_tokens": 0,
    "reasoning_tokens": 4,
}


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl_1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4.1",
        "choices": choices,
        "usage": usage,
    }


CHAT_CHUNKS = [
    chunk({"role": "assistant", "content": "Let me "}),
    chunk({"content": "check."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"q"'},
                }
            ]
        }
    ),
    chunk(
        {"tool_calls": [{"index": 0, "function": {"name": "up", "arguments": ':"x"}'}}]},
        finish="tool_calls",
    ),
    chunk(None, usage=COMPLETION["usage"]),
]


def test_chat_completions_plain() -> None:
    recorder = Recorder(COMPLETION)
    with sync_client(recorder) as client:
        result = make_chat_completions_fn(client, model="gpt-4.1")({"messages": []})
    assert result["text"] == "Let me check."
    assert result["tool_calls"] == [{"id": "call_9", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == CHAT_USAGE
    assert result["stop_reason"] == "tool_calls"


def test_chat_completions_streaming_assembles_tool_calls_and_asks_for_usage() -> None:
    recorder = Recorder(sse(CHAT_CHUNKS, done=True))
    with sync_client(recorder) as client:
        fn = make_chat_completions_fn(client, stream=True, model="gpt-4.1")
        chunks = list(fn({"messages": [], "stream_options": {"include_obfuscation": False}}))
    assert [c["delta"]["text"] for c in chunks[:-1]] == ["Let me ", "check."]
    result = chunks[-1]["result"]
    assert result["text"] == "Let me check."
    assert result["tool_calls"] == [{"id": "call_9", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == CHAT_USAGE
    assert result["raw"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    assert recorder.requests[0]["stream_options"] == {
        "include_obfuscation": False,
        "include_usage": True,
    }


async def test_async_chat_completions_plain_and_streaming() -> None:
    async with async_client(Recorder(COMPLETION)) as client:
        result = await make_async_chat_completions_fn(client)({"model": "m", "messages": []})
    assert result["usage"] == CHAT_USAGE
    async with async_client(Recorder(sse(CHAT_CHUNKS, done=True))) as client:
        fn = make_async_chat_completions_fn(client, stream=True)
        chunks = [c async for c in fn({"model": "m", "messages": []})]
    assert chunks[-1]["result"]["usage"] == CHAT_USAGE
