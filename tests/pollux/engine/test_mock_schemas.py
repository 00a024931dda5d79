"""The mock's structured output validates against the requested schema, for common field types."""

from __future__ import annotations

import datetime
import decimal
import enum
import uuid
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import AnyUrl, BaseModel, Field, conint, constr

import pollux
from pollux import Config
from pollux.providers.mock import fake_from_schema


class Colour(enum.Enum):
    RED = "red"


class Everything(BaseModel):
    when: datetime.datetime
    day: datetime.date
    clock: datetime.time
    span: datetime.timedelta
    ident: uuid.UUID
    url: AnyUrl
    code: constr(max_length=2)  # type: ignore[valid-type]
    small: conint(gt=0, lt=5)  # type: ignore[valid-type]
    ratio: float = Field(gt=1.5, lt=1.6)
    week: int = Field(multiple_of=7, ge=1)
    airport: str = Field(pattern=r"^[A-Z]{3}$")
    zip_code: str = Field(pattern=r"^\d{5}(-\d{4})?$")
    choice: Literal["a", "b"]
    colour: Colour
    maybe: int | None
    tags: list[str] = Field(min_length=3, max_length=3)
    pair: tuple[int, str]
    amount: decimal.Decimal
    distinct: set[int] = Field(min_length=2)
    counts: dict[str, int] = Field(min_length=1)


async def test_every_common_field_type_validates() -> None:
    config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
    out = await pollux.run("Fill it in", config=config, output=Everything)
    assert "structured_error" not in out.diagnostics.raw, out.diagnostics.raw["structured_error"]
    assert isinstance(out.structured, Everything)
    assert out.structured.airport == "AAA" and 1.5 < out.structured.ratio < 1.6


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 5},
        {"type": "integer", "maximum": -4},
        {"type": "number", "exclusiveMaximum": -1},
        {"type": "number", "minimum": 2, "multipleOf": 0.25},
        {"type": "string", "format": "email"},
        {"type": "string", "pattern": "^(foo|bar)-[a-f0-9]{2,}[^x]$"},
        {"type": "string", "minLength": 6},
        {"type": "array", "items": {"type": "integer"}, "minItems": 3, "uniqueItems": True},
        {"type": "array", "items": {"type": "string"}, "maxItems": 0},
        {"type": "object", "additionalProperties": {"type": "boolean"}, "minProperties": 2},
    ],
)
def test_raw_schemas_validate(schema: dict[str, Any]) -> None:
    jsonschema.validate(fake_from_schema(schema), schema)
