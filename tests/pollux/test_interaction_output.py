from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from pollux import (
    APIError,
    ConfigurationError,
    ContextOverflowError,
    Continuation,
    DeferredSnapshot,
    Diagnostics,
    Event,
    Metrics,
    Output,
    OutputCollection,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from pollux.interaction import completion_status_for, error_output


class Answer(pydantic.BaseModel):
    value: int
    label: str


def _full_output() -> Output:
    return Output(
        text="The answer is 42.",
        structured={"value": 42, "label": "x"},
        reasoning="thought about it",
        tool_calls=(ToolCall.from_text(id="c1", name="f", arguments_text='{"a": 1}', index=0),),
        continuation=Continuation._create(
            provider="openai", model="gpt", state={"response_id": "r1"}
        ),
        usage=Usage(
            input_tokens=10, output_tokens=5, total_tokens=15, reasoning_tokens=2, cached_tokens=4
        ),
        metrics=Metrics(
            duration_s=1.25,
            n_calls=2,
            cache_used=True,
            cache_mode="implicit",
            cache_hit=True,
            finish_reason="stop",
            completion_status="clean",
        ),
        diagnostics=Diagnostics(raw={"response": {"id": "r1", "artifacts": [1, 2]}}),
    )


# ----------------------------------------------------------------------------- Usage


def test_usage_defaults_and_jsonable() -> None:
    assert Usage().to_jsonable() == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    full = Usage(1, 2, 3, reasoning_tokens=4, cached_tokens=5)
    assert Usage.from_dict(full.to_jsonable()) == full


def test_usage_from_flat_dict() -> None:
    assert Usage.from_dict({"input_tokens": 3, "output_tokens": 4}) == Usage(3, 4, 7)
    with pytest.raises(ConfigurationError):
        Usage.from_dict({"input_tokens": -1})
    with pytest.raises(ConfigurationError):
        Usage.from_dict({"input_tokens": "3"})


@pytest.mark.parametrize(
    "kwargs", [{"input_tokens": -1}, {"output_tokens": 1.5}, {"cached_tokens": True}]
)
def test_usage_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Usage(**kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Metrics


def test_metrics_defaults_and_validation() -> None:
    m = Metrics()
    assert (m.duration_s, m.n_calls, m.cache_used, m.cache_mode, m.cache_hit) == (
        0.0,
        1,
        False,
        "none",
        False,
    )
    assert (m.finish_reason, m.completion_status) == (None, "clean")
    with pytest.raises(ConfigurationError):
        Metrics(completion_status="ok")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Metrics(cache_mode="sometimes")  # type: ignore[arg-type]
    assert Metrics.from_jsonable({}) == Metrics()


@pytest.mark.parametrize(
    ("finish", "category", "status"),
    [
        ("stop", None, "clean"),
        (None, None, "clean"),
        ("max_tokens", None, "truncated"),
        ("length", None, "truncated"),
        ("max_output_tokens", None, "truncated"),
        ("MAX_TOKENS", None, "truncated"),
        ("content_filter", None, "cutoff"),
        ("SAFETY", None, "cutoff"),
        ("recitation", None, "cutoff"),
        ("stop", "context_overflow", "truncated"),
        (None, "rate_limit", "error"),
    ],
)
def test_completion_status_for(finish: str | None, category: str | None, status: str) -> None:
    assert completion_status_for(finish, error_category=category) == status


# ------------------------------------------------------------------------ Diagnostics


def test_diagnostics() -> None:
    assert Diagnostics().raw == {} and Diagnostics().error is None
    assert Diagnostics(raw={"error": {"type": "X"}}).error == {"type": "X"}
    with pytest.raises(ConfigurationError):
        Diagnostics(raw=[1])  # type: ignore[arg-type]
    # Non-JSON values in raw become JSON-compatible when serialized.
    dumped = Diagnostics(
        raw={"t": (1, 2), "b": b"xy", "o": Answer(value=1, label="a")}
    ).to_jsonable()
    assert dumped == {"t": [1, 2], "b": "<2 bytes>", "o": {"value": 1, "label": "a"}}


# ---------------------------------------------------------------------------- Output


def test_output_defaults() -> None:
    out = Output()
    assert (out.text, out.structured, out.reasoning, out.tool_calls, out.continuation) == (
        "",
        None,
        None,
        (),
        None,
    )
    assert out.to_jsonable() == {
        "text": "",
        "usage": Usage().to_jsonable(),
        "metrics": Metrics().to_jsonable(),
    }


def test_output_round_trip_is_faithful() -> None:
    out = _full_output()
    data = json.loads(json.dumps(out.to_jsonable()))
    assert Output.from_jsonable(data) == out
    assert Output.from_jsonable(Output.from_jsonable(data).to_jsonable()) == out


def test_output_structured_pydantic_round_trip() -> None:
    out = Output(text="", structured=Answer(value=1, label="a"))
    data = out.to_jsonable()
    assert data["structured"] == {"value": 1, "label": "a"}
    assert Output.from_jsonable(data).structured == {"value": 1, "label": "a"}
    assert Output.from_jsonable(data, response_schema=Answer) == out
    with pytest.raises(ConfigurationError, match="does not match"):
        Output.from_jsonable({"text": "", "structured": {"value": "nope"}}, response_schema=Answer)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"text": 5},
        {"reasoning": 3},
        {"tool_calls": {"id": "c"}},
        {"tool_calls": [{"id": "c"}]},
        {"usage": {"input_tokens": -3}},
        {"metrics": {"completion_status": "fine"}},
        {"metrics": {"duration_s": "slow"}},
        {"continuation": {"version": 1}},
        {"diagnostics": [1]},
        {"structured": {"x": {1}}},
    ],
)
def test_output_from_jsonable_errors(data: object) -> None:
    with pytest.raises(ConfigurationError):
        Output.from_jsonable(data)  # type: ignore[arg-type]


def test_error_output() -> None:
    err = APIError(
        "boom",
        hint="retry later",
        provider="openai",
        phase="generate",
        call_idx=2,
        status_code=503,
        retryable=True,
        error_category="capacity",
    )
    out = error_output(err, duration_s=0.5)
    assert out.text == "" and out.failed and not out.has_answer
    assert out.metrics.completion_status == "error"
    assert out.diagnostics.error == {
        "type": "APIError",
        "message": "boom",
        "hint": "retry later",
        "provider": "openai",
        "phase": "generate",
        "call_idx": 2,
        "status_code": 503,
        "retryable": True,
        "error_category": "capacity",
    }
    assert Output.from_jsonable(out.to_jsonable()) == out
    overflow = error_output(ContextOverflowError("too long"), extra={"deferred": {"job_id": "j"}})
    assert overflow.metrics.completion_status == "truncated"
    assert overflow.diagnostics.raw["deferred"] == {"job_id": "j"}
    plain = error_output(RuntimeError("x"))
    assert plain.diagnostics.error == {"type": "RuntimeError", "message": "x"}


# ---------------------------------------------------------------------- Collection


def test_collection_aggregates() -> None:
    a = Output(text="a", structured=1, usage=Usage(1, 2, 3, reasoning_tokens=1))
    b = Output(text="b", usage=Usage(10, 20, 30, cached_tokens=5))
    coll = OutputCollection([a, b], prompt_indexes=[0, 1])
    assert isinstance(coll.outputs, tuple) and coll.prompt_indexes == (0, 1)
    assert coll.answers == ["a", "b"]
    assert coll.structured == [1, None]
    assert coll.usage == Usage(11, 22, 33, reasoning_tokens=1, cached_tokens=5)
    assert OutputCollection([Output(text="x")]).usage.reasoning_tokens is None
    assert coll.status == "ok"


def test_collection_status() -> None:
    ok = Output(text="yes")
    empty = Output(text="  ")
    tool_only = Output(tool_calls=(ToolCall.from_text(id="c", name="f"),))
    structured_only = Output(structured={"a": 1})
    failed = error_output(APIError("x"))
    assert OutputCollection().status == "ok"
    assert OutputCollection([ok, tool_only, structured_only]).status == "ok"
    assert OutputCollection([ok, failed]).status == "partial"
    # pollux 2.0 derives status from execution failures: an empty clean answer is not one.
    assert OutputCollection([ok, empty]).status == "ok"
    assert OutputCollection([empty]).status == "ok" and not empty.has_answer
    assert OutputCollection([failed, empty]).status == "partial"
    assert OutputCollection([failed, failed]).status == "error"
    text_but_error = Output(text="partial text", metrics=Metrics(completion_status="error"))
    assert OutputCollection([text_but_error]).status == "error"
    assert OutputCollection([ok, failed]).errors == [None, failed.diagnostics.error]


def test_collection_indexes_must_line_up() -> None:
    with pytest.raises(ConfigurationError):
        OutputCollection([Output(text="a")], prompt_indexes=[0, 1])
    with pytest.raises(ConfigurationError):
        OutputCollection([{"text": "a"}])  # type: ignore[list-item]


def test_collection_round_trip() -> None:
    coll = OutputCollection(
        [_full_output(), error_output(APIError("x", call_idx=1))],
        prompt_indexes=[0, 1],
        source_indexes=[0, 0],
    )
    data = json.loads(json.dumps(coll.to_jsonable()))
    assert data["status"] == "partial"
    assert set(data) == {"status", "outputs", "usage", "prompt_indexes", "source_indexes"}
    assert OutputCollection.from_jsonable(data) == coll
    for bad in ({"outputs": 3}, {"outputs": [], "prompt_indexes": ["a"]}, []):
        with pytest.raises(ConfigurationError):
            OutputCollection.from_jsonable(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Event


def test_event() -> None:
    assert Event(type="start").text == ""
    delta = Event(type="tool_call_delta", delta=ToolCallDelta(index=0, arguments='{"a'))
    assert delta.delta is not None and delta.delta.arguments == '{"a'
    done = Event(type="done", output=Output(text="x"))
    assert done.output == Output(text="x")
    with pytest.raises(ConfigurationError):
        Event(type="error")  # type: ignore[arg-type]


def test_event_jsonable() -> None:
    assert Event(type="start").to_jsonable() == {"type": "start"}
    delta = Event(type="tool_call_delta", delta=ToolCallDelta(index=1, name="f"))
    assert delta.to_jsonable() == {
        "type": "tool_call_delta",
        "delta": {"index": 1, "arguments": "", "name": "f"},
    }
    done = Event(type="done", output=_full_output())
    assert Event.from_jsonable(json.loads(json.dumps(done.to_jsonable()))) == done
    with pytest.raises(ConfigurationError):
        Event.from_jsonable({"type": "nope"})


@pytest.mark.parametrize(
    "build",
    [
        lambda: Output(text=5),  # type: ignore[arg-type]
        lambda: Output(reasoning=["x"]),  # type: ignore[arg-type]
        lambda: Output(tool_calls="ab"),  # type: ignore[arg-type]
        lambda: Output(tool_calls=({"id": "c1"},)),  # type: ignore[arg-type]
        lambda: Output(continuation={"version": 2}),  # type: ignore[arg-type]
        lambda: Output(usage=None),  # type: ignore[arg-type]
        lambda: Output(metrics={"n_calls": 1}),  # type: ignore[arg-type]
        lambda: Output(diagnostics={}),  # type: ignore[arg-type]
        lambda: Metrics(duration_s=float("nan")),
        lambda: Metrics(duration_s="1.5"),  # type: ignore[arg-type]
        lambda: Metrics(n_calls=-1),
        lambda: Metrics(n_calls=True),
        lambda: Metrics(cache_used=1),  # type: ignore[arg-type]
        lambda: Metrics(cache_hit=None),  # type: ignore[arg-type]
        lambda: Metrics(finish_reason=5),  # type: ignore[arg-type]
    ],
)
def test_an_output_that_could_not_be_restored_cannot_be_built(build: object) -> None:
    # Output.from_jsonable applies these checks; construction must too, or a saved Output
    # would fail to load (or to_jsonable would crash) long after it was made.
    with pytest.raises(ConfigurationError) as info:
        build()  # type: ignore[operator]
    assert info.value.hint


def _snapshot(**changes: object) -> DeferredSnapshot:
    fields: dict[str, object] = {
        "job_id": "j",
        "provider": "openai",
        "model": "m",
        "status": "running",
        "provider_status": "in_progress",
        "request_count": 2,
        "succeeded": 0,
        "failed": 0,
        "pending": 2,
        "submitted_at": 0.0,
    }
    return DeferredSnapshot(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "build",
    [
        lambda: ToolCall(id=None, name="f"),  # type: ignore[arg-type]
        lambda: ToolCall(id="c", name=b"f"),  # type: ignore[arg-type]
        lambda: ToolCall(id="c", name="f", arguments_text={"a": 1}),  # type: ignore[arg-type]
        lambda: ToolCall(id="c", name="f", index=-1),
        lambda: ToolCall(id="c", name="f", index=True),
        lambda: ToolCall(id="c", name="f", provider_state=["x"]),  # type: ignore[arg-type]
        lambda: ToolCallDelta(index=-1),
        lambda: ToolCallDelta(index=0, arguments=None),  # type: ignore[arg-type]
        lambda: ToolCallDelta(index=0, id=7),  # type: ignore[arg-type]
        lambda: Event(type="text_delta", text=None),  # type: ignore[arg-type]
        lambda: Event(type="finish", finish_reason=1),  # type: ignore[arg-type]
        lambda: Event(type="tool_call_delta", delta={"index": 0}),  # type: ignore[arg-type]
        lambda: Event(type="tool_call", tool_call="f"),  # type: ignore[arg-type]
        lambda: Event(type="usage", usage={"input_tokens": 1}),  # type: ignore[arg-type]
        lambda: Event(type="done", output="text"),  # type: ignore[arg-type]
        # A delta event takes a fast path; what it does not cover still gets the full checks.
        lambda: Event(type="text_delta", text=b"x"),  # type: ignore[arg-type]
        lambda: Event(type="reasoning_delta", text="x", usage={"input_tokens": 1}),  # type: ignore[arg-type]
        lambda: Event(type="text_delta", text="x", delta={"index": 0}),  # type: ignore[arg-type]
        lambda: _snapshot(job_id=None),
        lambda: _snapshot(pending=-1),
        lambda: _snapshot(submitted_at=float("inf")),
        lambda: _snapshot(completed_at="soon"),
        lambda: OutputCollection(outputs=5),  # type: ignore[arg-type]
        lambda: OutputCollection((Output(),), prompt_indexes=(-1,)),
        lambda: OutputCollection((Output(),), source_indexes=("0",)),  # type: ignore[arg-type]
        lambda: OutputCollection((Output(),), prompt_indexes=7),  # type: ignore[arg-type]
    ],
)
def test_values_that_would_not_round_trip_are_rejected_when_built(build: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        build()  # type: ignore[operator]
    assert info.value.hint


def test_round_trip_of_every_constructed_value() -> None:
    # The other side of the checks above: what is accepted comes back equal from JSON.
    values: list[tuple[Any, Any]] = [
        (ToolCallDelta(index=0, id="c", name="f", arguments="{"), ToolCallDelta.from_jsonable),
        (Event(type="finish", finish_reason="stop"), Event.from_jsonable),
        (_snapshot(completed_at=5, expires_at=None), DeferredSnapshot.from_dict),
        (
            OutputCollection((o for o in [Output(text="a")]), prompt_indexes=[0]),
            OutputCollection.from_jsonable,
        ),
    ]
    for value, load in values:
        dump = value.to_dict() if isinstance(value, DeferredSnapshot) else value.to_jsonable()
        assert load(json.loads(json.dumps(dump))) == value
