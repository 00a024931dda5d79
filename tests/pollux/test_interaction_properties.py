"""Property tests: JSON round trips, hostile JSON input, environment fingerprints."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pollux import (
    CachePolicy,
    Continuation,
    DeferredHandle,
    DeferredSnapshot,
    Diagnostics,
    Environment,
    Event,
    Message,
    Metrics,
    Output,
    OutputCollection,
    PolluxError,
    Source,
    ToolCall,
    ToolCallDelta,
    ToolDeclaration,
    Usage,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
names = st.text(min_size=1, max_size=12)
counts = st.integers(min_value=0, max_value=10**9)


def _roundtrip_json(data: Any) -> Any:
    return json.loads(json.dumps(data))


# ------------------------------------------------------------------------ strategies

continuations = st.builds(
    lambda provider, model, state: Continuation._create(
        provider=provider, model=model, state=state
    ),
    names,
    st.none() | names,
    json_objects,
)

arguments_texts = st.one_of(json_values.map(json.dumps), st.text(max_size=20))

portable_calls = st.builds(
    lambda i, name, args, index: ToolCall.from_text(
        id=i, name=name, arguments_text=args, index=index
    ),
    names,
    names,
    arguments_texts,
    st.none() | st.integers(min_value=0, max_value=50),
)
tool_calls = st.builds(
    lambda call, state: ToolCall.from_text(
        id=call.id,
        name=call.name,
        arguments_text=call.arguments_text,
        index=call.index,
        provider_state=state,
    ),
    portable_calls,
    st.none() | json_objects,
)

non_blank = st.text(min_size=1, max_size=30).filter(lambda s: bool(s.strip()))
messages = st.one_of(
    st.builds(lambda c: Message("user", c), non_blank),
    st.builds(
        lambda c, calls: Message("assistant", c, tool_calls=calls),
        non_blank,
        st.lists(portable_calls, max_size=3),
    ),
    st.builds(
        lambda calls: Message("assistant", tool_calls=calls),
        st.lists(portable_calls, min_size=1, max_size=3),
    ),
    st.builds(lambda c, i: Message("tool", c, tool_call_id=i), st.text(max_size=30), non_blank),
)

usages = st.builds(Usage, counts, counts, counts, st.none() | counts, st.none() | counts)
metrics = st.builds(
    Metrics,
    duration_s=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    n_calls=st.integers(min_value=0, max_value=100),
    cache_used=st.booleans(),
    cache_mode=st.sampled_from(["persistent", "implicit", "none"]),
    cache_hit=st.booleans(),
    finish_reason=st.none() | st.text(max_size=12),
    completion_status=st.sampled_from(["clean", "truncated", "cutoff", "error"]),
)
outputs = st.builds(
    Output,
    text=st.text(max_size=40),
    structured=json_values,
    reasoning=st.none() | st.text(max_size=20),
    tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    continuation=st.none() | continuations,
    usage=usages,
    metrics=metrics,
    diagnostics=st.builds(Diagnostics, json_objects),
)
handles = st.builds(
    DeferredHandle,
    job_id=names,
    provider=names,
    model=names,
    request_count=counts,
    submitted_at=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    schema_hash=st.none() | st.text(max_size=64),
    provider_state=st.none() | json_objects,
)


# ----------------------------------------------------------------------- round trips


@SETTINGS
@given(continuations)
def test_continuation_round_trip(cont: Continuation) -> None:
    restored = Continuation.from_jsonable(
        _roundtrip_json(cont.to_jsonable()), expected_provider=cont._provider
    )
    assert restored == cont
    assert restored.to_jsonable() == cont.to_jsonable()


@SETTINGS
@given(messages)
def test_message_round_trip(message: Message) -> None:
    assert Message.from_jsonable(_roundtrip_json(message.to_jsonable())) == message


@SETTINGS
@given(messages)
def test_message_openai_round_trip(message: Message) -> None:
    assert Message.from_openai(_roundtrip_json(message.to_openai())) == message


@SETTINGS
@given(outputs)
def test_output_round_trip(output: Output) -> None:
    data = _roundtrip_json(output.to_jsonable())
    restored = Output.from_jsonable(data)
    assert restored == output
    assert restored.to_jsonable() == output.to_jsonable()


@SETTINGS
@given(st.lists(outputs, max_size=3))
def test_collection_round_trip(items: list[Output]) -> None:
    coll = OutputCollection(items, prompt_indexes=range(len(items)))
    assert OutputCollection.from_jsonable(_roundtrip_json(coll.to_jsonable())) == coll


@SETTINGS
@given(handles)
def test_deferred_handle_round_trip(handle: DeferredHandle) -> None:
    assert DeferredHandle.from_dict(_roundtrip_json(handle.to_dict())) == handle


# ------------------------------------------------------------------ hostile JSON input

PARSERS: dict[str, tuple[Callable[[Any], object], tuple[str, ...]]] = {
    "Continuation.from_jsonable": (
        Continuation.from_jsonable,
        ("version", "provider", "model", "state"),
    ),
    "Message.from_jsonable": (
        Message.from_jsonable,
        ("role", "content", "tool_calls", "tool_call_id"),
    ),
    "Message.from_openai": (Message.from_openai, ("role", "content", "tool_calls", "tool_call_id")),
    "ToolCall.from_jsonable": (
        ToolCall.from_jsonable,
        ("id", "name", "arguments_text", "arguments_error", "index", "provider_state"),
    ),
    "ToolCall.from_openai": (ToolCall.from_openai, ("id", "type", "index", "function")),
    "ToolDeclaration.from_dict": (
        ToolDeclaration.from_dict,
        ("name", "description", "parameters", "strict", "function"),
    ),
    "Usage.from_dict": (
        Usage.from_dict,
        ("input_tokens", "output_tokens", "total_tokens", "cached_tokens"),
    ),
    "Metrics.from_jsonable": (
        Metrics.from_jsonable,
        ("duration_s", "n_calls", "cache_mode", "completion_status"),
    ),
    "Diagnostics.from_jsonable": (Diagnostics.from_jsonable, ("raw", "error")),
    "Output.from_jsonable": (
        Output.from_jsonable,
        (
            "text",
            "structured",
            "reasoning",
            "tool_calls",
            "continuation",
            "usage",
            "metrics",
            "diagnostics",
        ),
    ),
    "OutputCollection.from_jsonable": (
        OutputCollection.from_jsonable,
        ("outputs", "prompt_indexes", "source_indexes", "status"),
    ),
    "DeferredHandle.from_dict": (
        DeferredHandle.from_dict,
        (
            "job_id",
            "provider",
            "model",
            "request_count",
            "submitted_at",
            "schema_hash",
            "provider_state",
        ),
    ),
    "ToolCallDelta.from_jsonable": (
        ToolCallDelta.from_jsonable,
        ("index", "id", "name", "arguments"),
    ),
    "Event.from_jsonable": (
        Event.from_jsonable,
        ("type", "text", "delta", "tool_call", "usage", "finish_reason", "output"),
    ),
    "DeferredSnapshot.from_dict": (
        DeferredSnapshot.from_dict,
        ("job_id", "provider", "model", "status", "provider_status", "request_count", "succeeded"),
    ),
}

HUGE = (10**400, -(10**400))
hostile_scalars = json_scalars | st.sampled_from(
    # 10**400 parses from JSON but overflows a float: loaders must refuse it with our error.
    [2, "user", "assistant", "tool", "openai", "clean", "error", "running", "", -1, 1.5, *HUGE]
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)


def _keyed(keys: tuple[str, ...]) -> st.SearchStrategy[Any]:
    return st.one_of(
        hostile_values,
        st.fixed_dictionaries({}, optional=dict.fromkeys(keys, hostile_values)),
    )


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_parsers_raise_only_pollux_errors(name: str, data: st.DataObject) -> None:
    parse, keys = PARSERS[name]
    payload = data.draw(_keyed(keys), label="payload")
    try:
        parse(payload)
    except PolluxError as exc:
        assert exc.hint, f"{name} raised {exc!r} without a hint"


deltas = st.builds(
    ToolCallDelta,
    index=st.integers(min_value=0, max_value=9),
    id=st.none() | names,
    name=st.none() | names,
    arguments=st.text(max_size=10),
)
events = st.one_of(
    st.builds(lambda t: Event(type=t), st.sampled_from(["start"])),
    st.builds(
        lambda t, x: Event(type=t, text=x),
        st.sampled_from(["text_delta", "reasoning_delta"]),
        st.text(max_size=10),
    ),
    st.builds(lambda d: Event(type="tool_call_delta", delta=d), deltas),
    st.builds(lambda c: Event(type="tool_call", tool_call=c), tool_calls),
    st.builds(lambda u: Event(type="usage", usage=u), usages),
    st.builds(lambda r: Event(type="finish", finish_reason=r), st.text(max_size=10)),
    st.builds(lambda o: Event(type="done", output=o), outputs),
)


@SETTINGS
@given(events)
def test_event_round_trip(event: Event) -> None:
    assert Event.from_jsonable(_roundtrip_json(event.to_jsonable())) == event


# ----------------------------------------------------------------------- fingerprints

tool_specs = st.tuples(
    st.text(min_size=1, max_size=6),
    st.text(max_size=10),
    st.dictionaries(st.text(max_size=5), json_scalars, max_size=3),
    st.booleans(),
)
env_specs = st.tuples(
    st.none() | st.text(max_size=20),
    st.lists(st.text(max_size=20), max_size=3),
    st.lists(tool_specs, max_size=3, unique_by=lambda t: t[0]),
)


def _build(spec: Any, *, cache: Any = None, metadata: Any = None) -> Environment:
    instructions, texts, tools = spec
    return Environment(
        instructions=instructions,
        sources=[Source.from_text(t, identifier=f"doc{i}") for i, t in enumerate(texts)],
        tools=[ToolDeclaration(n, d, p, s) for n, d, p, s in tools],
        cache=cache,
        metadata=metadata,
    )


@SETTINGS
@given(env_specs, st.sampled_from(["openai", "gemini", "anthropic"]))
def test_equal_environments_have_equal_fingerprints(spec: Any, provider: str) -> None:
    a = _build(spec).fingerprint(provider=provider)
    b = _build(spec, cache=CachePolicy(ttl_seconds=60), metadata={"run": 1}).fingerprint(
        provider=provider
    )
    assert a == b


@SETTINGS
@given(env_specs, env_specs)
def test_different_environments_have_different_fingerprints(spec_a: Any, spec_b: Any) -> None:
    visible_a = (spec_a[0], spec_a[1], spec_a[2])
    visible_b = (spec_b[0], spec_b[1], spec_b[2])
    fp_a = _build(spec_a).fingerprint(provider="openai")
    fp_b = _build(spec_b).fingerprint(provider="openai")
    assert (fp_a == fp_b) == (_canon(visible_a) == _canon(visible_b))


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


MUTATIONS = (
    "instructions",
    "add_source",
    "edit_source",
    "swap_sources",
    "add_tool",
    "tool_description",
    "tool_strict",
    "tool_parameters",
)


@SETTINGS
@given(env_specs, st.sampled_from(MUTATIONS))
def test_any_model_visible_change_changes_the_fingerprint(spec: Any, mutation: str) -> None:
    instructions, texts, tools = spec[0], list(spec[1]), list(spec[2])
    if mutation == "add_source":
        texts.append("extra")
    elif mutation == "edit_source" and texts:
        texts[0] += "!"
    elif mutation == "swap_sources" and len(set(texts)) > 1:
        i = next(k for k in range(1, len(texts)) if texts[k] != texts[0])
        texts[0], texts[i] = texts[i], texts[0]
    elif mutation == "add_tool":
        tools.append(("zz-" + "".join(t[0] for t in tools), "", {}, True))
    elif mutation.startswith("tool_") and tools:
        name, desc, params, strict = tools[0]
        if mutation == "tool_description":
            desc += "!"
        elif mutation == "tool_strict":
            strict = not strict
        else:
            params = {**params, "added": True} if "added" not in params else {}
        tools[0] = (name, desc, params, strict)
    else:
        instructions = (instructions or "") + "!"
    mutated = (instructions, texts, tools)
    assert _build(mutated).fingerprint(provider="openai") != _build(spec).fingerprint(
        provider="openai"
    )


def _nested(depth: int, *, as_dict: bool) -> Any:
    root: Any = {} if as_dict else []
    current = root
    for _ in range(depth):
        child: Any = {} if as_dict else []
        if as_dict:
            current["a"] = child
        else:
            current.append(child)
        current = child
    return root


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parsers_reject_values_nested_beyond_repr_with_pollux_errors(name: str) -> None:
    # Deeper than repr() can go: an error message must describe such a value, not repr it.
    parse, keys = PARSERS[name]
    for value in (_nested(5_000, as_dict=False), _nested(5_000, as_dict=True)):
        for key in keys:
            try:
                parse({key: value})
            except PolluxError as exc:
                assert exc.hint, f"{name} raised {exc!r} without a hint"
