"""Small JSON helpers shared by the interaction types (private)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from pollux.errors import ConfigurationError

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
"""A JSON-compatible value."""


def is_finite_number(value: object) -> bool:
    """True for an int or float that converts to a finite float.

    A huge JSON integer such as ``10**400`` is not: converting it would raise
    ``OverflowError``, which no loader may let escape.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


#: How deep a JSON Schema may nest. Providers accept far less (OpenAI's strict mode 10 levels,
#: Gemini 64); deeper ones would only make schema walkers (strict mode, the mock's fake answers,
#: validation) recurse to Python's limit.
SCHEMA_MAX_DEPTH = 100


def json_copy(value: Any, *, what: str = "value", max_depth: int | None = None) -> Any:
    """Return a deep copy of a JSON-compatible value, with tuples turned into lists.

    Args:
        value: The value.
        what: Its name in error messages.
        max_depth: Refuse containers nested deeper than this (None: Python's own limit).

    Raises:
        ConfigurationError: The value holds something JSON cannot represent (a non-string
            key, NaN/infinity, or a non-JSON object), or is nested too deeply.
    """
    try:
        copied = _json_copy(value, what)
    except RecursionError:
        raise ConfigurationError(
            f"{what} is nested too deeply", hint="Flatten the data structure."
        ) from None
    if max_depth is not None and _depth(copied) > max_depth:
        raise ConfigurationError(
            f"{what} nests deeper than {max_depth} levels", hint="Flatten the data structure."
        )
    return copied


def _depth(value: Any) -> int:
    """How deep lists and dicts nest in ``value`` (iterative: no recursion limit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _json_copy(value: Any, what: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigurationError(
                f"{what} holds a non-finite number ({value!r})",
                hint="JSON has no NaN or infinity; use null or a string.",
            )
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigurationError(
                    f"{what} has a non-string key {key!r}",
                    hint="JSON object keys must be strings.",
                )
            out[key] = _json_copy(item, what)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_copy(item, what) for item in value]
    raise ConfigurationError(
        f"{what} is not JSON-compatible: {type(value).__name__}",
        hint="Use dicts, lists, strings, numbers, booleans and None only.",
    )


def jsonable(value: Any) -> Any:
    """Best-effort conversion to JSON-compatible data (pydantic models are dumped)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return jsonable(dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return repr(value)


def canonical_dumps(value: Any) -> str:
    """Canonical JSON text: sorted keys, no spaces, ASCII only."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def require_mapping(data: object, what: str) -> Mapping[str, Any]:
    """Return ``data`` when it is a mapping, else raise ConfigurationError."""
    if not isinstance(data, Mapping):
        raise ConfigurationError(
            f"{what} must be a JSON object, got {type(data).__name__}",
            hint=f"Pass the dict that {what}.to_jsonable() (or to_dict()) produced.",
        )
    return data


def get_str(data: Mapping[str, Any], key: str, what: str, *, default: str | None = None) -> str:
    """Read a required string field (or ``default`` when missing)."""
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{what}.{key} must be a string, got {describe(value)}",
            hint=f"Pass the dict that {what}.to_jsonable() produced, unedited.",
        )
    return value


def get_opt_str(data: Mapping[str, Any], key: str, what: str) -> str | None:
    """Read an optional string field."""
    value = data.get(key)
    if value is None:
        return None
    return get_str(data, key, what)


def get_int(
    data: Mapping[str, Any], key: str, what: str, *, default: int | None = None, minimum: int = 0
) -> int:
    """Read a required non-negative integer field (or ``default`` when missing)."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"{what}.{key} must be an integer >= {minimum}, got {describe(value)}",
            hint=f"Pass the dict that {what}.to_jsonable() produced, unedited.",
        )
    return value


def get_opt_int(data: Mapping[str, Any], key: str, what: str, *, minimum: int = 0) -> int | None:
    """Read an optional non-negative integer field."""
    if data.get(key) is None:
        return None
    return get_int(data, key, what, minimum=minimum)


def get_float(
    data: Mapping[str, Any], key: str, what: str, *, default: float | None = None
) -> float:
    """Read a required finite number field (or ``default`` when missing)."""
    value = data.get(key, default)
    if not is_finite_number(value):
        raise ConfigurationError(
            f"{what}.{key} must be a finite number, got {describe(value)}",
            hint=f"Pass the dict that {what}.to_jsonable() produced, unedited.",
        )
    return float(value)


def get_opt_float(data: Mapping[str, Any], key: str, what: str) -> float | None:
    """Read an optional finite number field."""
    if data.get(key) is None:
        return None
    return get_float(data, key, what)


def get_bool(data: Mapping[str, Any], key: str, what: str, *, default: bool) -> bool:
    """Read a boolean field."""
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigurationError(
            f"{what}.{key} must be true or false, got {describe(value)}",
            hint=f"Pass the dict that {what}.to_jsonable() produced, unedited.",
        )
    return value


def get_list(data: Mapping[str, Any], key: str, what: str) -> Sequence[Any]:
    """Read an optional list field (missing = empty)."""
    value = data.get(key)
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise ConfigurationError(
            f"{what}.{key} must be a list, got {describe(value)}",
            hint=f"Pass the dict that {what}.to_jsonable() produced, unedited.",
        )
    return value


def describe(value: object) -> str:
    """A short description of a rejected value for an error message (containers by size)."""
    if isinstance(value, (list, tuple, dict)):
        # Never repr a container: it may be huge or nested deeper than repr can go.
        return f"{type(value).__name__} of {len(value)} item(s)"
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"  # type: ignore[attr-defined]
    return text if len(text) <= 60 else f"{type(value).__name__} ({text[:40]}...)"


def check_fields(owner: object, rules: Mapping[str, str], *, hint: str) -> None:
    """Check constructor fields, so a value that was built can also be serialized and restored.

    Args:
        owner: The value being constructed.
        rules: Field name -> ``"str"``, ``"count"`` (an integer >= 0) or ``"number"`` (a finite
            number), each with a ``"?"`` suffix when ``None`` is allowed too.
        hint: The hint of the error.

    Raises:
        ConfigurationError: A field does not follow its rule.
    """
    cls = type(owner).__name__
    for name, rule in rules.items():
        value = getattr(owner, name)
        kind = rule.rstrip("?")
        if value is None and rule.endswith("?"):
            continue
        if kind == "str":
            ok = isinstance(value, str)
            expected = "a string"
        elif kind == "count":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            expected = "an integer >= 0"
        else:
            ok = is_finite_number(value)
            expected = "a finite number"
        if not ok:
            optional = " or None" if rule.endswith("?") else ""
            raise ConfigurationError(
                f"{cls}.{name} must be {expected}{optional}, got {describe(value)}", hint=hint
            )
