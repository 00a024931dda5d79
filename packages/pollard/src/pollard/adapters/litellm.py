"""LiteLLM adapter (``pip install "pollard[litellm]"``): ``completion`` and ``acompletion``.

LiteLLM returns Chat Completions-shaped responses for every route (Vertex AI, Bedrock, Azure, local
servers...), so the result is normalized exactly like the OpenAI Chat Completions adapter::

    fn = make_completion_fn(model="vertex_ai/gemini-2.5-flash")   # litellm.completion by default
    node = run.model_call({"messages": [{"role": "user", "content": "Hi"}]}, fn=fn)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from ._common import Result, merge_payload
from .openai import astream_chat_chunks, normalize_chat_completion, stream_chat_chunks

__all__ = ["make_async_completion_fn", "make_completion_fn"]


def _litellm(name: str) -> Callable[..., Any]:
    try:
        import litellm
    except ImportError as exc:
        raise ImportError(
            f'the LiteLLM adapter needs litellm for litellm.{name}: pip install "pollard[litellm]"'
            " (or pass your own completion function)"
        ) from exc
    function: Callable[..., Any] = getattr(litellm, name)
    return function


def _stream_request(request: dict[str, Any]) -> dict[str, Any]:
    options = dict(request.get("stream_options") or {})
    options.setdefault("include_usage", True)
    return {**request, "stream": True, "stream_options": options}


def make_completion_fn(
    completion: Callable[..., Any] | None = None, *, stream: bool = False, **defaults: Any
) -> Callable[[Mapping[str, Any]], Any]:
    """Return a step function that calls ``completion(**payload)``.

    Args:
        completion: ``litellm.completion`` or a compatible callable; imported lazily when None.
        stream: Stream the completion (usage requested through ``stream_options``).
        **defaults: Request fields merged under every payload (``model=``...).

    Returns:
        ``fn(payload)`` for ``run.model_call``.

    Raises:
        ImportError: When ``completion`` is None and litellm is not installed.
    """
    complete = completion if completion is not None else _litellm("completion")

    def call(payload: Mapping[str, Any]) -> Any:
        request = merge_payload(defaults, payload)
        if not stream:
            return normalize_chat_completion(complete(**request))
        return stream_chat_chunks(complete(**_stream_request(request)))

    return call


def make_async_completion_fn(
    acompletion: Callable[..., Any] | None = None, *, stream: bool = False, **defaults: Any
) -> Callable[[Mapping[str, Any]], Any]:
    """Async form of :func:`make_completion_fn` (``litellm.acompletion`` by default)."""
    complete = acompletion if acompletion is not None else _litellm("acompletion")

    async def call(payload: Mapping[str, Any]) -> Result:
        return normalize_chat_completion(await complete(**merge_payload(defaults, payload)))

    async def call_stream_gen(request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        chunks = await complete(**_stream_request(request))
        async for item in astream_chat_chunks(chunks):
            yield item

    def call_stream(payload: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        return call_stream_gen(merge_payload(defaults, payload))

    return call_stream if stream else call
