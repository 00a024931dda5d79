"""Amazon Bedrock adapter (``pip install "pollard[bedrock]"``): Converse and ConverseStream.

Pass the ``bedrock-runtime`` client you built with boto3 (pollard never reads AWS credentials)::

    fn = make_converse_fn(boto3.client("bedrock-runtime"), modelId="anthropic.claude-...")
    node = run.model_call({"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}, fn=fn)

With ``count_tokens=True`` the function is also a ``TokenMeter`` estimator backed by Bedrock's
``CountTokens`` API (one request per precheck). Bedrock reports prompt-cache reads and writes apart
from ``inputTokens``; the normalized ``usage.input_tokens`` includes them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from pollard.errors import PollardError

from ._common import (
    Result,
    astream_chunks,
    get,
    jsonable,
    make_result,
    merge_payload,
    stream_chunks,
    tokens,
)

__all__ = [
    "AsyncBedrockConverseFn",
    "BedrockConverseFn",
    "BedrockStreamError",
    "bedrock_usage",
    "make_async_converse_fn",
    "make_converse_fn",
    "normalize_converse",
]

_COUNT_FIELDS = ("messages", "system", "toolConfig", "additionalModelRequestFields")


class BedrockStreamError(PollardError, RuntimeError):
    """An exception event inside a ConverseStream (throttling, validation, model errors, ...).

    A ``RuntimeError``, as in pollard 0.8, whose message keeps the provider's own:
    ``"Bedrock stream throttlingException: Rate exceeded"``. ``name`` is the event name.
    """

    def __init__(self, name: str, message: str) -> None:
        text = f"Bedrock stream {name}: {message}" if message else f"Bedrock stream {name}"
        super().__init__(
            text, hint="inspect the provider error; nothing was settled for this stream"
        )
        self.name = name


def bedrock_usage(usage: object) -> dict[str, int]:
    """Normalize Converse usage: cache reads and writes are counted as input."""
    cache_read = tokens(get(usage, "cacheReadInputTokens"))
    cache_write = tokens(get(usage, "cacheWriteInputTokens"))
    return {
        "input_tokens": tokens(get(usage, "inputTokens")) + cache_read + cache_write,
        "output_tokens": tokens(get(usage, "outputTokens")),
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": 0,
    }


def normalize_converse(response: Mapping[str, Any]) -> Result:
    """Normalize a Converse response: text blocks joined, ``toolUse`` blocks as tool calls."""
    message = get(get(response, "output"), "message")
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for block in get(message, "content", []):
        if "text" in block:
            texts.append(str(block["text"]))
        elif "toolUse" in block:
            use = block["toolUse"]
            tool_calls.append(
                {
                    "id": get(use, "toolUseId"),
                    "name": get(use, "name"),
                    "arguments": jsonable(get(use, "input", {})),
                }
            )
    usage = get(response, "usage")
    raw = {key: value for key, value in response.items() if key != "ResponseMetadata"}
    return make_result(
        text="".join(texts),
        tool_calls=tool_calls,
        **bedrock_usage(usage),
        provider_usage=usage,
        stop_reason=get(response, "stopReason"),
        raw=raw,
    )


class _StreamState:
    """Rebuilds a Converse response from ConverseStream events."""

    def __init__(self) -> None:
        self.role = "assistant"
        self.blocks: dict[int, dict[str, Any]] = {}
        self.tool_json: dict[int, str] = {}
        self.stop_reason: object = None
        self.usage: object = None
        self.metrics: object = None
        self.stopped = False
        self.done = False

    @property
    def finished(self) -> bool:
        # messageStop completes the response; the metadata event (usage) may be missing.
        return self.stopped

    def add(self, event: Mapping[str, Any]) -> str:
        if "messageStart" in event:
            self.role = get(event["messageStart"], "role", "assistant")
        elif "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = get(get(start, "start"), "toolUse")
            if use is not None:
                self.blocks[tokens(get(start, "contentBlockIndex"))] = {
                    "toolUse": {"toolUseId": get(use, "toolUseId"), "name": get(use, "name")}
                }
        elif "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            index = tokens(get(body, "contentBlockIndex"))
            piece = get(body, "delta", {})
            if "text" in piece:
                block = self.blocks.setdefault(index, {"text": ""})
                block["text"] = str(block.get("text", "")) + str(piece["text"])
                return str(piece["text"])
            if "toolUse" in piece:
                self.tool_json[index] = self.tool_json.get(index, "") + str(
                    get(piece["toolUse"], "input", "")
                )
        elif "messageStop" in event:
            self.stop_reason = get(event["messageStop"], "stopReason")
            self.stopped = True
        elif "metadata" in event:
            self.usage = get(event["metadata"], "usage")
            self.metrics = get(event["metadata"], "metrics")
            self.done = self.stopped
        else:
            for name in event:
                if name.endswith("Exception"):
                    body = event[name]
                    message = get(body, "message") or get(body, "Message") or ""
                    raise BedrockStreamError(name, str(message))
        return ""

    def result(self) -> Result:
        content = []
        for index in sorted(self.blocks):
            block = json.loads(json.dumps(self.blocks[index]))
            if "toolUse" in block:
                text = self.tool_json.get(index, "")
                try:
                    block["toolUse"]["input"] = json.loads(text) if text.strip() else {}
                except ValueError:
                    block["toolUse"]["input"] = text
            content.append(block)
        response: dict[str, Any] = {
            "output": {"message": {"role": self.role, "content": content}},
            "stopReason": self.stop_reason,
            "usage": jsonable(self.usage) or {},
        }
        if self.metrics is not None:
            response["metrics"] = jsonable(self.metrics)
        return normalize_converse(response)


def _unterminated() -> PollardError:
    return PollardError(
        "the Bedrock stream ended without messageStop and metadata",
        hint="the call may have been cut off; retry it, or record it as failed",
    )


def _count_request(defaults: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    request = merge_payload(defaults, payload)
    converse = {key: request[key] for key in _COUNT_FIELDS if key in request}
    return {"modelId": request.get("modelId"), "input": {"converse": converse}}


class BedrockConverseFn:
    """A Converse step function; with ``count_tokens=True`` also a ``TokenMeter`` estimator.

    Build it with :func:`make_converse_fn`.
    """

    def __init__(
        self, client: Any, *, stream: bool = False, count_tokens: bool = False, **defaults: Any
    ) -> None:
        self.client = client
        self.stream = stream
        self.count_tokens = count_tokens
        self.defaults = dict(defaults)

    def __call__(self, payload: Mapping[str, Any]) -> Any:
        """Call Converse (a result dict) or ConverseStream (a chunk iterator)."""
        request = merge_payload(self.defaults, payload)
        if not self.stream:
            return normalize_converse(self.client.converse(**request))
        return self._stream(self.client.converse_stream(**request))

    @staticmethod
    def _stream(response: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return stream_chunks(response["stream"], _StreamState(), _unterminated)

    def estimate_input_tokens(self, payload: Mapping[str, Any]) -> int:
        """Ask Bedrock's CountTokens API for the payload's input size (needs ``count_tokens``)."""
        if not self.count_tokens:
            raise PollardError(
                "this Bedrock step function was built without count_tokens=True",
                hint="use make_converse_fn(client, count_tokens=True, ...) as the estimator",
            )
        counted = self.client.count_tokens(**_count_request(self.defaults, payload))
        return tokens(get(counted, "inputTokens"))


async def _maybe_threaded(function: Any, /, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(function):
        return await function(**kwargs)
    outcome = await asyncio.to_thread(function, **kwargs)
    if inspect.isawaitable(outcome):
        return await outcome
    return outcome


_END = object()


class AsyncBedrockConverseFn:
    """Async form of :class:`BedrockConverseFn`.

    Works with an async client (aioboto3-style awaitable ``converse``) and with a plain boto3
    client, whose blocking calls then run in a worker thread so the event loop is never blocked.
    """

    def __init__(self, client: Any, *, stream: bool = False, **defaults: Any) -> None:
        self.client = client
        self.stream = stream
        self.defaults = dict(defaults)

    def __call__(self, payload: Mapping[str, Any]) -> Any:
        """Return an awaitable result, or an async chunk iterator when streaming."""
        request = merge_payload(self.defaults, payload)
        return self._stream(request) if self.stream else self._call(request)

    async def _call(self, request: dict[str, Any]) -> Result:
        return normalize_converse(await _maybe_threaded(self.client.converse, **request))

    async def _stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        response = await _maybe_threaded(self.client.converse_stream, **request)
        events = response["stream"]
        async for chunk in astream_chunks(
            events, _StreamState(), _unterminated, iterate=_aiter(events)
        ):
            yield chunk


async def _aiter(events: Any) -> AsyncIterator[Mapping[str, Any]]:
    if hasattr(events, "__aiter__"):
        async for event in events:
            yield event
        return
    iterator = iter(events)
    while True:
        event = await asyncio.to_thread(next, iterator, _END)
        if event is _END:
            return
        yield event


def make_converse_fn(
    client: Any, *, stream: bool = False, count_tokens: bool = False, **defaults: Any
) -> BedrockConverseFn:
    """Return a step function that calls Bedrock ``converse`` (or ``converse_stream``).

    Args:
        client: A boto3 ``bedrock-runtime`` client.
        stream: Use ConverseStream: ``{"delta": ...}`` chunks ending with ``{"result": ...}``.
        count_tokens: Make the function a ``TokenMeter`` estimator through CountTokens.
        **defaults: Request fields merged under every payload (``modelId=``,
            ``inferenceConfig=``...).

    Returns:
        A :class:`BedrockConverseFn`.
    """
    return BedrockConverseFn(client, stream=stream, count_tokens=count_tokens, **defaults)


def make_async_converse_fn(
    client: Any, *, stream: bool = False, **defaults: Any
) -> AsyncBedrockConverseFn:
    """Async form of :func:`make_converse_fn` (for ``AsyncRun.amodel_call``)."""
    return AsyncBedrockConverseFn(client, stream=stream, **defaults)
