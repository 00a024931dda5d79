"""JSON Schema helpers: a deterministic value generator and the strict-mode check.

The generator produces one value that validates against the schema, so structured-output code can
be tested end to end without a model. The strict check reproduces the rejection OpenAI-style APIs
give to ``strict: true`` schemas that leave an object open or a property optional.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "time": "00:00:00Z",
    "duration": "P1D",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "uri": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
_MAX_DEPTH = 12


def generate_value(schema: Any, name: str = "value") -> Any:
    """A value valid against ``schema``, chosen deterministically.

    Supports object, array, string, number, integer, boolean, null, enum, const,
    anyOf/oneOf/allOf and local ``$ref``.
    """
    return _gen(schema, schema, name, 0)


def _resolve(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        raise ValueError(f"only local $ref is supported, got {ref!r}")
    node = root
    for raw in ref[1:].split("/"):
        if not raw:
            continue
        key = raw.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _merge_all_of(schema: Mapping[str, Any], root: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for sub in schema["allOf"]:
        part = _resolve(root, sub["$ref"]) if isinstance(sub, Mapping) and "$ref" in sub else sub
        if not isinstance(part, Mapping):
            continue
        for key, value in part.items():
            if key == "properties":
                merged.setdefault("properties", {}).update(value)
            elif key == "required":
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _gen(schema: Any, root: Any, name: str, depth: int) -> Any:
    if schema is True or schema == {}:
        return name
    if not isinstance(schema, Mapping):
        return None
    if depth > 8 * _MAX_DEPTH:
        raise ValueError("the schema recurses without a way out (no optional or empty branch)")
    if "$ref" in schema:
        return _gen(_resolve(root, schema["$ref"]), root, name, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "allOf" in schema:
        return _gen(_merge_all_of(schema, root), root, name, depth + 1)
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = list(schema[key])
            # Prefer a non-null branch (more informative), and a shallow one when deep already.
            chosen = next((o for o in options if not _is_null(o)), options[0])
            if depth > _MAX_DEPTH:
                chosen = next((o for o in options if _is_null(o)), chosen)
            return _gen(chosen, root, name, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        non_null = [k for k in kind if k != "null"]
        kind = non_null[0] if non_null else "null"
    if kind is None:
        if "properties" in schema:
            kind = "object"
        elif "items" in schema or "prefixItems" in schema:
            kind = "array"
        else:
            kind = "string"
    if kind == "object":
        return _gen_object(schema, root, depth)
    if kind == "array":
        return _gen_array(schema, root, name, depth)
    if kind == "string":
        return _gen_string(schema, name)
    if kind == "integer":
        return _gen_number(schema, integer=True)
    if kind == "number":
        return _gen_number(schema, integer=False)
    if kind == "boolean":
        return True
    return None


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") == "null"


def _gen_object(schema: Mapping[str, Any], root: Any, depth: int) -> dict[str, Any]:
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    out: dict[str, Any] = {}
    for key, sub in props.items():
        if depth > _MAX_DEPTH and key not in required:
            continue
        out[key] = _gen(sub, root, key, depth + 1)
    for key in required - set(out):
        out[key] = key
    min_props = int(schema.get("minProperties", 0))
    extra = schema.get("additionalProperties", True)
    index = 0
    while len(out) < min_props and extra is not False:
        out[f"key{index}"] = _gen(extra, root, f"key{index}", depth + 1) if extra else "value"
        index += 1
    return out


def _gen_array(schema: Mapping[str, Any], root: Any, name: str, depth: int) -> list[Any]:
    prefix = list(schema.get("prefixItems") or ())
    items = schema.get("items", {})
    low = int(schema.get("minItems", 0))
    high = schema.get("maxItems")
    count = max(low, len(prefix), 0 if depth > _MAX_DEPTH else 1)
    if high is not None:
        count = min(count, int(high))
    out: list[Any] = []
    for index in range(count):
        sub = prefix[index] if index < len(prefix) else items
        value = _gen(sub, root, name, depth + 1)
        if schema.get("uniqueItems") and isinstance(value, (int, float)) and value in out:
            value = value + index
        elif schema.get("uniqueItems") and isinstance(value, str) and value in out:
            value = f"{value}{index}"
        out.append(value)
    return out


def _gen_string(schema: Mapping[str, Any], name: str) -> str:
    value = _FORMATS.get(str(schema.get("format", "")), name or "value")
    low = int(schema.get("minLength", 0))
    high = schema.get("maxLength")
    if len(value) < low:
        value = value + "x" * (low - len(value))
    if high is not None and len(value) > int(high):
        value = value[: int(high)]
    return value


def _gen_number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    low = schema.get("minimum")
    high = schema.get("maximum")
    xlow = schema.get("exclusiveMinimum")
    xhigh = schema.get("exclusiveMaximum")
    step = schema.get("multipleOf")
    lo = -math.inf if low is None else float(low)
    hi = math.inf if high is None else float(high)
    if isinstance(xlow, (int, float)) and not isinstance(xlow, bool):
        lo = max(lo, float(xlow) + (1 if integer else 1e-6))
    if isinstance(xhigh, (int, float)) and not isinstance(xhigh, bool):
        hi = min(hi, float(xhigh) - (1 if integer else 1e-6))
    value = 1.0
    if value < lo:
        value = lo
    if value > hi:
        value = hi
    if step:
        value = math.ceil(value / float(step)) * float(step)
        if value > hi:
            value -= float(step)
    if integer:
        result = math.ceil(value) if value >= lo else int(value)
        return int(min(result, hi)) if hi != math.inf else int(result)
    return float(value)


def strict_schema_problem(schema: Any, path: tuple[str, ...] = ()) -> str | None:
    """Why ``schema`` is not a valid strict-mode schema, in the provider's words, or ``None``."""
    if not isinstance(schema, Mapping):
        return None
    context = "(" + ", ".join(repr(p) for p in path) + ("," if len(path) == 1 else "") + ")"
    kind = schema.get("type")
    is_object = kind == "object" or (isinstance(kind, list) and "object" in kind)
    if is_object or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return (
                f"In context={context}, 'additionalProperties' is required to be supplied and "
                "to be false."
            )
        props = list((schema.get("properties") or {}).keys())
        required = schema.get("required")
        missing = [p for p in props if not isinstance(required, list) or p not in required]
        if missing:
            return (
                f"In context={context}, 'required' is required to be supplied and to be an array "
                f"including every key in properties. Missing '{missing[0]}'."
            )
    for key, sub in (schema.get("properties") or {}).items():
        problem = strict_schema_problem(sub, (*path, "properties", key))
        if problem:
            return problem
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            problem = strict_schema_problem(schema[key], (*path, key))
            if problem:
                return problem
    for key in ("anyOf", "allOf", "prefixItems"):
        for index, sub in enumerate(schema.get(key) or ()):
            problem = strict_schema_problem(sub, (*path, key, str(index)))
            if problem:
                return problem
    for key in ("$defs", "definitions"):
        for name, sub in (schema.get(key) or {}).items():
            problem = strict_schema_problem(sub, (*path, key, name))
            if problem:
                return problem
    return None
