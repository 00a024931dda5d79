"""A deterministic offline model function for pollard examples (no provider, no network).

``call_model(payload)`` returns pollard's result contract: ``text`` plus ``usage`` with input and
output tokens, counted from the words of the messages so budgets have something real to count.
"""

from __future__ import annotations

from typing import Any


def call_model(payload: dict[str, Any]) -> dict[str, Any]:
    """Answer with a fixed text and word-count usage."""
    words = sum(
        len(str(message.get("content", "")).split())
        for message in payload.get("messages", [])
        if isinstance(message, dict)
    )
    text = f"mock answer to {words} words"
    return {
        "text": text,
        "tool_calls": [],
        "usage": {"input_tokens": words + 4, "output_tokens": len(text.split())},
    }


if __name__ == "__main__":
    print(call_model({"model": "mock-1", "messages": [{"role": "user", "content": "hello"}]}))
