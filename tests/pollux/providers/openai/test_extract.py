"""Response extraction: SDK ``Response`` objects (and their JSON) -> neutral ProviderResponse."""

from __future__ import annotations

import pytest

from pollux.errors import APIError, ContextOverflowError
from pollux.providers.openai.extract import extract_response

from . import _wire as w


def test_text_reasoning_usage_and_id() -> None:
    response = w.response(
        [w.reasoning("First I think.", "Then I answer."), w.message("Hello "), w.message("world")],
        usage_=w.usage(120, 40, cached=100, reasoning=25),
        response_id="resp_42",
    )
    out = extract_response(response)
    assert out.text == "Hello world"
    assert out.reasoning == "First I think.\n\nThen I answer."
    assert out.response_id == "resp_42"
    assert out.finish_reason == "stop"
    assert out.tool_calls == ()
    assert out.usage is not None
    assert (out.usage.input_tokens, out.usage.output_tokens, out.usage.total_tokens) == (
        120,
        40,
        160,
    )
    assert out.usage.cached_tokens == 100
    assert out.usage.reasoning_tokens == 25


def test_sdk_object_and_json_dict_extract_identically() -> None:
    items = [w.reasoning("r"), w.message("t"), w.function_call("call_1", "f", '{"a": 1}')]
    assert extract_response(w.response(items)) == extract_response(w.response_dict(items))


def test_function_calls_become_indexed_tool_calls() -> None:
    out = extract_response(
        w.response(
            [
                w.function_call("call_a", "lookup", '{"q": "x"}', item_id="fc_1"),
                w.function_call("call_b", "lookup", "not json", item_id="fc_2"),
            ]
        )
    )
    assert out.finish_reason == "tool_calls"
    first, second = out.tool_calls
    assert (first.id, first.name, first.arguments, first.index) == (
        "call_a",
        "lookup",
        {"q": "x"},
        0,
    )
    assert second.index == 1
    assert second.arguments is None
    assert second.arguments_error  # malformed JSON is kept and explained, not dropped


def test_truncation_by_max_output_tokens_is_reported() -> None:
    out = extract_response(
        w.response([w.message("partial")], status="incomplete", incomplete="max_output_tokens")
    )
    assert out.finish_reason == "max_tokens"
    assert out.text == "partial"


def test_content_filter_incomplete() -> None:
    out = extract_response(w.response([], status="incomplete", incomplete="content_filter"))
    assert out.finish_reason == "content_filter"


def test_refusal_is_text_with_a_refusal_finish_reason() -> None:
    out = extract_response(w.response([w.refusal("I can't help with that.")]))
    assert out.text == "I can't help with that."
    assert out.finish_reason == "refusal"
    assert out.artifacts == {"refusal": "I can't help with that."}


def test_annotations_are_kept_as_artifacts() -> None:
    citation = {
        "type": "url_citation",
        "url": "https://example.com",
        "title": "Example",
        "start_index": 0,
        "end_index": 4,
    }
    out = extract_response(w.response([w.message("Text", annotations=[citation])]))
    assert out.artifacts == {"annotations": [citation]}


def test_missing_usage_is_none_and_missing_details_are_none() -> None:
    raw = w.response_dict([w.message("x")])
    raw["usage"] = None
    assert extract_response(raw).usage is None
    raw["usage"] = {"input_tokens": 3, "output_tokens": 2}
    usage = extract_response(raw).usage
    assert usage is not None
    assert (usage.total_tokens, usage.cached_tokens, usage.reasoning_tokens) == (5, None, None)


def test_failed_response_raises() -> None:
    raw = w.response_dict(
        [], status="failed", error={"code": "server_error", "message": "The server had an error"}
    )
    with pytest.raises(APIError) as info:
        extract_response(raw)
    assert info.value.retryable is True
    assert info.value.provider == "openai"
    assert info.value.hint


def test_failed_response_with_context_overflow() -> None:
    raw = w.response_dict(
        [], status="failed", error={"code": "context_length_exceeded", "message": "too long"}
    )
    with pytest.raises(ContextOverflowError):
        extract_response(raw)
