"""A structural check of a JSON Schema given as ``output_schema`` (private).

Not a validator of values: it catches a schema that is not a JSON Schema at all (a misspelt
``type``, ``properties`` that is not an object) before any provider call, where a provider would
otherwise answer with ``null`` or an opaque 400. Keywords it does not know are left alone, as
JSON Schema itself does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pollux.errors import ConfigurationError

__all__ = ["check_schema"]

_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")
_ONE_SCHEMA = (
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
)
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_HINT = "Use JSON Schema's types and keywords (the path names the spot), or pass a Pydantic model."


def check_schema(schema: Mapping[str, Any], *, what: str = "output_schema") -> None:
    """Raise when ``schema`` is not structurally a JSON Schema.

    Raises:
        ConfigurationError: The first problem, with its JSON path (``$.properties.x.type``).
    """
    problem = _problem(schema, "$", 0)
    if problem is not None:
        raise ConfigurationError(f"{what} is not a valid JSON Schema: {problem}", hint=_HINT)


def _problem(node: Any, path: str, depth: int) -> str | None:
    if isinstance(node, bool):  # true and false are schemas
        return None
    if not isinstance(node, Mapping):
        return f"{path} must be a schema object, got {type(node).__name__}"
    if depth > 64:
        return f"{path} is nested too deeply"
    kinds = node.get("type")
    if kinds is not None:
        for kind in kinds if isinstance(kinds, list) else [kinds]:
            if kind not in _TYPES:
                return f"{path}.type: {kind!r} is not a JSON Schema type ({', '.join(_TYPES)})"
    required = node.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(name, str) for name in required)
    ):
        return f"{path}.required must be a list of property names"
    if "enum" in node and not isinstance(node["enum"], list):
        return f"{path}.enum must be a list"
    for key in _ONE_SCHEMA:
        if key in node and (found := _problem(node[key], f"{path}.{key}", depth + 1)):
            return found
    items = node.get("items")
    if items is not None:
        found = (
            next(
                (
                    p
                    for i, s in enumerate(items)
                    if (p := _problem(s, f"{path}.items[{i}]", depth + 1))
                ),
                None,
            )
            if isinstance(items, list)
            else _problem(items, f"{path}.items", depth + 1)
        )
        if found:
            return found
    for key in _SCHEMA_LISTS:
        if key not in node:
            continue
        value = node[key]
        if not isinstance(value, list):
            return f"{path}.{key} must be a list of schemas"
        for index, item in enumerate(value):
            if found := _problem(item, f"{path}.{key}[{index}]", depth + 1):
                return found
    for key in _SCHEMA_MAPS:
        if key not in node:
            continue
        value = node[key]
        if not isinstance(value, Mapping):
            return f"{path}.{key} must be an object of schemas"
        for name, item in value.items():
            if found := _problem(item, f"{path}.{key}.{name}", depth + 1):
                return found
    return None
