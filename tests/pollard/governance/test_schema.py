"""The schema subset: fail closed at construction, first finding with a path, jsonschema parity."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollard._governance._schema import compile_schema, strip_keywords
from pollard.errors import UnsupportedSchema
from pollard.registry import ActionSpec

OBJ = "object"


def finding(schema: dict[str, Any], value: object) -> str | None:
    return compile_schema(schema).validate(value)


# -- fail closed at construction ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": OBJ, "patternProperties": {}}, "$.patternProperties"),
        (
            {"type": OBJ, "properties": {"a": {"type": "string", "uniqueItems": True}}},
            "$.properties.a.uniqueItems",
        ),
        ({"type": "float"}, "$.type"),
        ({"type": []}, "$.type"),
        ({"type": ["string", "string"]}, "$.type"),
        ({"required": "a"}, "$.required"),
        ({"required": ["a", "a"]}, "$.required"),
        ({"enum": []}, "$.enum"),
        ({"minimum": "3"}, "$.minimum"),
        ({"minimum": True}, "$.minimum"),
        ({"maxLength": -1}, "$.maxLength"),
        ({"maxItems": 1.5}, "$.maxItems"),
        ({"pattern": "("}, "$.pattern"),
        ({"items": [{"type": "string"}]}, "$.items"),
        ({"anyOf": []}, "$.anyOf"),
        ({"oneOf": [{"type": "nope"}]}, "$.oneOf[0].type"),
        ({"$ref": "#/$defs/Missing"}, "$.$ref"),
        ({"$ref": "https://example.com/schema.json"}, "$.$ref"),
        ({"properties": {"a": {"$defs": {}}}}, "$.properties.a.$defs"),
        ({"type": "integer", "sensitive": True}, "$.sensitive"),
        ({"type": OBJ, "sensitive": True}, "$.sensitive"),
        ({"sensitive": "yes", "type": "string"}, "$.sensitive"),
        ({"properties": []}, "$.properties"),
        ({"not": {"type": "string"}}, "$.not"),
        ({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}, "$"),
        ({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/B"}]}, "B": {"$ref": "#/$defs/A"}}}, "$"),
        ([1, 2], "$"),
    ],
)
def test_unsupported_schemas_fail_closed_with_a_path(schema: Any, path: str) -> None:
    with pytest.raises(UnsupportedSchema) as info:
        compile_schema(schema)
    assert info.value.path == path
    assert str(info.value).startswith(path + ":")
    assert info.value.hint


def test_action_spec_fails_at_construction_not_at_call_time() -> None:
    with pytest.raises(UnsupportedSchema, match=r"\$\.properties\.q\.multipleOf"):
        ActionSpec("t", "1", "", {"properties": {"q": {"type": "number", "multipleOf": 2}}}, False)


def test_real_world_tool_schemas_compile() -> None:
    # The shape pydantic v2 and FastMCP emit: titles, defaults, $defs, anyOf-null, enums.
    schema = {
        "$defs": {
            "Address": {
                "properties": {
                    "street": {"title": "Street", "type": "string"},
                    "zip": {"title": "Zip", "type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["street", "zip"],
                "title": "Address",
                "type": "object",
            },
            "Kind": {"enum": ["home", "work"], "title": "Kind", "type": "string"},
        },
        "properties": {
            "address": {"$ref": "#/$defs/Address"},
            "kind": {"$ref": "#/$defs/Kind", "default": "home"},
            "note": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "title": "Note",
            },
            "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 3},
            "when": {"type": "string", "format": "date-time"},
        },
        "required": ["address"],
        "title": "create_contactArguments",
        "type": "object",
        "additionalProperties": False,
        "$schema": "https://json-schema.org/draft/2020-12/schema",
    }
    compiled = compile_schema(schema)
    good = {
        "address": {"street": "Main", "zip": "12345"},
        "kind": "work",
        "note": None,
        "count": 3,
        "ratio": 0.5,
        "tags": ["a"],
        "when": "2024-01-01T00:00:00Z",
    }
    assert compiled.validate(good) is None
    assert compiled.validate(good, engine="jsonschema") is None
    bad = dict(good, address={"street": "Main", "zip": "1234"})
    assert compiled.validate(bad) == '$.address.zip: does not match the pattern "^[0-9]{5}$"'
    assert compiled.validate(bad, engine="jsonschema") == (
        "$.address.zip: failed the 'pattern' constraint"
    )


# -- first finding with a path; never quoting the value -----------------------------------------


SECRET = "hunter2-very-secret"


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"type": "string"}, 5, "$: expected string, got integer"),
        ({"type": ["string", "null"]}, 1.5, "$: expected string or null, got number"),
        ({"type": "integer"}, True, "$: expected integer, got boolean"),
        ({"type": "integer"}, 2.0, None),
        ({"type": "number"}, False, "$: expected number, got boolean"),
        ({"enum": ["a", "b"]}, SECRET, '$: value is not one of ["a", "b"]'),
        ({"enum": [1]}, True, "$: value is not one of [1]"),
        ({"enum": [1]}, 1.0, None),
        ({"const": "x"}, SECRET, '$: value is not the constant "x"'),
        ({"type": "string", "minLength": 30}, SECRET, "$: shorter than 30 characters"),
        ({"type": "string", "maxLength": 3}, SECRET, "$: longer than 3 characters"),
        ({"minimum": 0}, -1, "$: less than the minimum 0"),
        ({"maximum": 1}, 1.5, "$: greater than the maximum 1"),
        ({"exclusiveMinimum": 0}, 0, "$: not greater than 0"),
        ({"exclusiveMaximum": 0}, 0, "$: not less than 0"),
        ({"minItems": 2}, [1], "$: fewer than 2 items"),
        ({"maxItems": 0}, [1], "$: more than 0 items"),
        ({"items": {"type": "integer"}}, [1, "x"], "$[1]: expected integer, got string"),
        ({"required": ["a", "b"]}, {"b": 1}, '$: missing required property "a"'),
        (
            {"properties": {"a": {"type": "string"}}, "additionalProperties": False},
            {"a": "x", "zz": SECRET},
            '$: unexpected property "zz"',
        ),
        (
            {"additionalProperties": {"type": "integer"}},
            {"k": SECRET},
            "$.k: expected integer, got string",
        ),
        (
            {"properties": {"a b": {"type": "string"}}},
            {"a b": 1},
            '$["a b"]: expected string, got integer',
        ),
        (
            {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            [],
            "$: matches none of the anyOf alternatives",
        ),
        (
            {"oneOf": [{"type": "integer"}, {"minimum": 0}]},
            3,
            "$: matches 2 of the oneOf alternatives (exactly 1 required)",
        ),
        ({"allOf": [{"type": "integer"}, {"minimum": 5}]}, 3, "$: less than the minimum 5"),
        (
            {"$defs": {"N": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/N"}}},
            {"n": "1"},
            "$.n: expected integer, got string",
        ),
        (
            {"definitions": {"N": {"type": "integer"}}, "items": {"$ref": "#/definitions/N"}},
            [0, None],
            "$[1]: expected integer, got null",
        ),
        ({"minLength": 3}, 12, None),
        (True, SECRET, None),
        ({"properties": {"a": False}}, {"a": 1}, "$.a: no value is allowed here"),
    ],
)
def test_findings(schema: Any, value: object, expected: str | None) -> None:
    compiled = compile_schema(schema)
    assert compiled.validate(value) == expected
    assert (compiled.validate(value, engine="jsonschema") is None) == (expected is None)
    if expected is not None:
        assert SECRET not in expected


def test_recursive_schema_through_root_ref() -> None:
    tree = {
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
        "additionalProperties": False,
    }
    compiled = compile_schema(tree)
    assert compiled.validate({"children": [{"children": []}]}) is None
    assert compiled.validate({"children": [{"kids": []}]}) == (
        '$.children[0]: unexpected property "kids"'
    )


def test_the_compiled_schema_is_a_private_copy() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    spec = ActionSpec("t", "1", "", schema, False)
    digest = spec.spec_digest
    schema["properties"]["a"]["type"] = "integer"
    assert spec.validate({"a": "x"}) is None
    assert spec.spec_digest == digest


def test_strip_keywords_keeps_property_names() -> None:
    schema = {
        "type": "object",
        "description": "d",
        "properties": {
            "description": {
                "type": "string",
                "description": "the description field",
                "sensitive": True,
            }
        },
    }
    stripped = strip_keywords(schema, frozenset({"description", "sensitive"}))
    assert stripped == {"type": "object", "properties": {"description": {"type": "string"}}}


# -- jsonschema parity on generated instances ---------------------------------------------------

PARITY_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "minLength": 1, "maxLength": 4},
            "b": {"type": "integer", "minimum": -3, "maximum": 3},
        },
        "required": ["a"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"a": {"enum": [1, "x", None, True, [1]]}, "b": {"const": {"k": 1}}},
    },
    {
        "type": "object",
        "properties": {
            "a": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "b": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
        },
        "additionalProperties": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
    },
    {
        "type": "object",
        "properties": {
            "a": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
            "b": {"type": ["array", "null"], "minItems": 1},
        },
    },
    {
        "$defs": {
            "P": {
                "type": "object",
                "properties": {
                    "a": {"$ref": "#/$defs/P"},
                    "b": {"type": "string", "pattern": "^x"},
                },
            }
        },
        "allOf": [{"$ref": "#/$defs/P"}, {"required": ["b"]}],
    },
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 12)
    | st.floats(-5, 12, allow_nan=False)
    | st.sampled_from(["", "x", "xy", "abcde", "ax"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c", "k"]), inner, max_size=3)
    ),
    max_leaves=8,
)
instances = json_values | st.dictionaries(st.sampled_from(["a", "b", "c"]), json_values, max_size=3)


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, len(PARITY_SCHEMAS) - 1), value=instances)
def test_builtin_and_jsonschema_agree_on_the_subset(index: int, value: object) -> None:
    compiled = compile_schema(PARITY_SCHEMAS[index])
    builtin = compiled.validate(value)
    delegated = compiled.validate(value, engine="jsonschema")
    assert (builtin is None) == (delegated is None), (builtin, delegated)
