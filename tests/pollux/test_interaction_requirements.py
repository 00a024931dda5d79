from __future__ import annotations

import pydantic
import pytest

from pollux import ConfigurationError, OutputRequirements
from pollux.interaction.requirements import is_pydantic_model_class


class Person(pydantic.BaseModel):
    name: str
    age: int


def test_defaults_are_all_none() -> None:
    req = OutputRequirements()
    assert req.output_schema_json() is None
    assert req.output_schema_model() is None
    assert req.output_schema_hash() is None
    assert req.provider_options_for("openai") is None


def test_pydantic_schema() -> None:
    req = OutputRequirements(output_schema=Person)
    schema = req.output_schema_json()
    assert schema is not None and set(schema["properties"]) == {"name", "age"}
    assert req.output_schema_model() is Person
    assert req.output_schema_hash() == OutputRequirements(output_schema=Person).output_schema_hash()


def test_dict_schema_hash_is_key_order_independent() -> None:
    a = {"type": "object", "properties": {"x": {"type": "string"}}}
    b = {"properties": {"x": {"type": "string"}}, "type": "object"}
    ra, rb = OutputRequirements(output_schema=a), OutputRequirements(output_schema=b)
    assert ra.output_schema_hash() == rb.output_schema_hash()
    assert ra.output_schema_model() is None
    assert ra.output_schema_json() == a and ra.output_schema_json() is not a
    other = OutputRequirements(
        output_schema={"type": "object", "properties": {"y": {"type": "string"}}}
    )
    assert other.output_schema_hash() != ra.output_schema_hash()


def test_is_pydantic_model_class() -> None:
    assert is_pydantic_model_class(Person)
    assert not is_pydantic_model_class(Person(name="a", age=1))
    assert not is_pydantic_model_class(dict)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"output_schema": "schema"},
        {"output_schema": Person(name="a", age=1)},
        {"output_schema": dict},
        {"output_schema": {"x": float("nan")}},
        {"max_tokens": 0},
        {"max_tokens": -5},
        {"max_tokens": True},
        {"max_tokens": 10.0},
        {"reasoning_budget_tokens": -1},
        {"reasoning_budget_tokens": False},
        {"reasoning_effort": "low", "reasoning_budget_tokens": 100},
        {"reasoning_effort": ""},
        {"seed": 1.5},
        {"seed": True},
        {"temperature": -0.1},
        {"temperature": "hot"},
        {"top_p": 1.5},
        {"top_p": float("nan")},
        {"tool_choice": "sometimes"},
        {"tool_choice": {"name": ""}},
        {"tool_choice": {"name": "t", "extra": 1}},
        {"provider_options": {"bedrock": {}}},
        {"provider_options": {"openai": "x"}},
        {"provider_options": ["openai"]},
    ],
)
def test_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as info:
        OutputRequirements(**kwargs)  # type: ignore[arg-type]
    assert info.value.hint


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 1},
        {"reasoning_budget_tokens": 0},
        {"reasoning_effort": "high"},
        {"seed": -3},
        {"temperature": 0},
        {"top_p": 1},
        {"tool_choice": "required"},
        {"tool_choice": {"name": "lookup"}},
    ],
)
def test_valid_values(kwargs: dict[str, object]) -> None:
    req = OutputRequirements(**kwargs)  # type: ignore[arg-type]
    # Each accepted value is kept as given, not dropped or coerced to a default.
    for name, value in kwargs.items():
        assert getattr(req, name) == value


def test_provider_options_for_returns_a_copy() -> None:
    req = OutputRequirements(provider_options={"openai": {"store": False}, "gemini": {"x": 1}})
    opts = req.provider_options_for("openai")
    assert opts == {"store": False}
    assert opts is not None
    opts["store"] = True
    assert req.provider_options_for("openai") == {"store": False}
    assert req.provider_options_for("anthropic") is None
