"""ActionSpec and Registry: checks, digests, lookup, declarations and redaction by schema."""

from __future__ import annotations

from typing import Any

import pytest

from pollard import Runtime
from pollard.errors import PolicyViolation
from pollard.redaction import is_redacted, redact
from pollard.registry import ActionSpec, Registry

OBJ: dict[str, Any] = {"type": "object"}


def spec(name: str = "t", **changes: Any) -> ActionSpec:
    fields: dict[str, Any] = {
        "name": name,
        "version": "1",
        "description": "d",
        "schema": OBJ,
        "side_effects": False,
    }
    fields.update(changes)
    return ActionSpec(**fields)


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"name": ""}, ValueError),
        ({"name": 3}, TypeError),
        ({"version": 1}, TypeError),
        ({"description": None}, TypeError),
        ({"side_effects": "yes"}, TypeError),
        ({"handler": "not callable"}, TypeError),
        ({"schema": [OBJ]}, TypeError),
    ],
)
def test_action_spec_checks_its_fields(changes: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        spec(**changes)


def test_spec_digest_ignores_annotations_but_not_constraints() -> None:
    base = spec(schema={"type": "object", "properties": {"a": {"type": "string"}}})
    annotated = spec(
        description="another description",
        schema={
            "type": "object",
            "title": "T",
            "description": "x",
            "properties": {
                "a": {"type": "string", "description": "A", "default": "z", "examples": ["q"]}
            },
        },
    )
    assert annotated.spec_digest == base.spec_digest
    for changed in (
        spec(schema={"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}),
        spec(schema={"type": "object", "properties": {"a": {"type": "string", "sensitive": True}}}),
        spec(schema={"type": "object", "properties": {"a": {"type": "string"}}}, side_effects=True),
        spec(schema={"type": "object", "properties": {"a": {"type": "string"}}}, version="2"),
        spec("u", schema={"type": "object", "properties": {"a": {"type": "string"}}}),
    ):
        assert changed.spec_digest != base.spec_digest


def test_a_property_named_like_an_annotation_is_still_semantic() -> None:
    one = spec(schema={"type": "object", "properties": {"title": {"type": "string"}}})
    two = spec(schema={"type": "object", "properties": {"title": {"type": "integer"}}})
    assert one.spec_digest != two.spec_digest


def test_registry_lookup_iteration_and_digest() -> None:
    b, a = spec("b"), spec("a", version="2")
    registry = Registry([b, a])
    assert [s.name for s in registry] == ["a", "b"] and len(registry) == 2
    assert registry.get("a") is a and registry.get("a", "2") is a
    assert registry.find("a", "1") is None and registry.find("zz") is None
    with pytest.raises(KeyError, match="a@1"):
        registry.get("a", "1")  # 0.8 raises KeyError for an unknown name or version
    assert "a" in registry and "zz" not in registry
    assert Registry([a, b]).registry_digest == registry.registry_digest  # order-free
    assert Registry([a]).registry_digest != registry.registry_digest
    assert "a@2" in repr(registry)


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (([spec("a"), spec("a", version="2")],), {}, ValueError),
        (([OBJ],), {}, TypeError),
        (([],), {"redaction_key": "text"}, TypeError),
        (([],), {"schema_engine": "fast"}, ValueError),
    ],
)
def test_registry_checks(args: tuple[Any, ...], kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        Registry(*args, **kwargs)


def test_the_key_is_never_shown() -> None:
    registry = Registry([spec()], redaction_key=b"super-secret-key")
    assert "super-secret-key" not in repr(registry)


def test_declarations_drop_the_sensitive_keyword() -> None:
    s = spec(
        "send",
        description="Send.",
        schema={"type": "object", "properties": {"token": {"type": "string", "sensitive": True}}},
    )
    assert Registry([s]).declarations() == [
        {
            "name": "send",
            "description": "Send.",
            "parameters": {"type": "object", "properties": {"token": {"type": "string"}}},
        }
    ]


SENSITIVE_SCHEMA: dict[str, Any] = {
    "$defs": {"Secret": {"type": "string", "sensitive": True}},
    "type": "object",
    "properties": {
        "plain": {"type": "string"},
        "ref": {"$ref": "#/$defs/Secret"},
        "maybe": {"anyOf": [{"type": "string", "sensitive": True}, {"type": "null"}]},
        "many": {"type": "array", "items": {"type": "string", "sensitive": True}},
        "nested": {"type": "object", "properties": {"pin": {"type": "string", "sensitive": True}}},
    },
    "additionalProperties": {"type": "string", "sensitive": True},
}


def test_redaction_follows_refs_combinators_items_and_additional_properties() -> None:
    s = spec(schema=SENSITIVE_SCHEMA)
    assert s.has_sensitive_fields
    args = {
        "plain": "p",
        "ref": "r",
        "maybe": None,
        "many": ["x", "y"],
        "nested": {"pin": "1234", "other": 1},
        "extra": "e",
    }
    out = s.redact_args(args, lambda v: redact(v, "sensitive"))
    assert isinstance(out, dict)
    assert out["plain"] == "p" and out["maybe"] is None
    assert out["nested"]["other"] == 1
    for value in (out["ref"], out["many"][0], out["many"][1], out["nested"]["pin"], out["extra"]):
        assert is_redacted(value)
    assert args["ref"] == "r"  # the caller's dict is not touched
    # Equal secrets give equal markers: replay and hybrid lookups still match.
    assert s.redact_args(args, lambda v: redact(v, "sensitive")) == out


def test_a_wrongly_typed_sensitive_value_is_redacted_anyway() -> None:
    s = spec(
        schema={"type": "object", "properties": {"pin": {"type": "string", "sensitive": True}}}
    )
    out = s.redact_args({"pin": 1234}, lambda v: redact(v, "sensitive"))
    assert isinstance(out, dict) and is_redacted(out["pin"])


def test_jsonschema_engine_through_the_runtime() -> None:
    s = ActionSpec(
        "zip",
        "1",
        "",
        {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}},
        False,
        handler=lambda a: {"ok": True},
    )
    registry = Registry([s], schema_engine="jsonschema")
    with Runtime(registry=registry).run("engine") as run:
        assert run.tool_call("zip", {"zip": "12345"}).result == {"ok": True}
        with pytest.raises(PolicyViolation, match=r"\$\.zip: failed the 'pattern' constraint"):
            run.tool_call("zip", {"zip": "1234"})


def test_redaction_through_a_recursive_schema_reaches_every_depth() -> None:
    tree = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "secret": {"type": "string", "sensitive": True},
            "children": {"type": "array", "items": {"$ref": "#"}},
        },
    }
    s = spec(schema=tree)
    args = {
        "name": "a",
        "secret": "s1",
        "children": [{"name": "b", "children": [{"name": "c", "secret": "s3"}]}],
    }
    out = s.redact_args(args, lambda v: redact(v, "sensitive"))
    assert isinstance(out, dict)
    assert is_redacted(out["secret"]) and out["name"] == "a"
    deep = out["children"][0]["children"][0]
    assert is_redacted(deep["secret"]) and deep["name"] == "c"
