"""Anthropic adapter (``pip install "pollard[anthropic]"``): the Messages API and a token estimator.

``make_messages_fn(client, **defaults)`` returns a step function for ``run.model_call`` that is also
an estimator: ``TokenMeter(make_messages_fn(client, model=...), reserved_output_tokens=N)`` asks
``client.messages.count_tokens`` for the input size at precheck (one request per precheck, with the
create-only fields such as ``max_tokens`` left out).

Anthropic reports cache reads and writes apart from ``input_tokens``; the normalized result folds
them in, so ``usage.input_tokens`` is the whole prompt and the cache fields are its breakdown.
"""

from __future__ import annotations

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
    "AnthropicMessagesFn",
    "AsyncAnthropicMessagesFn",
    "anthropic_usage",
    "make_async_messages_fn",
    "make_messages_fn",
    "normalize_message",
]

COUNT_TOKENS_FIELDS = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"}
)
"""The request fields ``messages.count_tokens`` accepts; everything else is create-only."""


def anthropic_usage(usage: object) -> dict[str, int]:
    """Normalize an Anthropic usage object: cache reads and writes are counted as input."""
    cache_read = tokens(get(usage, "cache_read_input_tokens"))
    cache_write = tokens(get(usage, "cache_creation_input_tokens"))
    return {
        "input_tokens": tokens(get(usage, "input_tokens")) + cache_read + cache_write,
        "output_tokens": tokens(get(usage, "output_tokens")),
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": tokens(get(get(usage, "output_tokens_details"), "thinking_tokens")),
    }


def normalize_message(message: object) -> Result:
    """Normalize a Messages API response: text blocks joined, ``tool_use`` blocks as tool calls."""
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for block in get(message, "content", []):
        kind = get(block, "type")
        if kind == "text":
            texts.append(str(get(block, "text", "")))
        elif kind == "tool_use":
            tool_calls.append(
                {
                    "id": get(block, "id"),
                    "name": get(block, "name"),
                    "arguments": jsonable(get(block, "input", {})),
                }
            )
    usage = get(message, "usage")
    return make_result(
        text="".join(texts),
        tool_calls=tool_calls,
        **anthropic_usage(usage),
        provider_usage=usage,
        stop_reason=get(message, "stop_reason"),
        raw=message,
    )


class _StreamState:
    """Rebuilds a Message from the raw Messages stream events."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, str] = {}
        self.usage: dict[str, Any] = {}
        self.done = False

    @property
    def finished(self) -> bool:
        # message_stop is the only complete ending, and it already sets done.
        return self.done

    def add(self, event: object) -> str:
        kind = get(event, "type")
        if kind == "message_start":
            self.message = jsonable(get(event, "message", {}))
            self.usage.update(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[tokens(get(event, "index"))] = jsonable(get(event, "content_block", {}))
        elif kind == "content_block_delta":
            index = tokens(get(event, "index"))
            block = self.blocks.setdefault(index, {"type": "text", "text": ""})
            event_delta = get(event, "delta")
            delta_kind = get(event_delta, "type")
            if delta_kind == "text_delta":
                piece = str(get(event_delta, "text", ""))
                block["text"] = str(block.get("text", "")) + piece
                return piece
            if delta_kind == "input_json_delta":
                self.partial_json[index] = self.partial_json.get(index, "") + str(
                    get(event_delta, "partial_json", "")
                )
        elif kind == "message_delta":
            for key, value in (jsonable(get(event, "delta", {})) or {}).items():
                self.message[key] = value
            self.usage.update(
                {
                    k: v
                    for k, v in (jsonable(get(event, "usage", {})) or {}).items()
                    if v is not None
                }
            )
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise PollardError(
                f"the Anthropic stream reported an error: {get(get(event, 'error'), 'message')}",
                hint="inspect the provider error; nothing was settled for this stream",
            )
        return ""

    def result(self) -> Result:
        content = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            if block.get("type") == "tool_use" and index in self.partial_json:
                text = self.partial_json[index]
                try:
                    block["input"] = json.loads(text) if text.strip() else {}
                except ValueError:
                    block["input"] = text
            content.append(block)
        message = {**self.message, "content": content, "usage": self.usage}
        return normalize_message(message)


def _unterminated() -> PollardError:
    return PollardError(
        "the Anthropic stream ended without message_stop",
        hint="the call may have been cut off; retry it, or record it as failed",
    )


def _count_request(defaults: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    request = merge_payload(defaults, payload)
    return {key: value for key, value in request.items() if key in COUNT_TOKENS_FIELDS}


class AnthropicMessagesFn:
    """A Messages API step function that is also a ``TokenMeter`` estimator.

    Build it with :func:`make_messages_fn`.
    """

    def __init__(self, client: Any, *, stream: bool = False, **defaults: Any) -> None:
        self.client = client
        self.stream = stream
        self.defaults = dict(defaults)

    def __call__(self, payload: Mapping[str, Any]) -> Any:
        """Call ``messages.create``; a result dict, or a chunk iterator when streaming."""
        request = merge_payload(self.defaults, payload)
        if not self.stream:
            return normalize_message(self.client.messages.create(**request))
        return self._stream(self.client.messages.create(**request, stream=True))

    @staticmethod
    def _stream(events: Any) -> Iterator[dict[str, Any]]:
        return stream_chunks(events, _StreamState(), _unterminated)

    def estimate_input_tokens(self, payload: Mapping[str, Any]) -> int:
        """Ask ``client.messages.count_tokens`` how many input tokens the payload would use.

        This makes one request to Anthropic per precheck.
        """
        counted = self.client.messages.count_tokens(**_count_request(self.defaults, payload))
        return tokens(get(counted, "input_tokens"))


class AsyncAnthropicMessagesFn:
    """Async form of :class:`AnthropicMessagesFn` for an ``anthropic.AsyncAnthropic`` client.

    It is not an estimator: ``TokenMeter`` prechecks are synchronous.
    """

    def __init__(self, client: Any, *, stream: bool = False, **defaults: Any) -> None:
        self.client = client
        self.stream = stream
        self.defaults = dict(defaults)

    def __call__(self, payload: Mapping[str, Any]) -> Any:
        """Return an awaitable result, or an async chunk iterator when streaming."""
        request = merge_payload(self.defaults, payload)
        if self.stream:
            return self._stream(request)
        return self._call(request)

    async def _call(self, request: dict[str, Any]) -> Result:
        return normalize_message(await self.client.messages.create(**request))

    async def _stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        events = await self.client.messages.create(**request, stream=True)
        async for chunk in astream_chunks(events, _StreamState(), _unterminated):
            yield chunk


def make_messages_fn(client: Any, *, stream: bool = False, **defaults: Any) -> AnthropicMessagesFn:
    """Return a step function (and estimator) that calls ``client.messages.create``.

    Args:
        client: An ``anthropic.Anthropic`` client (or a Bedrock/Vertex-configured one).
        stream: Stream the message as ``{"delta": ...}`` chunks ending with ``{"result": ...}``.
        **defaults: Request fields merged under every payload (``model=``, ``max_tokens=``...).

    Returns:
        An :class:`AnthropicMessagesFn`: call it with a payload, or pass it to ``TokenMeter``.
    """
    return AnthropicMessagesFn(client, stream=stream, **defaults)


def make_async_messages_fn(
    client: Any, *, stream: bool = False, **defaults: Any
) -> AsyncAnthropicMessagesFn:
    """Async form of :func:`make_messages_fn` for an ``anthropic.AsyncAnthropic`` client."""
    return AsyncAnthropicMessagesFn(client, stream=stream, **defaults)
