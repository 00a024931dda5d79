"""Canonical JSON and pollard/v1 identity: golden vectors and properties."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollard import Node, NodeKind
from pollard._core._canon import (
    canonical_bytes,
    float_text,
    json_text,
    node_id,
    payload_digest,
    result_digest,
    result_text,
)

GOLDEN_ROOT = "56022c0c5fabdad4de7f9226bd28d33cc5c0098d7e1569b1a3b6293d833d8e8e"
GOLDEN_PAYLOAD = {"messages": [{"role": "user", "content": "hello"}], "model": "mock-1"}


def test_golden_root_and_model_call_ids() -> None:
    root = node_id("root", None, {"run": "golden"}, 0)
    assert root == GOLDEN_ROOT
    assert (
        node_id("model_call", root, GOLDEN_PAYLOAD, 0)
        == "07f65f2688e6b6ee1e8acab69b36e29be8d2c72c3317aa47831121a01a7c724d"
    )
    assert (
        node_id("model_call", root, GOLDEN_PAYLOAD, 1)
        == "e043a7e862a99b31e253c243b0462f259e3d519fa8d6b5b545051f228fba8858"
    )
    assert (
        node_id("root", None, {"run": "triage"})
        == "f187428af9cacfaba4389d1f7466252d481354aeafb50cf797521738e0766ea7"
    )


def test_golden_result_digest() -> None:
    text = result_text({"text": "hi"})
    assert text == '{"text":"hi"}'
    assert result_digest(text) == (
        "37433971800cff26a7de42ccb5d6c30f40b7d8163c55d4ad60cdac32e809c064"
    )


def test_node_create_matches_golden() -> None:
    root = Node.create("root", None, {"run": "golden"})
    assert root.id == GOLDEN_ROOT and root.kind is NodeKind.ROOT
    child = Node.create(NodeKind.MODEL_CALL, root.id, GOLDEN_PAYLOAD, result={"text": "hi"})
    assert child.result_digest == (
        "37433971800cff26a7de42ccb5d6c30f40b7d8163c55d4ad60cdac32e809c064"
    )
    child.check()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.2, "0.2"),
        (-0.0, "0"),
        (1e-7, "1e-7"),
        (1.5e-6, "0.0000015"),
        (0.000001, "0.000001"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (123.456, "123.456"),
        (-2.5e-300, "-2.5e-300"),
        (5e-324, "5e-324"),
    ],
)
def test_float_form_is_the_ecmascript_number_form(value: float, text: str) -> None:
    assert float_text(value) == text


def test_floats_are_accepted_in_identity_and_kept_in_storage() -> None:
    payload = {"model": "m", "temperature": 0.2, "top_p": 1.0}
    assert canonical_bytes(payload) == b'{"model":"m","temperature":0.2,"top_p":1}'
    assert json_text(payload) == '{"model":"m","temperature":0.2,"top_p":1.0}'
    node = Node.create("root", None, {"run": "x", "t": 1.0})
    assert node.payload == {"run": "x", "t": 1.0} and isinstance(node.payload["t"], float)
    assert node.id == node_id("root", None, {"run": "x", "t": 1})
    assert node_id("root", None, {"run": "x", "t": 0.2}) != node_id(
        "root", None, {"run": "x", "t": 0.3}
    )


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": (1, 2)}, "$.a"),
        ({"a": [1, b"x"]}, "$.a[1]"),
        ({"a": {1: "x"}}, "$.a"),
        ({"a": math.nan}, "$.a"),
        ({"a": math.inf}, "$.a"),
        ({"a": {"b": object()}}, "$.a.b"),
    ],
)
def test_non_canonical_values_are_rejected_with_a_path(value: object, path: str) -> None:
    with pytest.raises(TypeError, match=rf"^{__import__('re').escape(path)}"):
        canonical_bytes(value)


def test_python_json_escaping_is_reproduced() -> None:
    value = {"é": '\u2028/\x01\t"\\', "a": "ünïcode"}
    assert (
        canonical_bytes(value)
        == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_payload_digest_has_no_domain() -> None:
    import hashlib

    assert payload_digest({"a": 1}) == hashlib.sha256(b'{"a":1}').hexdigest()


def test_attempt_must_be_a_non_negative_int() -> None:
    with pytest.raises(TypeError):
        node_id("root", None, {"run": "x"}, True)
    with pytest.raises(ValueError):
        node_id("root", None, {"run": "x"}, -1)


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)
int_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)


@settings(max_examples=150, deadline=None)
@given(int_json)
def test_without_floats_canonical_equals_python_json(value: object) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_bytes(value) == expected.encode()


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_canonical_is_parseable_and_key_order_independent(value: object) -> None:
    parsed = json.loads(canonical_bytes(value))
    assert canonical_bytes(parsed) == canonical_bytes(value)
    if isinstance(value, dict):
        reordered = dict(reversed(list(value.items())))
        assert canonical_bytes(reordered) == canonical_bytes(value)


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_text_round_trips(value: float) -> None:
    assert float(float_text(value)) == value


@settings(max_examples=100, deadline=None)
@given(
    json_values,
    st.integers(min_value=0, max_value=5),
    st.sampled_from(["model_call", "tool_call", "note", "refusal"]),
    st.data(),
)
def test_changing_any_identity_field_changes_the_id(
    payload: object, attempt: int, kind: str, data: st.DataObject
) -> None:
    parent = node_id("root", None, {"run": "p"})
    base = node_id(kind, parent, payload, attempt)
    assert node_id(kind, parent, payload, attempt + 1) != base
    other_kind = data.draw(st.sampled_from([k for k in ("model_call", "note") if k != kind]))
    assert node_id(other_kind, parent, payload, attempt) != base
    assert node_id(kind, node_id("root", None, {"run": "q"}), payload, attempt) != base
    assert node_id(kind, parent, [payload], attempt) != base


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_fast_json_helpers_match_the_json_module(value: object) -> None:
    from pollard._core._canon import fast_loads, make_dumps

    dumps = make_dumps()
    expected = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert dumps(value) == expected
    assert fast_loads(expected) == json.loads(expected)


def test_fast_loads_reports_malformed_text_like_json() -> None:
    from pollard._core._canon import fast_loads

    for bad in ("", "{", '{"a":1} x', "nan"):
        with pytest.raises(json.JSONDecodeError):
            fast_loads(bad)


def test_replacing_identity_fields_is_caught_by_check() -> None:
    import dataclasses

    from pollard import IntegrityError

    node = Node.create("root", None, {"run": "x"})
    forged = dataclasses.replace(node, payload={"run": "y"})
    with pytest.raises(IntegrityError):
        forged.check()
    assert dataclasses.replace(node, meta={"a": 1}).expected_id == node.id
