"""Turn a user's JSON Schema into the subset Gemini serves, without changing its meaning.

Gemini's ``responseJsonSchema`` (structured output) and ``parametersJsonSchema`` (function
declarations) take JSON Schema, but only a subset of it. :func:`gemini_schema` returns a new
schema (the user's dict is never modified) where:

- local ``$ref`` are inlined and ``$defs`` / ``definitions`` dropped (a recursive ``$ref`` cannot
  be inlined: ConfigurationError);
- ``title``, ``default``, ``examples``, ``$schema``, ``$id`` and ``$comment`` are dropped (they
  annotate, they do not constrain);
- ``additionalProperties: false`` is dropped (Gemini only produces declared properties anyway);
  ``additionalProperties`` ``true`` or a schema (a free-form map) cannot be served:
  ConfigurationError with a hint;
- nullable values are mapped: ``anyOf: [X, {"type": "null"}]`` (what pydantic emits for
  ``X | None``) and OpenAPI ``nullable: true`` both become ``type: [<X's type>, "null"]``;
- ``oneOf`` becomes ``anyOf`` and a one-element ``allOf`` is merged into its parent;
- keywords Gemini ignores or rejects (``patternProperties``, ``not``, ``if``/``then``/``else``,
  ``dependentSchemas``, ``unevaluatedProperties``, multi-element ``allOf``) raise
  ConfigurationError, so a constraint is never dropped silently.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pollux.errors import ConfigurationError

__all__ = ["gemini_schema"]

_ANNOTATIONS = frozenset(
    {"title", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly"}
)
_UNSUPPORTED = (
    "patternProperties",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
)
_SCHEMA_LISTS = ("anyOf", "prefixItems")
_MAX_DEPTH = 64


def gemini_schema(schema: Mapping[str, Any], *, what: str = "output schema") -> dict[str, Any]:
    """Return the Gemini-servable copy of ``schema``.

    Args:
        schema: A JSON Schema object (from a pydantic model or written by hand).
        what: What the schema is, quoted in errors (``"output schema"``, ``"tool 'x'"``).

    Returns:
        A new schema; the input is not modified.

    Raises:
        ConfigurationError: The schema uses a construct Gemini cannot serve; the hint says
            how to express it instead.
    """
    # References resolve against a pristine copy: cleaning drops $defs from the working one.
    root = copy.deepcopy(dict(schema))
    result = _clean(copy.deepcopy(root), root, what=what, seen=(), depth=0)
    if not isinstance(result, dict):  # pragma: no cover - a dict in, a dict out
        raise ConfigurationError(f"The {what} must be a JSON object schema")
    return result


def _resolve(root: Mapping[str, Any], ref: str, what: str) -> dict[str, Any]:
    if not ref.startswith("#"):
        raise ConfigurationError(
            f"The {what} uses a remote $ref {ref!r}, which Gemini cannot resolve",
            hint="Inline the referenced schema, or use local references (#/$defs/...).",
        )
    node: Any = root
    for key in ref[2:].split("/") if ref != "#" else ():
        key = key.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or key not in node:
            raise ConfigurationError(
                f"The {what} has an unresolvable $ref {ref!r}", hint="Check the schema's $defs."
            )
        node = node[key]
    if not isinstance(node, Mapping):
        raise ConfigurationError(f"$ref {ref!r} in the {what} does not point to a schema")
    return copy.deepcopy(dict(node))


def _null_branch(node: Any) -> bool:
    return isinstance(node, Mapping) and node.get("type") == "null" and len(node) == 1


def _with_null(node: dict[str, Any]) -> dict[str, Any] | None:
    """``node`` made nullable through its ``type``, or None when it has no simple type."""
    kind = node.get("type")
    if isinstance(kind, str):
        node["type"] = [kind, "null"] if kind != "null" else "null"
        if "enum" in node and None not in node["enum"]:
            node["enum"] = [*node["enum"], None]
        return node
    if isinstance(kind, list):
        if "null" not in kind:
            node["type"] = [*kind, "null"]
        return node
    return None


def _clean(
    node: Any, root: Mapping[str, Any], *, what: str, seen: tuple[str, ...], depth: int
) -> Any:
    if depth > _MAX_DEPTH:
        raise ConfigurationError(
            f"The {what} nests deeper than {_MAX_DEPTH} levels",
            hint="Flatten the schema; Gemini limits schema depth.",
        )
    if isinstance(node, list):
        return [_clean(item, root, what=what, seen=seen, depth=depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.pop("$ref", None)
    if isinstance(ref, str):
        if ref in seen:
            raise ConfigurationError(
                f"The {what} is recursive ($ref {ref!r} refers to itself), which Gemini "
                "cannot serve",
                hint="Bound the recursion: replace the self-reference with a fixed number of "
                "nested levels, or a JSON string field you parse yourself.",
            )
        target = _resolve(root, ref, what)
        target.update(node)  # siblings of $ref refine the referenced schema
        node = target
        seen = (*seen, ref)
    for key in _UNSUPPORTED:
        if key in node:
            raise ConfigurationError(
                f"The {what} uses {key!r}, which Gemini does not enforce",
                hint=f"Remove {key!r} and validate that constraint yourself after parsing.",
            )
    for key in _ANNOTATIONS | {"$defs", "definitions"}:
        node.pop(key, None)
    nullable = node.pop("nullable", None)
    if "oneOf" in node:
        branches = node.pop("oneOf")
        node["anyOf"] = [*node.get("anyOf", ()), *branches]
    all_of = node.pop("allOf", None)
    if all_of is not None:
        if not isinstance(all_of, list) or len(all_of) != 1 or not isinstance(all_of[0], dict):
            raise ConfigurationError(
                f"The {what} combines schemas with allOf, which Gemini does not serve",
                hint="Merge the allOf branches into one object schema.",
            )
        merged = _clean(all_of[0], root, what=what, seen=seen, depth=depth + 1)
        for key, value in merged.items():
            node.setdefault(key, value)
    extra = node.pop("additionalProperties", None)
    if extra is not None and extra is not False:
        raise ConfigurationError(
            f"The {what} allows additionalProperties (a free-form map), which Gemini cannot serve",
            hint="Declare the keys as properties, or use a list of {key, value} objects.",
        )
    properties = node.get("properties")
    if isinstance(properties, dict):
        node["properties"] = {
            name: _clean(sub, root, what=what, seen=seen, depth=depth + 1)
            for name, sub in properties.items()
        }
    if "items" in node:
        node["items"] = _clean(node["items"], root, what=what, seen=seen, depth=depth + 1)
    for key in _SCHEMA_LISTS:
        if key in node:
            node[key] = _clean(node[key], root, what=what, seen=seen, depth=depth + 1)
    branches = node.get("anyOf")
    if isinstance(branches, list) and any(_null_branch(b) for b in branches):
        rest = [b for b in branches if not _null_branch(b)]
        if len(rest) == 1 and isinstance(rest[0], dict) and "type" in rest[0]:
            # pydantic's ``X | None``: one typed branch plus null becomes a nullable type.
            single = dict(rest[0])
            for key, value in node.items():
                if key != "anyOf":
                    single.setdefault(key, value)
            made = _with_null(single)
            if made is not None:
                node = made
    if nullable is True:
        made = _with_null(node)
        node = {"anyOf": [node, {"type": "null"}]} if made is None else made
    return node
