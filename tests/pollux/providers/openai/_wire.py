"""Wire fixtures built from the SDK's own types (validated, so they match the real schema)."""

from __future__ import annotations

from typing import Any

from openai.types.responses import Response


def usage(
    input_tokens: int = 10, output_tokens: int = 5, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def message(text: str, *, annotations: list[Any] | None = None, item_id: str = "msg_1") -> dict:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": annotations or []}],
    }


def refusal(text: str) -> dict[str, Any]:
    return {
        "id": "msg_r",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": text}],
    }


def reasoning(*summaries: str, item_id: str = "rs_1") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": s} for s in summaries],
    }


def function_call(call_id: str, name: str, arguments: str, item_id: str = "fc_1") -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def response_dict(
    output: list[dict[str, Any]],
    *,
    status: str = "completed",
    incomplete: str | None = None,
    usage_: dict[str, Any] | None = None,
    response_id: str = "resp_1",
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-5-nano",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage_ if usage_ is not None else usage(),
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "error": error,
    }


def response(output: list[dict[str, Any]], **kwargs: Any) -> Response:
    return Response.model_validate(response_dict(output, **kwargs))
