"""Streaming: Responses events -> neutral chunks that assemble to exactly the extracted response."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from pollux.errors import APIError
from pollux.providers.base import ProviderResponse, StreamChunk
from pollux.providers.openai.extract import extract_response
from pollux.providers.openai.stream import ResponsesStreamMapper

from . import _wire as w

_EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


class _Seq:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, payload: dict[str, Any]) -> Any:
        self.n += 1
        return _EVENTS.validate_python({**payload, "sequence_number": self.n})


def _text(seq: _Seq, delta: str, output_index: int = 1) -> Any:
    return seq(
        {
            "type": "response.output_text.delta",
            "delta": delta,
            "item_id": "msg_1",
            "output_index": output_index,
            "content_index": 0,
            "logprobs": [],
        }
    )


def _summary(seq: _Seq, delta: str, summary_index: int) -> Any:
    return seq(
        {
            "type": "response.reasoning_summary_text.delta",
            "delta": delta,
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": summary_index,
        }
    )


def _args(seq: _Seq, delta: str, output_index: int) -> Any:
    return seq(
        {
            "type": "response.function_call_arguments.delta",
            "delta": delta,
            "item_id": f"fc_{output_index}",
            "output_index": output_index,
        }
    )


def _item(seq: _Seq, kind: str, item: dict[str, Any], output_index: int) -> Any:
    return seq({"type": kind, "item": item, "output_index": output_index})


def _terminal(seq: _Seq, kind: str, response: dict[str, Any]) -> Any:
    return seq({"type": kind, "response": response})


def assemble(chunks: list[StreamChunk]) -> dict[str, Any]:
    """What the engine builds from chunks (concatenation per facet, last value wins)."""
    calls: dict[int, dict[str, str]] = {}
    result: dict[str, Any] = {"text": "", "reasoning": "", "usage": None, "finish": None}
    for chunk in chunks:
        result["text"] += chunk.text
        result["reasoning"] += chunk.reasoning
        for delta in chunk.tool_call_deltas:
            slot = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = delta.id or slot["id"]
            slot["name"] = delta.name or slot["name"]
            slot["arguments"] += delta.arguments
        if chunk.usage is not None:
            result["usage"] = chunk.usage
        if chunk.finish_reason is not None:
            result["finish"] = chunk.finish_reason
        if chunk.response_id is not None:
            result["id"] = chunk.response_id
        if chunk.artifacts is not None:
            result["artifacts"] = chunk.artifacts
    result["calls"] = [calls[i] for i in sorted(calls)]
    return result


def expected(response: ProviderResponse) -> dict[str, Any]:
    return {
        "text": response.text,
        "reasoning": response.reasoning or "",
        "usage": response.usage,
        "finish": response.finish_reason,
        "id": response.response_id,
        "calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments_text} for c in response.tool_calls
        ],
        **({"artifacts": response.artifacts} if response.artifacts else {}),
    }


def run(events: list[Any]) -> list[StreamChunk]:
    mapper = ResponsesStreamMapper()
    chunks = [c for c in (mapper.feed(e) for e in events) if c is not None]
    mapper.finish()
    return chunks


def test_text_and_reasoning_stream_equals_the_extracted_response() -> None:
    seq = _Seq()
    final = w.response_dict(
        [w.reasoning("Plan A.", "Plan B."), w.message("Hello world")],
        usage_=w.usage(50, 9, cached=32, reasoning=4),
        response_id="resp_s1",
    )
    events = [
        seq({"type": "response.created", "response": {**final, "status": "in_progress"}}),
        _summary(seq, "Plan ", 0),
        _summary(seq, "A.", 0),
        _summary(seq, "Plan B.", 1),
        _text(seq, "Hello "),
        _text(seq, "world"),
        _terminal(seq, "response.completed", final),
    ]
    chunks = run(events)
    assert [c.reasoning for c in chunks if c.reasoning] == ["Plan ", "A.", "\n\nPlan B."]
    assert [c.text for c in chunks if c.text] == ["Hello ", "world"]
    assert assemble(chunks) == expected(extract_response(final))
    last = chunks[-1]
    assert last.usage is not None and last.usage.cached_tokens == 32
    assert last.finish_reason == "stop"


def test_tool_call_fragments_assemble_to_the_calls() -> None:
    seq = _Seq()
    call_a = w.function_call("call_a", "lookup", '{"q": "oslo"}', item_id="fc_0")
    call_b = w.function_call("call_b", "fetch", '{"id": 7}', item_id="fc_1")
    final = w.response_dict([call_a, call_b], response_id="resp_t")
    events = [
        _item(seq, "response.output_item.added", {**call_a, "arguments": ""}, 0),
        _args(seq, '{"q": ', 0),
        _args(seq, '"oslo"}', 0),
        _item(seq, "response.output_item.done", call_a, 0),
        _item(seq, "response.output_item.added", {**call_b, "arguments": ""}, 1),
        # No argument deltas for this call: the done item supplies them.
        _item(seq, "response.output_item.done", call_b, 1),
        _terminal(seq, "response.completed", final),
    ]
    chunks = run(events)
    deltas = [d for c in chunks for d in c.tool_call_deltas]
    assert (deltas[0].index, deltas[0].id, deltas[0].name) == (0, "call_a", "lookup")
    assert [d.arguments for d in deltas if d.index == 0] == ["", '{"q": ', '"oslo"}']
    assert [d.arguments for d in deltas if d.index == 1] == ["", '{"id": 7}']
    assembled = assemble(chunks)
    assert assembled == expected(extract_response(final))
    assert assembled["finish"] == "tool_calls"


def test_incomplete_stream_reports_truncation() -> None:
    seq = _Seq()
    final = w.response_dict([w.message("cut")], status="incomplete", incomplete="max_output_tokens")
    chunks = run([_text(seq, "cut", 0), _terminal(seq, "response.incomplete", final)])
    assert chunks[-1].finish_reason == "max_tokens"


def test_stream_cut_before_completion_raises_retryable() -> None:
    seq = _Seq()
    mapper = ResponsesStreamMapper()
    mapper.feed(_text(seq, "partial", 0))
    with pytest.raises(APIError) as info:
        mapper.finish()
    assert info.value.retryable is True
    assert info.value.error_category == "stream_cut"
    assert info.value.hint


def test_error_event_raises() -> None:
    seq = _Seq()
    mapper = ResponsesStreamMapper()
    with pytest.raises(APIError) as info:
        mapper.feed(seq({"type": "error", "code": "server_error", "message": "boom"}))
    assert "boom" in str(info.value)
    assert info.value.phase == "stream"


def test_failed_event_raises_with_the_response_error() -> None:
    seq = _Seq()
    failed = w.response_dict(
        [], status="failed", error={"code": "server_error", "message": "overloaded"}
    )
    mapper = ResponsesStreamMapper()
    with pytest.raises(APIError) as info:
        mapper.feed(_terminal(seq, "response.failed", failed))
    assert "overloaded" in str(info.value)
    assert info.value.retryable is True


def test_unknown_events_are_ignored() -> None:
    seq = _Seq()
    mapper = ResponsesStreamMapper()
    event = seq(
        {
            "type": "response.content_part.added",
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        }
    )
    assert mapper.feed(event) is None


def test_terminal_event_fills_in_what_the_deltas_missed() -> None:
    seq = _Seq()
    final = w.response_dict(
        [
            w.reasoning("Quietly."),
            w.message("Full answer"),
            w.function_call("call_z", "f", '{"k": 1}', item_id="fc_9"),
        ],
        response_id="resp_q",
    )
    # A server that sends a partial text delta and then only the terminal event.
    chunks = run([_text(seq, "Full ", 1), _terminal(seq, "response.completed", final)])
    assert assemble(chunks) == expected(extract_response(final))
    assert chunks[-1].text == "answer"


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if text[a:b]]


_words = st.text(alphabet='abc xyz{}:"é', min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    summaries=st.lists(_words, max_size=3),
    texts=st.lists(_words, max_size=3),
    calls=st.lists(_words, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=20), max_size=4),
    skip_some=st.booleans(),
)
def test_any_delta_split_assembles_to_the_extraction(
    summaries: list[str], texts: list[str], calls: list[str], cuts: list[int], skip_some: bool
) -> None:
    seq = _Seq()
    output: list[dict[str, Any]] = []
    events: list[Any] = []
    if summaries:
        output.append(w.reasoning(*summaries))
        for index, summary in enumerate(summaries):
            events += [_summary(seq, piece, index) for piece in _split(summary, cuts)]
    last = len(output) + len(texts) - 1  # output position of the last text message
    for position, text in enumerate(texts, start=len(output)):
        output.append(w.message(text, item_id=f"msg_{position}"))
        pieces = _split(text, cuts)
        if skip_some and position == last and not calls:
            # Deltas missing at the end of the text: the terminal event makes up for them.
            pieces = pieces[:1]
        events += [_text(seq, piece, position) for piece in pieces]
    for n, arguments in enumerate(calls):
        position = len(output)
        item = w.function_call(f"call_{n}", "tool", arguments, item_id=f"fc_{position}")
        output.append(item)
        events.append(_item(seq, "response.output_item.added", {**item, "arguments": ""}, position))
        events += [_args(seq, piece, position) for piece in _split(arguments, cuts)]
    final = w.response_dict(output, response_id="resp_h")
    events.append(_terminal(seq, "response.completed", final))
    assert assemble(run(events)) == expected(extract_response(final))
