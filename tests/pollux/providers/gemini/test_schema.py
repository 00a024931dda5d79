"""The Gemini schema sanitizer: what it rewrites, what it refuses, and that input is untouched."""

from __future__ import annotations

import copy
from typing import Any

import pydantic
import pytest

from pollux import ConfigurationError
from pollux.providers.gemini.schema import gemini_schema


class Address(pydantic.BaseModel):
    city: str
    zip_code: str | None = None


class Person(pydantic.BaseModel):
    name: str
    home: Address
    tags: list[str] = []


def test_pydantic_refs_inlined_and_annotations_dropped() -> None:
    raw = Person.model_json_schema()
    before = copy.deepcopy(raw)
    out = gemini_schema(raw)
    assert raw == before  # the user's schema is not modified
    assert "$defs" not in out and "title" not in out
    home = out["properties"]["home"]
    assert home["properties"]["city"] == {"type": "string"}
    # pydantic's `str | None = None` -> a nullable type, default dropped
    assert home["properties"]["zip_code"] == {"type": ["string", "null"]}
    assert out["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert out["required"] == ["name", "home"]


def test_additional_properties_false_dropped_but_maps_refused() -> None:
    out = gemini_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    )
    assert out == {"type": "object", "properties": {"a": {"type": "integer"}}}
    with pytest.raises(ConfigurationError) as info:
        gemini_schema({"type": "object", "additionalProperties": {"type": "string"}})
    assert "free-form map" in str(info.value) and info.value.hint


def test_recursive_ref_refused_with_hint() -> None:
    schema: dict[str, Any] = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"child": {"$ref": "#/$defs/Node"}},
            }
        },
        "$ref": "#/$defs/Node",
    }
    with pytest.raises(ConfigurationError) as info:
        gemini_schema(schema)
    assert "recursive" in str(info.value)
    assert "Bound the recursion" in (info.value.hint or "")


def test_openapi_nullable_and_enum_mapped() -> None:
    out = gemini_schema({"type": "string", "enum": ["a", "b"], "nullable": True})
    assert out == {"type": ["string", "null"], "enum": ["a", "b", None]}


def test_one_of_becomes_any_of_and_single_all_of_merges() -> None:
    out = gemini_schema(
        {
            "type": "object",
            "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
            "allOf": [{"required": ["v"]}],
        }
    )
    assert out["properties"]["v"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert out["required"] == ["v"]


@pytest.mark.parametrize("keyword", ["patternProperties", "not", "if"])
def test_unenforceable_keywords_refused(keyword: str) -> None:
    with pytest.raises(ConfigurationError, match=keyword):
        gemini_schema({"type": "object", keyword: {}})
