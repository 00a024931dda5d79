"""GeminiStreamMapper on REST JSON chunks: the plain-text fast path equals the full path."""

from __future__ import annotations

from typing import Any

from pollux.providers.gemini.stream import GeminiStreamMapper

USAGE = {"promptTokenCount": 7, "totalTokenCount": 7}


def chunk(*texts: str, usage: dict[str, Any] | None = None, **candidate: Any) -> dict[str, Any]:
    parts = [{"text": text} for text in texts]
    body: dict[str, Any] = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0, **candidate}],
        "usageMetadata": usage or USAGE,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }
    return body


def test_empty_and_repeated_chunks_are_mapped_once() -> None:
    mapper = GeminiStreamMapper()
    first = mapper.feed(chunk("Hel"))
    assert first is not None and first.text == "Hel" and first.response_id == "r1"
    assert first.usage is not None and first.usage.input_tokens == 7
    # Nothing new: an empty text part with the same usage carries nothing (and is kept once).
    assert mapper.feed(chunk("")) is None
    second = mapper.feed(chunk("lo", " there"))
    assert second is not None and second.text == "lo there"
    assert second.usage is None  # the same cumulative usage is not sent again
    last = mapper.feed(
        chunk(
            "!",
            usage={**USAGE, "candidatesTokenCount": 4, "totalTokenCount": 11},
            finishReason="STOP",
        )
    )
    assert last is not None and last.text == "!" and last.usage is not None
    assert last.usage.output_tokens == 4
    final = mapper.finish()
    assert final.finish_reason == "stop"
    state = final.provider_state or {}
    assert state["gemini_content"] == {"role": "model", "parts": [{"text": "Hello there!"}]}
    assert final.artifacts == {"model_version": "gemini-2.5-flash"}
