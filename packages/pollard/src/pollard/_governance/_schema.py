"""The JSON Schema subset that registered tools declare, checked once and validated many times.

The subset is what real tool schemas use (OpenAI function schemas, MCP and FastMCP tools, pydantic
models): ``type`` (``object, string, number, integer, boolean, array, null`` or a list of them),
``properties``, ``required``, ``additionalProperties`` (a boolean or a schema), ``items``, ``enum``,
``const``, ``anyOf``, ``oneOf``, ``allOf``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``, ``minLength``, ``maxLength``, ``pattern``, ``minItems``, ``maxItems``, local
``$ref`` into the root ``$defs`` (or ``definitions``), the annotations ``title``, ``description``,
``default``, ``examples``, ``format``, ``$comment``, ``deprecated``, ``readOnly``, ``writeOnly``,
``$schema`` (root only), and pollard's own ``sensitive: true`` on string fields.

Everything else fails closed when the schema is compiled (``UnsupportedSchema`` naming the
``$.path`` of the offending keyword), never at call time: a keyword we do not enforce must not
look enforced.

Validation returns the first finding as ``"$.path: message"``. Messages never echo the value that
was checked, so a finding can be recorded in a refusal without leaking a sensitive argument.

Semantics follow JSON Schema 2020-12 exactly on the subset, so delegating to ``jsonschema`` (the
``schema`` extra) gives the same verdicts; the test suite checks that with generated instances.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pollard.errors import UnsupportedSchema

__all__ = [
    "ANNOTATIONS",
    "SUPPORTED_KEYWORDS",
    "CompiledSchema",
    "Engine",
    "compile_schema",
    "json_equal",
    "path_join",
    "strip_keywords",
]

Engine = Literal["builtin", "jsonschema"]

TYPES = frozenset({"object", "string", "number", "integer", "boolean", "array", "null"})
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "format",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems")
_COMBINATORS = ("anyOf", "oneOf", "allOf")
SUPPORTED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "pattern",
        "$ref",
        "sensitive",
        *_NUMERIC_BOUNDS,
        *_COUNTS,
        *_COMBINATORS,
        *ANNOTATIONS,
    }
)
_ROOT_ONLY = frozenset({"$defs", "definitions", "$schema"})
_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def path_join(path: str, key: str | int) -> str:
    """Extend a ``$.path`` with an object key or an array index."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _unsupported(path: str, message: str) -> UnsupportedSchema:
    return UnsupportedSchema(
        f"{path}: {message}",
        path,
        hint=(
            "registered tool schemas use a documented JSON Schema subset "
            "(see docs/pollard/governance.md); remove or rewrite the keyword"
        ),
    )


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _type_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if _is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _has_type(value: object, name: str) -> bool:
    # The same type checker as jsonschema's Draft 2020-12: a float with an integral value is an
    # integer, a bool is never a number, and only list/dict are array/object.
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, float):
            return value.is_integer()
        return isinstance(value, int)
    if name == "number":
        return _is_number(value)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def json_equal(a: object, b: object) -> bool:
    """JSON equality: ``1 == 1.0`` but ``True != 1``; containers compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _short(value: object, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class CompiledSchema:
    """A checked schema: validates arguments and finds the sensitive fields.

    Attributes:
        schema: The schema as declared (a private deep copy).
        sensitive: True when some field is marked ``sensitive: true``.
    """

    schema: Mapping[str, Any] | bool
    sensitive: bool
    _defs: Mapping[str, Any] = field(repr=False)
    _patterns: Mapping[str, re.Pattern[str]] = field(repr=False)
    _delegate: list[Any] = field(default_factory=list, repr=False, compare=False)
    _reaches_sensitive: frozenset[int] = field(default=frozenset(), repr=False, compare=False)

    # -- validation --------------------------------------------------------------------------

    def validate(self, value: object, *, engine: Engine = "builtin") -> str | None:
        """Return the first finding as ``"$.path: message"``, or None when the value is valid."""
        if engine == "jsonschema":
            if not self._delegate:  # built once: constructing a validator costs more than using it
                self._delegate.append(_jsonschema_validator(self.schema))
            return _validate_with_jsonschema(self._delegate[0], value)
        return self._check(self.schema, value, "$")

    def _resolve(self, ref: str) -> Mapping[str, Any] | bool:
        return self.schema if ref == "#" else self._defs[ref]

    def _check(self, schema: Mapping[str, Any] | bool, value: object, path: str) -> str | None:
        if isinstance(schema, bool):
            return None if schema else f"{path}: no value is allowed here"
        declared = schema.get("type")
        if declared is not None:
            names = [declared] if isinstance(declared, str) else list(declared)
            if not any(_has_type(value, name) for name in names):
                return f"{path}: expected {' or '.join(names)}, got {_type_of(value)}"
        if "enum" in schema and not any(json_equal(value, item) for item in schema["enum"]):
            return f"{path}: value is not one of {_short(schema['enum'])}"
        if "const" in schema and not json_equal(value, schema["const"]):
            return f"{path}: value is not the constant {_short(schema['const'])}"
        finding = self._check_by_type(schema, value, path)
        if finding is not None:
            return finding
        for sub in schema.get("allOf", ()):
            finding = self._check(sub, value, path)
            if finding is not None:
                return finding
        if "anyOf" in schema and not any(
            self._check(sub, value, path) is None for sub in schema["anyOf"]
        ):
            return f"{path}: matches none of the anyOf alternatives"
        if "oneOf" in schema:
            matched = sum(self._check(sub, value, path) is None for sub in schema["oneOf"])
            if matched != 1:
                return f"{path}: matches {matched} of the oneOf alternatives (exactly 1 required)"
        if "$ref" in schema:
            return self._check(self._resolve(schema["$ref"]), value, path)
        return None

    def _check_by_type(self, schema: Mapping[str, Any], value: object, path: str) -> str | None:
        if isinstance(value, str):
            if "minLength" in schema and len(value) < schema["minLength"]:
                return f"{path}: shorter than {schema['minLength']} characters"
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                return f"{path}: longer than {schema['maxLength']} characters"
            if "pattern" in schema and not self._patterns[schema["pattern"]].search(value):
                return f"{path}: does not match the pattern {_short(schema['pattern'])}"
        elif _is_number(value):
            return _check_bounds(schema, value, path)
        elif isinstance(value, list):
            if "minItems" in schema and len(value) < schema["minItems"]:
                return f"{path}: fewer than {schema['minItems']} items"
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                return f"{path}: more than {schema['maxItems']} items"
            if "items" in schema:
                for index, item in enumerate(value):
                    finding = self._check(schema["items"], item, path_join(path, index))
                    if finding is not None:
                        return finding
        elif isinstance(value, dict):
            return self._check_object(schema, value, path)
        return None

    def _check_object(
        self, schema: Mapping[str, Any], value: dict[Any, Any], path: str
    ) -> str | None:
        for name in schema.get("required", ()):
            if name not in value:
                return f"{path}: missing required property {_short(name)}"
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key in sorted(value, key=str):
            child = path_join(path, key if isinstance(key, str) else str(key))
            if key in properties:
                finding = self._check(properties[key], value[key], child)
            elif extra is False:
                finding = f"{path}: unexpected property {_short(str(key), 64)}"
            else:
                finding = self._check(extra, value[key], child)
            if finding is not None:
                return finding
        return None

    # -- redaction ---------------------------------------------------------------------------

    def redact(self, value: object, replace: Callable[[object], object]) -> object:
        """Return a copy of ``value`` with every value at a sensitive location replaced.

        A location is sensitive when any schema that may apply there (through ``$ref``,
        ``anyOf``, ``oneOf`` and ``allOf``, whichever branch the value matches) is marked
        ``sensitive: true``: over-redaction is the safe direction. ``None`` is kept as is.
        """
        if not self.sensitive:
            return value
        return self._redact([self.schema], value, replace)

    def _expand(self, schemas: list[Mapping[str, Any] | bool]) -> Iterator[Mapping[str, Any]]:
        seen: set[int] = set()
        stack = list(schemas)
        while stack:
            schema = stack.pop()
            if isinstance(schema, bool) or id(schema) in seen:
                continue
            seen.add(id(schema))
            yield schema
            for name in _COMBINATORS:
                stack.extend(schema.get(name, ()))
            if "$ref" in schema:
                stack.append(self._resolve(schema["$ref"]))

    def _redact(
        self,
        schemas: list[Mapping[str, Any] | bool],
        value: object,
        replace: Callable[[object], object],
    ) -> object:
        applicable = list(self._expand(schemas))
        if value is not None and any(s.get("sensitive") is True for s in applicable):
            return replace(value)
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                children: list[Mapping[str, Any] | bool] = []
                for schema in applicable:
                    properties = schema.get("properties", {})
                    if key in properties:
                        children.append(properties[key])
                    elif "additionalProperties" in schema:
                        children.append(schema["additionalProperties"])
                # Only descend where a sensitive field can be reached: most fields are plain.
                children = [c for c in children if id(c) in self._reaches_sensitive]
                out[key] = self._redact(children, item, replace) if children else item
            return out
        if isinstance(value, list):
            items = [
                s["items"]
                for s in applicable
                if "items" in s and id(s["items"]) in self._reaches_sensitive
            ]
            return [self._redact(items, item, replace) for item in value] if items else value
        return value


def _check_bounds(schema: Mapping[str, Any], value: Any, path: str) -> str | None:
    if "minimum" in schema and value < schema["minimum"]:
        return f"{path}: less than the minimum {schema['minimum']}"
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        return f"{path}: not greater than {schema['exclusiveMinimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"{path}: greater than the maximum {schema['maximum']}"
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        return f"{path}: not less than {schema['exclusiveMaximum']}"
    return None


# -- compilation -------------------------------------------------------------------------------


class _Compiler:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.defs: dict[str, Any] = {}
        self.patterns: dict[str, re.Pattern[str]] = {}
        self.refs: list[tuple[str, str]] = []
        self.sensitive = False

    def check(self, schema: object, path: str, *, is_root: bool = False) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise _unsupported(
                path, f"a schema must be an object or a boolean, got {_type_of(schema)}"
            )
        for key in schema:
            if not isinstance(key, str):
                raise _unsupported(path, f"schema keys must be strings, got {key!r}")
            if key in _ROOT_ONLY and not is_root:
                raise _unsupported(path_join(path, key), f"{key!r} is only supported at the root")
            if key not in SUPPORTED_KEYWORDS and key not in _ROOT_ONLY:
                raise _unsupported(path_join(path, key), f"unsupported keyword {key!r}")
        self._check_type(schema, path)
        self._check_values(schema, path)
        if "properties" in schema:
            properties = schema["properties"]
            if not isinstance(properties, dict):
                raise _unsupported(path_join(path, "properties"), "must be an object")
            for name, sub in properties.items():
                self.check(sub, path_join(path_join(path, "properties"), name))
        if "required" in schema:
            required = schema["required"]
            if (
                not isinstance(required, list)
                or not all(isinstance(name, str) for name in required)
                or len(set(required)) != len(required)
            ):
                raise _unsupported(path_join(path, "required"), "must be a list of unique strings")
        if "additionalProperties" in schema:
            self.check(schema["additionalProperties"], path_join(path, "additionalProperties"))
        if "items" in schema:
            if isinstance(schema["items"], list):
                raise _unsupported(
                    path_join(path, "items"), "tuple-form 'items' (a list) is not supported"
                )
            self.check(schema["items"], path_join(path, "items"))
        for name in _COMBINATORS:
            if name in schema:
                branches = schema[name]
                if not isinstance(branches, list) or not branches:
                    raise _unsupported(path_join(path, name), "must be a non-empty list of schemas")
                for index, sub in enumerate(branches):
                    self.check(sub, path_join(path_join(path, name), index))
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise _unsupported(path_join(path, "$ref"), "must be a string")
            self.refs.append((ref, path_join(path, "$ref")))
        self._check_sensitive(schema, path)

    def _check_type(self, schema: Mapping[str, Any], path: str) -> None:
        if "type" not in schema:
            return
        declared = schema["type"]
        names = [declared] if isinstance(declared, str) else declared
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) and n in TYPES for n in names)
            or len(set(names)) != len(names)
        ):
            raise _unsupported(
                path_join(path, "type"),
                f"must be one of {sorted(TYPES)} or a non-empty list of them",
            )

    def _check_values(self, schema: Mapping[str, Any], path: str) -> None:
        if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
            raise _unsupported(path_join(path, "enum"), "must be a non-empty list")
        for name in _NUMERIC_BOUNDS:
            if name in schema and not _is_number(schema[name]):
                raise _unsupported(path_join(path, name), "must be a number")
        for name in _COUNTS:
            value = schema.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _unsupported(path_join(path, name), "must be a non-negative integer")
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                raise _unsupported(path_join(path, "pattern"), "must be a string")
            try:
                self.patterns[pattern] = re.compile(pattern)
            except re.error as exc:
                raise _unsupported(path_join(path, "pattern"), f"invalid regex: {exc}") from None
        if "sensitive" in schema and not isinstance(schema["sensitive"], bool):
            raise _unsupported(path_join(path, "sensitive"), "must be true or false")

    def _check_sensitive(self, schema: Mapping[str, Any], path: str) -> None:
        if schema.get("sensitive") is not True:
            return
        if not _admits_only_strings(schema):
            raise _unsupported(
                path_join(path, "sensitive"),
                "'sensitive: true' is only supported on string fields "
                "(type 'string', optionally with 'null', or anyOf/oneOf of such branches)",
            )
        self.sensitive = True

    def collect_defs(self) -> None:
        for container in ("$defs", "definitions"):
            if container not in self.root:
                continue
            defs = self.root[container]
            if not isinstance(defs, dict):
                raise _unsupported(path_join("$", container), "must be an object of schemas")
            for name, sub in defs.items():
                where = path_join(path_join("$", container), name)
                self.check(sub, where)
                escaped = name.replace("~", "~0").replace("/", "~1")
                self.defs[f"#/{container}/{escaped}"] = sub

    def check_refs(self) -> None:
        for ref, where in self.refs:
            if ref != "#" and ref not in self.defs:
                raise _unsupported(
                    where,
                    f"$ref {ref!r} must point into this schema's root '$defs' or 'definitions'",
                )
        # A chain of references and combinators that comes back to itself without descending into
        # a property or an item would recurse forever at call time: refuse it now instead.
        for start in [self.root, *self.defs.values()]:
            self._check_no_cycle(start)

    def _check_no_cycle(self, start: object) -> None:
        stack: list[tuple[object, tuple[int, ...]]] = [(start, ())]
        while stack:
            schema, trail = stack.pop()
            if not isinstance(schema, dict):
                continue
            if id(schema) in trail:
                raise _unsupported("$", "a $ref cycle that never descends into the value")
            trail = (*trail, id(schema))
            for name in _COMBINATORS:
                stack.extend((sub, trail) for sub in schema.get(name, ()))
            if "$ref" in schema:
                ref = schema["$ref"]
                stack.append((self.root if ref == "#" else self.defs[ref], trail))


def _admits_only_strings(schema: Mapping[str, Any]) -> bool:
    def only_strings(sub: object) -> bool:
        if not isinstance(sub, dict) or "type" not in sub:
            return False
        names = {sub["type"]} if isinstance(sub["type"], str) else set(sub["type"])
        return "string" in names and names <= {"string", "null"}

    if "type" in schema:
        return only_strings(schema)
    for name in ("anyOf", "oneOf"):
        if name in schema:
            branches = schema[name]
            return all(
                only_strings(b) or (isinstance(b, dict) and b.get("type") == "null")
                for b in branches
            ) and any(only_strings(b) for b in branches)
    return False


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _deep_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_copy(item) for item in value]
    return value


def _reaching_sensitive(root: dict[str, Any], defs: Mapping[str, Any]) -> frozenset[int]:
    """Ids of the schema objects from which a ``sensitive: true`` schema can be reached."""
    edges: dict[int, list[int]] = {}
    sensitive: list[int] = []
    seen: set[int] = set()
    stack: list[object] = [root, *defs.values()]
    while stack:
        schema = stack.pop()
        if not isinstance(schema, dict) or id(schema) in seen:
            continue
        seen.add(id(schema))
        if schema.get("sensitive") is True:
            sensitive.append(id(schema))
        children: list[object] = [*schema.get("properties", {}).values()]
        children += [schema[k] for k in ("items", "additionalProperties") if k in schema]
        for name in _COMBINATORS:
            children += schema.get(name, ())
        if "$ref" in schema:
            children.append(root if schema["$ref"] == "#" else defs[schema["$ref"]])
        for child in children:
            edges.setdefault(id(child), []).append(id(schema))  # reversed: child -> parents
        stack.extend(children)
    reached = set(sensitive)
    frontier = list(sensitive)
    while frontier:
        for parent in edges.get(frontier.pop(), ()):
            if parent not in reached:
                reached.add(parent)
                frontier.append(parent)
    return frozenset(reached)


def compile_schema(schema: object) -> CompiledSchema:
    """Check a schema against the supported subset and compile it.

    Args:
        schema: A JSON Schema document (a dict, or a boolean schema).

    Returns:
        The compiled schema, holding a private copy of the document.

    Raises:
        UnsupportedSchema: A keyword outside the subset, a malformed keyword value, a ``$ref``
            that does not resolve locally, or ``sensitive`` on a non-string field. The message
            starts with the ``$.path`` of the problem.
    """
    if isinstance(schema, bool):
        return CompiledSchema(schema=schema, sensitive=False, _defs={}, _patterns={})
    if not isinstance(schema, dict):
        raise _unsupported("$", f"a schema must be an object or a boolean, got {_type_of(schema)}")
    copied: dict[str, Any] = _deep_copy(schema)
    compiler = _Compiler(copied)
    compiler.check(copied, "$", is_root=True)
    compiler.collect_defs()
    compiler.check_refs()
    return CompiledSchema(
        schema=copied,
        sensitive=compiler.sensitive,
        _reaches_sensitive=_reaching_sensitive(copied, compiler.defs),
        _defs=compiler.defs,
        _patterns=compiler.patterns,
    )


def strip_keywords(schema: Any, drop: frozenset[str]) -> Any:
    """Return a copy of a schema without the given keywords at any schema position.

    Property names are data, not keywords, so ``properties`` and ``$defs`` keep their keys even
    when a property is called ``description`` or ``sensitive``.
    """
    if isinstance(schema, list):
        return [strip_keywords(item, drop) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in drop:
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: strip_keywords(sub, drop) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", *_COMBINATORS):
            out[key] = strip_keywords(value, drop)
        else:
            out[key] = value
    return out


# -- delegation to jsonschema -----------------------------------------------------------------


def _jsonschema_validator(schema: Mapping[str, Any] | bool) -> Any:
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - the test environment has the extra
        raise ImportError(
            'the jsonschema engine needs the schema extra: pip install "pollard[schema]"'
        ) from exc
    document: Any = schema
    if isinstance(schema, Mapping):
        # Our own keyword is not JSON Schema; 2020-12 ignores unknown keywords, but a validator
        # that is told about them cannot mistake them for anything.
        document = strip_keywords(dict(schema), frozenset({"sensitive", "$schema"}))
    return jsonschema.Draft202012Validator(document)


def _validate_with_jsonschema(validator: Any, value: object) -> str | None:
    errors = sorted(
        validator.iter_errors(value),
        key=lambda e: ([str(p) for p in e.absolute_path], str(e.validator)),
    )
    if not errors:
        return None
    first = errors[0]
    path = "$"
    for part in first.absolute_path:
        path = path_join(path, part if isinstance(part, int) else str(part))
    # jsonschema's own messages quote the value; ours never do, so only the keyword is kept.
    return f"{path}: failed the {first.validator!r} constraint"
