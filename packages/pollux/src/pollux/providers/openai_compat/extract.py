"""Chat Completions responses and stream chunks into neutral pollux values.

The non-streaming and streaming paths build the same :class:`ProviderResponse` for the same
answer: tool calls come from :meth:`ToolCall.from_text` in both (never the raw wire dict), and
usage from :func:`usage_from`. That is what lets ``stream()``'s ``done.output`` equal
``interact()``'s output.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pollux.interaction.output import Usage
from pollux.interaction.tools import ToolCall, ToolCallDelta
from pollux.providers.base import ProviderResponse, StreamChunk

__all__ = ["chunk_from", "response_from", "usage_from"]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_from(data: Any) -> Usage | None:
    """Normalize an OpenAI-style ``usage`` object (cached and reasoning tokens are subsets)."""
    if not isinstance(data, Mapping):
        return None
    prompt = _int(data.get("prompt_tokens")) or 0
    completion = _int(data.get("completion_tokens")) or 0
    total = _int(data.get("total_tokens"))
    prompt_details = data.get("prompt_tokens_details")
    completion_details = data.get("completion_tokens_details")
    cached = (
        _int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, Mapping) else None
    )
    reasoning = (
        _int(completion_details.get("reasoning_tokens"))
        if isinstance(completion_details, Mapping)
        else None
    )
    # Cache writes: OpenRouter reports ``prompt_tokens_details.cache_write_tokens``; gateways
    # in front of Anthropic models may pass ``cache_creation_input_tokens`` through.
    writes = (
        _int(prompt_details.get("cache_write_tokens"))
        if isinstance(prompt_details, Mapping)
        else None
    )
    if writes is None:
        writes = _int(data.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=total if total is not None else prompt + completion,
        reasoning_tokens=reasoning,
        cached_tokens=cached,
        cache_write_tokens=writes,
        provider_cost_usd=_cost(data.get("cost")),
    )


def _cost(value: Any) -> Decimal | None:
    """OpenRouter's ``usage.cost`` (credits, which are US dollars) as an exact amount."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        amount = Decimal(str(value))
    except ArithmeticError:
        return None
    # A malformed figure is dropped (and the computed price stands), never trusted as the bill.
    return amount if amount.is_finite() and amount >= 0 else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") in ("text", "output_text")
        )
    return ""


def _reasoning(message: Mapping[str, Any]) -> str | None:
    value = message.get("reasoning_content")
    if not isinstance(value, str) or not value:
        value = message.get("reasoning")
    return value if isinstance(value, str) and value else None


def response_from(data: Mapping[str, Any]) -> ProviderResponse:
    """A complete (non-streaming) Chat Completions response."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, Mapping) else None
    message = message if isinstance(message, Mapping) else {}
    calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls")
    if isinstance(raw_calls, list):
        for position, raw in enumerate(raw_calls):
            if not isinstance(raw, Mapping):
                continue
            function = raw.get("function")
            function = function if isinstance(function, Mapping) else {}
            arguments = function.get("arguments") or ""
            calls.append(
                ToolCall.from_text(
                    id=str(raw.get("id") or f"call_{position}"),
                    name=str(function.get("name") or ""),
                    arguments_text=arguments if isinstance(arguments, str) else str(arguments),
                    index=position,
                )
            )
    state = _provider_state(message)
    finish = choice.get("finish_reason") if isinstance(choice, Mapping) else None
    response_id = data.get("id")
    return ProviderResponse(
        text=_text(message.get("content")),
        reasoning=_reasoning(message),
        tool_calls=tuple(calls),
        usage=usage_from(data.get("usage")),
        finish_reason=finish if isinstance(finish, str) else None,
        response_id=response_id if isinstance(response_id, str) else None,
        provider_state=state,
    )


def _provider_state(message: Mapping[str, Any]) -> dict[str, Any] | None:
    # OpenRouter returns reasoning_details that must be replayed verbatim with tool calls.
    details = message.get("reasoning_details")
    if isinstance(details, list) and details:
        return {"reasoning_details": details}
    return None


def _tool_deltas(raw_calls: list[Any]) -> tuple[ToolCallDelta, ...]:
    deltas: list[ToolCallDelta] = []
    for position, raw in enumerate(raw_calls):
        if not isinstance(raw, dict):
            continue
        function = raw.get("function")
        function = function if isinstance(function, dict) else {}
        index = raw.get("index")
        call_id = raw.get("id")
        name = function.get("name")
        arguments = function.get("arguments")
        deltas.append(
            ToolCallDelta(
                index=index if isinstance(index, int) else position,
                id=call_id if isinstance(call_id, str) and call_id else None,
                name=name if isinstance(name, str) and name else None,
                arguments=arguments if isinstance(arguments, str) else "",
            )
        )
    return tuple(deltas)


def chunk_from(data: dict[str, Any]) -> StreamChunk:
    """One ``chat.completion.chunk`` (a parsed JSON object).

    This runs once per streamed event, so it sticks to exact ``dict``/``str`` type checks
    (JSON decoding produces nothing else) instead of ABC ``isinstance`` checks.
    """
    choices = data.get("choices")
    delta: Any = None
    finish: Any = None
    if type(choices) is list and choices:
        choice = choices[0]
        if type(choice) is dict:
            delta = choice.get("delta")
            finish = choice.get("finish_reason")
    if type(delta) is not dict:
        delta = _EMPTY
    content = delta.get("content")
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    raw_calls = delta.get("tool_calls")
    usage = data.get("usage")
    response_id = data.get("id")
    details = delta.get("reasoning_details")
    return StreamChunk(
        text=content if type(content) is str else "",
        reasoning=reasoning if type(reasoning) is str else "",
        tool_call_deltas=_tool_deltas(raw_calls) if type(raw_calls) is list else (),
        usage=usage_from(usage) if usage else None,
        finish_reason=finish if type(finish) is str else None,
        response_id=response_id if type(response_id) is str else None,
        provider_state={"reasoning_details": details}
        if type(details) is list and details
        else None,
    )


_EMPTY: dict[str, Any] = {}
