"""OpenAI adapter (``pip install "pollard[openai]"``): the Responses and Chat Completions APIs.

Pass the client you built (``openai.OpenAI()``, ``AsyncOpenAI()``, or an Azure-configured client);
the adapter calls ``client.responses.create`` or ``client.chat.completions.create`` with the step
payload merged over the adapter's defaults (the private ``_pollard`` key is dropped)::

    fn = make_responses_fn(OpenAI(), model="gpt-5.5")
    node = run.model_call({"input": "Summarize: ..."}, fn=fn)
    node.result["text"], node.result["usage"]["input_tokens"]

With ``stream=True`` the function returns an iterator of chunks that the runtime forwards to
``on_delta`` and settles once at the end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

from pollard.errors import PollardError

from ._common import (
    Result,
    delta,
    final,
    get,
    jsonable,
    make_result,
    merge_payload,
    parse_arguments,
    tokens,
)

__all__ = [
    "ChatStreamAccumulator",
    "astream_chat_chunks",
    "make_async_chat_completions_fn",
    "make_async_responses_fn",
    "make_chat_completions_fn",
    "make_responses_fn",
    "normalize_chat_completion",
    "normalize_response",
    "openai_usage",
    "stream_chat_chunks",
]

StepFn = Callable[[Mapping[str, Any]], Any]
AsyncStepFn = Callable[[Mapping[str, Any]], Any]

_RESPONSE_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def openai_usage(usage: object) -> dict[str, int]:
    """Normalize an OpenAI usage object (Responses or Chat Completions) to pollard's fields."""
    if usage is None:
        return {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
        }
    if get(usage, "input_tokens") is not None or get(usage, "prompt_tokens") is None:
        input_details = get(usage, "input_tokens_details")
        output_details = get(usage, "output_tokens_details")
        input_tokens = tokens(get(usage, "input_tokens"))
        output_tokens = tokens(get(usage, "output_tokens"))
    else:
        input_details = get(usage, "prompt_tokens_details")
        output_details = get(usage, "completion_tokens_details")
        input_tokens = tokens(get(usage, "prompt_tokens"))
        output_tokens = tokens(get(usage, "completion_tokens"))
    # OpenAI's input count already includes cached tokens, and its output count includes
    # reasoning: the details are breakdowns. LiteLLM adds Anthropic-style cache fields.
    cache_read = tokens(get(input_details, "cached_tokens")) or tokens(
        get(usage, "cache_read_input_tokens")
    )
    cache_write = tokens(get(input_details, "cache_write_tokens")) or tokens(
        get(usage, "cache_creation_input_tokens")
    )
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": tokens(get(output_details, "reasoning_tokens")),
    }


def _result(
    text: str,
    tool_calls: list[dict[str, Any]],
    usage: object,
    stop_reason: object,
    raw: object,
) -> Result:
    return make_result(
        text=text,
        tool_calls=tool_calls,
        **openai_usage(usage),
        provider_usage=usage,
        stop_reason=stop_reason,
        raw=raw,
    )


# -- Responses API ----------------------------------------------------------------------------


def normalize_response(response: object) -> Result:
    """Normalize a Responses API response (an SDK object or its wire dict).

    The text comes from ``response.output``. An object without ``output`` (a wrapper, a proxy,
    an SDK version that moved it) is read through its ``model_dump()``, then its ``output_text``;
    one with none of these is an error, never an empty answer.

    Raises:
        PollardError: If the response has neither ``output`` nor ``output_text``.
    """
    output = get(response, "output")
    source: object = response
    if output is None:
        dump = getattr(response, "model_dump", None)
        dumped = dump() if callable(dump) and not isinstance(response, type) else None
        if isinstance(dumped, Mapping) and dumped.get("output") is not None:
            source, output = dumped, dumped["output"]
        else:
            text = get(response, "output_text")
            if text is None and isinstance(dumped, Mapping):
                text = dumped.get("output_text")
            if not isinstance(text, str):
                raise PollardError(
                    f"the Responses API result ({type(response).__name__}) has neither "
                    "`output` nor `output_text`, so it holds no answer to record",
                    hint="pass fn=make_responses_fn(client) the object client.responses.create() "
                    "returns, or a dict with an 'output' list",
                )
            usage = get(response, "usage")
            if usage is None and isinstance(dumped, Mapping):
                usage = dumped.get("usage")
            return _result(text, [], usage, get(response, "status"), response)
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for item in output:
        kind = get(item, "type")
        if kind == "message":
            for part in get(item, "content", []):
                if get(part, "type") == "output_text":
                    texts.append(str(get(part, "text", "")))
        elif kind == "function_call":
            tool_calls.append(
                {
                    "id": get(item, "call_id") or get(item, "id"),
                    "name": get(item, "name"),
                    "arguments": parse_arguments(get(item, "arguments")),
                }
            )
    details = get(source, "incomplete_details")
    stop = get(details, "reason") or get(source, "status")
    return _result("".join(texts), tool_calls, get(source, "usage"), stop, response)


def _response_events(events: Iterator[Any], pieces: list[str]) -> Iterator[dict[str, Any]]:
    for event in events:
        kind = get(event, "type")
        if kind == "response.output_text.delta":
            piece = str(get(event, "delta", ""))
            pieces.append(piece)
            yield delta(piece)
        elif kind in _RESPONSE_TERMINAL:
            yield final(normalize_response(get(event, "response")))
            return
        elif kind == "error":
            raise PollardError(
                f"the OpenAI stream reported an error: {get(event, 'message', 'unknown')}",
                hint="inspect the provider error; nothing was settled for this stream",
            )
    raise _unterminated("response.completed")


def _unterminated(event: str) -> PollardError:
    return PollardError(
        f"the provider stream ended without its terminal event ({event})",
        hint="the call may have been cut off; retry it, or record it as failed",
    )


def _close(stream: object) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        close()


async def _aclose(stream: object) -> None:
    close = getattr(stream, "close", None) or getattr(stream, "aclose", None)
    if callable(close):
        outcome = close()
        if isinstance(outcome, Awaitable):
            await outcome


def make_responses_fn(client: Any, *, stream: bool = False, **defaults: Any) -> StepFn:
    """Return a step function that calls ``client.responses.create``.

    Args:
        client: An ``openai.OpenAI`` (or Azure OpenAI) client.
        stream: Stream the response: the function returns an iterator of ``{"delta": ...}`` chunks
            ending with ``{"result": ...}``.
        **defaults: Request fields merged under every payload (for example ``model=``). They are
            not part of the node identity; put what must be in the identity in the payload.

    Returns:
        ``fn(payload) -> result`` (or a chunk iterator when streaming) for ``run.model_call``.
    """

    def call(payload: Mapping[str, Any]) -> Any:
        request = merge_payload(defaults, payload)
        if not stream:
            return normalize_response(client.responses.create(**request))
        return _stream_responses(client.responses.create(**request, stream=True))

    return call


def _stream_responses(events: Any) -> Iterator[dict[str, Any]]:
    try:
        yield from _response_events(iter(events), [])
    finally:
        _close(events)


def make_async_responses_fn(client: Any, *, stream: bool = False, **defaults: Any) -> AsyncStepFn:
    """Async form of :func:`make_responses_fn` for an ``openai.AsyncOpenAI`` client.

    The returned function is a coroutine function, or, with ``stream=True``, a function returning
    an async iterator of chunks (for ``AsyncRun.amodel_call``).
    """

    async def call(payload: Mapping[str, Any]) -> Result:
        request = merge_payload(defaults, payload)
        return normalize_response(await client.responses.create(**request))

    def call_stream(payload: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        request = merge_payload(defaults, payload)
        return _astream_responses(client, request)

    return call_stream if stream else call


async def _astream_responses(client: Any, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    events = await client.responses.create(**request, stream=True)
    try:
        async for event in events:
            kind = get(event, "type")
            if kind == "response.output_text.delta":
                yield delta(str(get(event, "delta", "")))
            elif kind in _RESPONSE_TERMINAL:
                yield final(normalize_response(get(event, "response")))
                return
            elif kind == "error":
                raise PollardError(
                    f"the OpenAI stream reported an error: {get(event, 'message', 'unknown')}",
                    hint="inspect the provider error; nothing was settled for this stream",
                )
        raise _unterminated("response.completed")
    finally:
        await _aclose(events)


# -- Chat Completions -------------------------------------------------------------------------


def normalize_chat_completion(completion: object) -> Result:
    """Normalize a Chat Completions response (SDK object, LiteLLM ModelResponse or wire dict)."""
    choices = get(completion, "choices", [])
    choice = choices[0] if choices else None
    message = get(choice, "message")
    content = get(message, "content", "")
    text = content if isinstance(content, str) else ""
    tool_calls = [
        {
            "id": get(call, "id"),
            "name": get(get(call, "function"), "name"),
            "arguments": parse_arguments(get(get(call, "function"), "arguments")),
        }
        for call in get(message, "tool_calls", [])
    ]
    return _result(
        text, tool_calls, get(completion, "usage"), get(choice, "finish_reason"), completion
    )


class ChatStreamAccumulator:
    """Assembles Chat Completions stream chunks into one normalized result.

    Text deltas concatenate; tool-call fragments are joined by their ``index``; the usage chunk
    that ``stream_options={"include_usage": True}`` adds at the end is kept.
    """

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: object = None
        self.finish_reason: object = None
        self.meta: dict[str, Any] = {}

    def add(self, chunk: object) -> str:
        """Fold one chunk in; return its text piece ('' when it carries none)."""
        for key in ("id", "model", "created"):
            if get(chunk, key) is not None:
                self.meta.setdefault(key, jsonable(get(chunk, key)))
        if get(chunk, "usage") is not None:
            self.usage = get(chunk, "usage")
        piece = ""
        for choice in get(chunk, "choices", []):
            if get(choice, "finish_reason") is not None:
                self.finish_reason = get(choice, "finish_reason")
            chunk_delta = get(choice, "delta")
            content = get(chunk_delta, "content")
            if isinstance(content, str):
                piece += content
            for fragment in get(chunk_delta, "tool_calls", []):
                index = tokens(get(fragment, "index"))
                call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
                call["id"] = call["id"] or get(fragment, "id")
                function = get(fragment, "function")
                call["name"] += str(get(function, "name", ""))
                call["arguments"] += str(get(function, "arguments", ""))
        self.text.append(piece)
        return piece

    def result(self) -> Result:
        """The normalized result of everything folded in so far."""
        text = "".join(self.text)
        calls = [self.calls[index] for index in sorted(self.calls)]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in calls
            ]
        raw = {
            **self.meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": jsonable(self.usage),
        }
        tool_calls = [
            {"id": c["id"], "name": c["name"], "arguments": parse_arguments(c["arguments"])}
            for c in calls
        ]
        return _result(text, tool_calls, self.usage, self.finish_reason, raw)


def _stream_request(request: dict[str, Any]) -> dict[str, Any]:
    options = dict(request.get("stream_options") or {})
    options.setdefault("include_usage", True)
    return {**request, "stream": True, "stream_options": options}


def make_chat_completions_fn(client: Any, *, stream: bool = False, **defaults: Any) -> StepFn:
    """Return a step function that calls ``client.chat.completions.create``.

    Works with OpenAI, Azure OpenAI and any OpenAI-compatible server through the OpenAI client.
    Streaming asks for ``stream_options.include_usage`` so the settled charge is the provider's.

    Args:
        client: An ``openai.OpenAI``-compatible client.
        stream: Stream the completion as ``{"delta": ...}`` chunks ending with ``{"result": ...}``.
        **defaults: Request fields merged under every payload.

    Returns:
        ``fn(payload)`` for ``run.model_call``.
    """

    def call(payload: Mapping[str, Any]) -> Any:
        request = merge_payload(defaults, payload)
        if not stream:
            return normalize_chat_completion(client.chat.completions.create(**request))
        return stream_chat_chunks(client.chat.completions.create(**_stream_request(request)))

    return call


def stream_chat_chunks(chunks: Any) -> Iterator[dict[str, Any]]:
    """Turn a Chat Completions chunk stream into pollard chunks (closing it at the end)."""
    accumulator = ChatStreamAccumulator()
    try:
        for chunk in chunks:
            piece = accumulator.add(chunk)
            if piece:
                yield delta(piece)
        yield final(accumulator.result())
    finally:
        _close(chunks)


async def astream_chat_chunks(chunks: Any) -> AsyncIterator[dict[str, Any]]:
    """Async form of :func:`stream_chat_chunks`."""
    accumulator = ChatStreamAccumulator()
    try:
        async for chunk in chunks:
            piece = accumulator.add(chunk)
            if piece:
                yield delta(piece)
        yield final(accumulator.result())
    finally:
        await _aclose(chunks)


def make_async_chat_completions_fn(
    client: Any, *, stream: bool = False, **defaults: Any
) -> AsyncStepFn:
    """Async form of :func:`make_chat_completions_fn` for an ``openai.AsyncOpenAI`` client."""

    async def call(payload: Mapping[str, Any]) -> Result:
        request = merge_payload(defaults, payload)
        return normalize_chat_completion(await client.chat.completions.create(**request))

    async def call_stream_gen(request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        chunks = await client.chat.completions.create(**_stream_request(request))
        async for item in astream_chat_chunks(chunks):
            yield item

    def call_stream(payload: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        return call_stream_gen(merge_payload(defaults, payload))

    return call_stream if stream else call
