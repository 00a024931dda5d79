"""The one strict-schema rule, shared by every provider that sends ``strict: true``.

Strict structured output and strict function tools (OpenAI Responses, Chat Completions servers,
and any provider added later) accept a subset of JSON Schema: every object is closed
(``additionalProperties: false``) and lists *every* property in ``required``. A converter that
only does that changes what the user declared: an optional property becomes mandatory, and the
model is told to invent a value. :func:`strict_schema` keeps the declared meaning:

- an optional property (not in the declared ``required``) becomes required **and nullable**
  (``"type": ["string", "null"]``, or ``anyOf: [..., {"type": "null"}]``), so the model may
  answer ``null`` for "absent", the way strict-schema converters do it;
- ``$ref`` with sibling keywords is inlined (strict mode allows no siblings next to ``$ref``),
  and ``default: null`` is dropped (strict mode rejects it);
- when strict mode cannot express the schema (an open map: ``additionalProperties`` that is
  ``true`` or a schema, ``patternProperties``, or an object without ``properties``), it returns
  ``None`` and the caller sends the schema as declared, with ``strict: false``.

On the way back, :func:`drop_null_optionals` removes the ``null`` the model sent for an optional
property whose declared schema does not accept ``null``, so the value validates against what the
user declared (a pydantic field with a default gets its default). The user's schema is never
modified: both functions work on copies.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pollux.errors import ConfigurationError
from pollux.interaction._json import is_finite_number

__all__ = ["drop_null_optionals", "schema_problem", "strict_schema"]

# Keywords whose values are schemas (or maps / lists of schemas). Only these are walked, so data
# such as enum values, defaults, examples, or a *property named* "properties" or "required", is
# never mistaken for a schema.
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = ("items", "not", "if", "then", "else", "contains", "propertyNames")


class _NotStrictable(Exception):
    """The schema has a part strict mode cannot express without changing its meaning."""


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """A strict-mode copy of ``schema`` with the declared meaning kept, or ``None``.

    Args:
        schema: A JSON Schema (the tool's parameters, or the output schema).

    Returns:
        The strict schema, or ``None`` when strict mode cannot express ``schema`` (send it
        as declared, without ``strict``).

    Raises:
        ConfigurationError: A ``$ref`` is not local or does not resolve.
    """
    root = copy.deepcopy(dict(schema))
    try:
        strict: dict[str, Any] = _strictify(root, root)
    except _NotStrictable:
        return None
    return strict


def _resolve_ref(root: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    if not ref.startswith("#/"):
        raise ConfigurationError(
            f"Unsupported $ref {ref!r} in an output or tool schema",
            hint="Use local references (#/$defs/...) only.",
        )
    node: Any = root
    for key in ref[2:].split("/"):
        if not isinstance(node, Mapping) or key not in node:
            raise ConfigurationError(
                f"Unresolvable $ref {ref!r} in an output or tool schema",
                hint="Check the schema's $defs.",
            )
        node = node[key]
    if not isinstance(node, Mapping):
        raise ConfigurationError(
            f"$ref {ref!r} does not point to a schema", hint="Check the schema's $defs."
        )
    return node


def _is_object(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return (
        kind == "object"
        or (isinstance(kind, list) and "object" in kind)
        or ("properties" in node and "type" not in node)
    )


def _strictify(node: Any, root: Mapping[str, Any]) -> Any:
    if isinstance(node, list):
        return [_strictify(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        merged = dict(copy.deepcopy(_resolve_ref(root, ref)))
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        node = merged
    if "patternProperties" in node:
        raise _NotStrictable
    for key in _SCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            node[key] = {name: _strictify(sub, root) for name, sub in value.items()}
    for key in (*_SCHEMA_LISTS, *_SCHEMA_VALUES):
        if key in node:
            node[key] = _strictify(node[key], root)
    if "default" in node and node["default"] is None:
        del node["default"]
    if _is_object(node):
        extra = node.get("additionalProperties", "properties" not in node)
        if extra is not False:
            # An open map (dict[str, X]) has no closed strict form.
            raise _NotStrictable
        properties = node.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        declared = node.get("required")
        required = set(declared) if isinstance(declared, list) else set()
        node["properties"] = {
            name: sub if name in required else _nullable(sub, root)
            for name, sub in properties.items()
        }
        node["required"] = list(properties)
        node["additionalProperties"] = False
    return node


def accepts_null(node: Any, root: Mapping[str, Any]) -> bool:
    """True when a (declared) schema accepts ``null``."""
    if not isinstance(node, Mapping):
        return node is True
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            target = _resolve_ref(root, ref)
        except ConfigurationError:
            return False
        if accepts_null(target, root):
            return True
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list) and any(accepts_null(o, root) for o in options):
            return True
    if "const" in node:
        return node["const"] is None
    if isinstance(node.get("enum"), list):
        return None in node["enum"]
    constrained = ("type", "$ref", "anyOf", "oneOf", "allOf", "not", "properties", "items")
    return not any(key in node for key in constrained)


def _nullable(node: Any, root: Mapping[str, Any]) -> Any:
    if not isinstance(node, dict) or accepts_null(node, root):
        return node
    kind = node.get("type")
    if "const" not in node and "$ref" not in node:
        if isinstance(kind, str):
            out = {**node, "type": [kind, "null"]}
            if isinstance(node.get("enum"), list):
                out["enum"] = [*node["enum"], None]
            return out
        if isinstance(kind, list):
            out = {**node, "type": [*kind, "null"]}
            if isinstance(node.get("enum"), list):
                out["enum"] = [*node["enum"], None]
            return out
        if kind is None and isinstance(node.get("enum"), list):
            return {**node, "enum": [*node["enum"], None]}
        if isinstance(node.get("anyOf"), list) and len(node) == 1:
            return {"anyOf": [*node["anyOf"], {"type": "null"}]}
    return {"anyOf": [node, {"type": "null"}]}


def drop_null_optionals(value: Any, schema: Mapping[str, Any]) -> Any:
    """Remove ``null`` answers for optional properties whose declared schema rejects ``null``.

    The counterpart of :func:`strict_schema`: the model answered ``null`` for "absent", so the
    property is absent again, as declared. Values are copied, never changed in place.

    Args:
        value: The parsed JSON answer.
        schema: The schema the user declared (not the strict copy).
    """
    return _drop(value, schema, schema)


def _drop(value: Any, node: Any, root: Mapping[str, Any]) -> Any:
    if not isinstance(node, Mapping):
        return value
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            target = _resolve_ref(root, ref)
        except ConfigurationError:
            return value
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if isinstance(value, dict):
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            declared = node.get("required")
            required = set(declared) if isinstance(declared, list) else set()
            out: dict[str, Any] = {}
            for key, item in value.items():
                sub = properties.get(key)
                if (
                    item is None
                    and sub is not None
                    and key not in required
                    and not accepts_null(sub, root)
                ):
                    continue
                out[key] = _drop(item, sub, root) if sub is not None else item
            return out
        for key in ("anyOf", "oneOf", "allOf"):
            options = node.get(key)
            if isinstance(options, list):
                for option in options:
                    if isinstance(option, Mapping) and not accepts_null(option, root):
                        return _drop(value, option, root)
        return value
    if isinstance(value, list):
        items = node.get("items")
        if isinstance(items, Mapping):
            return [_drop(item, items, root) for item in value]
    return value


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
}


def _has_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        # JSON Schema counts 3.0 as an integer (a number with no fractional part).
        if isinstance(value, float):
            return value.is_integer()
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return True if expected is None else isinstance(value, expected)


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``value`` does not match ``schema`` (the core keywords), or ``None`` when it does.

    Used for output schemas given as JSON Schema dicts (a pydantic model validates itself).
    Checked: ``type``, ``enum``, ``const``, ``properties``, ``required``, closed
    ``additionalProperties``, ``items``, ``prefixItems``, ``anyOf`` / ``oneOf`` / ``allOf``,
    local ``$ref``, string and array lengths and numeric bounds. Other keywords (``format``,
    ``pattern``) are not checked, so a value is never refused for a rule pollux cannot judge.
    """
    return _problem(value, schema, schema, "$", 0)


def _problem(value: Any, node: Any, root: Mapping[str, Any], path: str, depth: int) -> str | None:
    if not isinstance(node, Mapping) or depth > 64:
        return None if node is not False else f"{path}: no value is allowed here"
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            target = _resolve_ref(root, ref)
        except ConfigurationError:
            return None
        problem = _problem(value, target, root, path, depth + 1)
        if problem is not None:
            return problem
    kind = node.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if kinds is not None and not any(_has_type(value, str(k)) for k in kinds):
        return f"{path}: expected {' or '.join(map(str, kinds))}, got {_kind(value)}"
    if "const" in node and value != node["const"]:
        return f"{path}: expected {node['const']!r}"
    enum = node.get("enum")
    if isinstance(enum, list) and value not in enum:
        return f"{path}: {value!r} is not one of {enum!r}"[:300]
    for key in ("allOf", "anyOf", "oneOf"):
        options = node.get(key)
        if not isinstance(options, list) or not options:
            continue
        problems = [_problem(value, o, root, path, depth + 1) for o in options]
        fits = sum(p is None for p in problems)
        if key == "allOf" and fits < len(options):
            return next(p for p in problems if p is not None)
        if key == "anyOf" and not fits:
            return problems[0]
        if key == "oneOf" and fits != 1:
            return problems[0] if not fits else f"{path}: matches more than one oneOf option"
    if isinstance(value, dict):
        return _object_problem(value, node, root, path, depth)
    if isinstance(value, list):
        return _array_problem(value, node, root, path, depth)
    if isinstance(value, str):
        if isinstance(node.get("minLength"), int) and len(value) < node["minLength"]:
            return f"{path}: shorter than {node['minLength']} characters"
        if isinstance(node.get("maxLength"), int) and len(value) > node["maxLength"]:
            return f"{path}: longer than {node['maxLength']} characters"
    if is_finite_number(value):
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            bound = node.get(key)
            if is_finite_number(bound) and _out_of_bound(key, value, bound):
                return f"{path}: {value!r} violates {key} {bound!r}"
    return None


def _out_of_bound(key: str, value: float, raw: Any) -> bool:
    bound = float(raw)
    if key == "minimum":
        return value < bound
    if key == "maximum":
        return value > bound
    if key == "exclusiveMinimum":
        return value <= bound
    return value >= bound


def _object_problem(
    value: dict[str, Any], node: Mapping[str, Any], root: Mapping[str, Any], path: str, depth: int
) -> str | None:
    properties = node.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = node.get("required")
    if isinstance(required, list):
        missing = [name for name in required if name not in value]
        if missing:
            return f"{path}: missing required {', '.join(map(str, missing))}"
    extra = node.get("additionalProperties", True)
    for key, item in value.items():
        sub = properties.get(key)
        if sub is None:
            if extra is False:
                return f"{path}: unexpected property {key!r}"
            sub = extra if isinstance(extra, Mapping) else None
        if sub is not None:
            problem = _problem(item, sub, root, f"{path}.{key}", depth + 1)
            if problem is not None:
                return problem
    return None


def _array_problem(
    value: list[Any], node: Mapping[str, Any], root: Mapping[str, Any], path: str, depth: int
) -> str | None:
    if isinstance(node.get("minItems"), int) and len(value) < node["minItems"]:
        return f"{path}: fewer than {node['minItems']} items"
    if isinstance(node.get("maxItems"), int) and len(value) > node["maxItems"]:
        return f"{path}: more than {node['maxItems']} items"
    prefix = node.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    items = node.get("items")
    for index, item in enumerate(value):
        sub = prefix[index] if index < len(prefix) else items
        problem = _problem(item, sub, root, f"{path}[{index}]", depth + 1)
        if problem is not None:
            return problem
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else type(value).__name__
