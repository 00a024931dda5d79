"""Strict JSON Schema for the Chat Completions path: only schema positions are rewritten."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import pollux
from pollux import Config
from pollux.providers.openai_compat.compile import strict_schema
from pollux.testing import Emulator, Reply


class Props(BaseModel):
    name: str


class Feature(BaseModel):
    """A GeoJSON-like model: fields named like JSON Schema keywords."""

    type: str
    properties: Props
    required: list[str]


class OpenFeature(BaseModel):
    """``properties`` is an open map: strict mode has no closed form for it."""

    type: str
    properties: dict[str, str]


def test_fields_named_like_keywords_stay_fields() -> None:
    strict = strict_schema(Feature.model_json_schema())
    assert strict is not None
    assert sorted(strict["properties"]) == ["properties", "required", "type"]
    assert strict["required"] == ["type", "properties", "required"]
    assert strict["properties"]["required"]["type"] == "array"
    assert strict["$defs"]["Props"]["additionalProperties"] is False
    assert strict["$defs"]["Props"]["required"] == ["name"]


def test_an_open_map_is_not_strictified() -> None:
    # Closing dict[str, str] would turn it into an empty object: strict is not applied.
    assert strict_schema(OpenFeature.model_json_schema()) is None


def test_data_keywords_are_not_walked() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "shape": {"enum": [{"properties": {"x": 1}}], "default": {"properties": {}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}},
            "either": {"anyOf": [{"type": "object", "properties": {"b": {}}}, {"type": "null"}]},
        },
        "$defs": {"Child": {"type": ["object", "null"], "properties": {"c": {}}}},
    }
    strict = strict_schema(schema)
    assert strict is not None
    props = strict["properties"]
    # Every property is optional here: each becomes required and nullable, data untouched.
    assert props["shape"] == {
        "enum": [{"properties": {"x": 1}}, None],
        "default": {"properties": {}},
    }
    assert props["items"]["type"] == ["array", "null"]
    assert props["items"]["items"]["required"] == ["a"]
    assert props["either"]["anyOf"][0]["additionalProperties"] is False
    assert strict["$defs"]["Child"]["required"] == ["c"]
    assert strict["required"] == ["shape", "items", "either"]
    assert "required" not in schema  # the input is not modified


async def test_the_wire_schema_of_a_keyword_named_model(
    emu: Emulator, local_config: Config
) -> None:
    value = {"type": "Feature", "properties": {"name": "Pollux"}, "required": []}
    emu.script("local", Reply(structured=value))
    out = await pollux.run("A feature?", config=local_config, output=Feature)
    assert out.structured == Feature(**value)
    body = emu.requests_for("local.chat")[-1].json
    assert isinstance(body, dict)
    schema = body["response_format"]["json_schema"]["schema"]
    assert sorted(schema["properties"]) == ["properties", "required", "type"]
    assert body["response_format"]["json_schema"]["strict"] is True


async def test_an_open_map_goes_out_as_declared(emu: Emulator, local_config: Config) -> None:
    value = {"type": "Feature", "properties": {"name": "Pollux"}}
    emu.script("local", Reply(structured=value))
    out = await pollux.run("A feature?", config=local_config, output=OpenFeature)
    assert out.structured == OpenFeature(**value)
    body = emu.requests_for("local.chat")[-1].json
    assert isinstance(body, dict)
    spec = body["response_format"]["json_schema"]
    assert spec["strict"] is False
    assert spec["schema"] == OpenFeature.model_json_schema()
