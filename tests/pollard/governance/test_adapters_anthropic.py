"""The Anthropic adapter through the real SDK over httpx.MockTransport (no network)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2 as httpx  # this anthropic SDK generation ships its own httpx fork
import pytest

from pollard import Budget, Runtime
from pollard.adapters.anthropic import make_async_messages_fn, make_messages_fn
from pollard.errors import BudgetExceeded, PollardError
from pollard.meters import StepMeter, TokenMeter

from .test_adapters_openai import sse

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [
        {"type": "text", "text": "Checking "},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}},
        {"type": "text", "text": "now."},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 30,
        "output_tokens": 15,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
        "output_tokens_details": {"thinking_tokens": 6},
    },
}
USAGE = {
    "input_tokens": 150,
    "output_tokens": 15,
    "cache_read_tokens": 100,
    "cache_write_tokens": 20,
    "reasoning_tokens": 6,
}

EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            **MESSAGE,
            "content": [],
            "stop_reason": None,
            "usage": {**MESSAGE["usage"], "output_tokens": 1},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Checking "},
    },
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"q": '},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '"x"}'},
    },
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "now."}},
    {"type": "content_block_stop", "index": 2},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 15},
    },
    {"type": "message_stop"},
]


class Routes:
    """Serves count_tokens and messages from one transport, recording the request bodies."""

    def __init__(self, body: bytes | dict[str, Any]) -> None:
        self.body = body
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/count_tokens"):
            self.requests.append({"count_tokens": json.loads(request.content)})
            return httpx.Response(200, json={"input_tokens": 321})
        self.requests.append(json.loads(request.content))
        if isinstance(self.body, dict):
            return httpx.Response(200, json=self.body)
        return httpx.Response(200, content=self.body, headers={"content-type": "text/event-stream"})


def client(handler: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="test-key",
        base_url="http://pollard.test",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def async_client(handler: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="test-key",
        base_url="http://pollard.test",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )


def test_messages_normalizes_and_folds_cache_tokens_into_input() -> None:
    recorder = Routes(MESSAGE)
    with client(recorder) as c:
        fn = make_messages_fn(c, model="claude-sonnet-4-6", max_tokens=256)
        result = fn({"messages": [{"role": "user", "content": "hi"}], "_pollard": {"x": 1}})
    assert result["text"] == "Checking now."
    assert result["tool_calls"] == [{"id": "toolu_1", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == USAGE
    assert result["provider_usage"]["cache_read_input_tokens"] == 100
    assert result["stop_reason"] == "tool_use"
    assert "_pollard" not in recorder.requests[0]
    assert recorder.requests[0]["max_tokens"] == 256


def test_messages_fn_is_an_estimator_without_create_only_fields() -> None:
    recorder = Routes(MESSAGE)
    with client(recorder) as c:
        fn = make_messages_fn(c, model="claude-sonnet-4-6", max_tokens=256, temperature=0.5)
        assert (
            fn.estimate_input_tokens(
                {"messages": [{"role": "user", "content": "hi"}], "system": "s", "stream": False}
            )
            == 321
        )
    assert recorder.requests == [
        {
            "count_tokens": {
                "model": "claude-sonnet-4-6",
                "system": "s",
                "messages": [{"role": "user", "content": "hi"}],
            }
        }
    ]


def test_messages_streaming() -> None:
    recorder = Routes(sse(EVENTS))
    with client(recorder) as c:
        chunks = list(make_messages_fn(c, stream=True, model="m", max_tokens=5)({"messages": []}))
    assert [ch["delta"]["text"] for ch in chunks[:-1]] == ["Checking ", "now."]
    result = chunks[-1]["result"]
    assert result["text"] == "Checking now."
    assert result["tool_calls"] == [{"id": "toolu_1", "name": "lookup", "arguments": {"q": "x"}}]
    assert result["usage"] == USAGE
    assert recorder.requests[0]["stream"] is True


def test_messages_stream_cut_off_is_an_error() -> None:
    with client(Routes(sse(EVENTS[:4]))) as c:
        stream = make_messages_fn(c, stream=True, model="m", max_tokens=5)({"messages": []})
        with pytest.raises(PollardError, match="message_stop"):
            list(stream)


async def test_async_messages_plain_and_streaming() -> None:
    async with async_client(Routes(MESSAGE)) as c:
        result = await make_async_messages_fn(c, model="m", max_tokens=5)({"messages": []})
    assert result["usage"] == USAGE
    async with async_client(Routes(sse(EVENTS))) as c:
        fn = make_async_messages_fn(c, stream=True, model="m", max_tokens=5)
        chunks = [ch async for ch in fn({"messages": []})]
    assert chunks[-1]["result"]["text"] == "Checking now."


def test_the_messages_fn_as_estimator_refuses_before_the_call() -> None:
    recorder = Routes(MESSAGE)
    with client(recorder) as c:
        fn = make_messages_fn(c, model="claude-sonnet-4-6", max_tokens=64)
        meter = TokenMeter(fn, reserved_output_tokens=64)  # count_tokens answers 321
        runtime = Runtime(meters=[StepMeter(), meter])
        with runtime, runtime.run("estimate", budget=Budget(tokens=300)) as run:
            with pytest.raises(BudgetExceeded) as info:
                run.model_call({"messages": [{"role": "user", "content": "hi"}]}, fn=fn)
            refusal = run.store.get(info.value.refusal_id)
    assert refusal.payload["estimated"] == "true"
    assert refusal.payload["requested"] == "385"
    assert recorder.requests == [  # counted, never sent
        {
            "count_tokens": {
                "model": "claude-sonnet-4-6",
                "messages": [{"role": "user", "content": "hi"}],
            }
        }
    ]
