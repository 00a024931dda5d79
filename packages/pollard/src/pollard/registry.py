"""The registry firewall's declarations: versioned actions and the set they belong to.

With a registry installed, ``run.tool_call(name, args)`` resolves ``name`` (and ``version``) here,
validates ``args`` against the action's schema, redacts its sensitive fields, consults the policies
and only then calls the registered handler. A caller-supplied function is never run.

Identity and digests (see docs/pollard/governance.md, "Identity stability"):

* ``ActionSpec.spec_digest`` commits to what the firewall enforces: name, version, side effects and
  the schema *without* its annotations (``title``, ``description``, ``default``, ``examples``,
  ``format``, ...). Editing a description or a docstring leaves it unchanged; changing a type, a
  bound, ``required``, ``sensitive`` or the version changes it.
* A registered tool call's identity payload is ``{"tool", "version", "args" (redacted),
  "spec_digest"}``: it commits to its own action's digest only, so adding, removing or editing an
  *unrelated* action leaves every recorded tool-call id valid.
* ``Registry.registry_digest`` covers the whole set (the sorted spec digests). It is recorded in the
  meta of the run root and of every registered node, for audit, not in any identity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pollard._core._canon import canonical_bytes
from pollard._governance._schema import ANNOTATIONS, CompiledSchema, compile_schema, strip_keywords
from pollard.errors import UnsupportedSchema
from pollard.redaction import redact

__all__ = ["SPEC_DOMAIN", "ActionSpec", "Registry"]

SPEC_DOMAIN = b"pollard/v1:spec\n"
"""Domain prefix of ``ActionSpec.spec_digest``."""

_NON_SEMANTIC = ANNOTATIONS | {"$schema"}


def _check_text(name: str, value: object, *, empty_ok: bool = False) -> None:
    if not isinstance(value, str):
        raise TypeError(f"ActionSpec {name} must be a str, got {type(value).__name__}")
    if not empty_ok and not value:
        raise ValueError(f"ActionSpec {name} must not be empty")


@dataclass(frozen=True)
class ActionSpec:
    """One registered, versioned action: what may be called, with which arguments.

    Args:
        name: The tool name models and callers use.
        version: The version string; a call that names another version is refused.
        description: Human- and model-facing text. Not part of ``spec_digest``.
        schema: The JSON Schema of the arguments, in the supported subset. Mark secret string
            fields with ``"sensitive": True`` so only their digest marker is ever stored.
        side_effects: True when the action changes the world; dry-run mode records such calls
            without running their handlers.
        handler: The function that runs the action, called with the original (unredacted)
            arguments dict. It may be ``async`` under ``AsyncRuntime``. ``None`` declares an action
            that can be recorded or replayed but not executed.

    Raises:
        UnsupportedSchema: When the schema is outside the supported subset (at construction,
            never at call time).
        TypeError: When a field has the wrong type.
        ValueError: When the name is empty.

    Example:
        >>> spec = ActionSpec(
        ...     "send", "1", "Send a message.",
        ...     {"type": "object", "properties": {"token": {"type": "string", "sensitive": True}},
        ...      "required": ["token"]},
        ...     True,
        ... )
        >>> spec.validate({"token": 7})
        '$.token: expected string, got integer'
    """

    name: str
    version: str
    description: str
    schema: Mapping[str, Any]
    side_effects: bool
    handler: Callable[..., Any] | None = field(default=None, compare=False)
    spec_digest: str = field(init=False, compare=False)
    _compiled: CompiledSchema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_text("name", self.name)
        _check_text("version", self.version)
        _check_text("description", self.description, empty_ok=True)
        if not isinstance(self.side_effects, bool):
            raise TypeError(
                f"ActionSpec side_effects must be a bool, got {type(self.side_effects).__name__}"
            )
        if self.handler is not None and not callable(self.handler):
            raise TypeError("ActionSpec handler must be callable or None")
        if not isinstance(self.schema, Mapping):
            raise TypeError(
                "ActionSpec schema must be a dict (a JSON Schema), "
                f"got {type(self.schema).__name__}"
            )
        root_type = self.schema.get("type", "object")
        if root_type != "object":
            # Arguments are always a JSON object; pollard 0.8 refused such schemas here too.
            raise UnsupportedSchema(
                f"schema for {self.name}: the root schema must describe an object (the "
                f"arguments dict), not type {root_type!r}",
                "$.type",
            )
        compiled = compile_schema(dict(self.schema))
        assert isinstance(compiled.schema, dict)
        # Keep the private copy: a caller mutating their dict afterwards cannot change what the
        # digest promised.
        object.__setattr__(self, "schema", compiled.schema)
        object.__setattr__(self, "_compiled", compiled)
        semantic = {
            "name": self.name,
            "version": self.version,
            "schema": strip_keywords(compiled.schema, _NON_SEMANTIC),
            "side_effects": self.side_effects,
        }
        digest = hashlib.sha256(SPEC_DOMAIN + canonical_bytes(semantic)).hexdigest()
        object.__setattr__(self, "spec_digest", digest)

    def __hash__(self) -> int:
        return hash((self.spec_digest, self.description))

    @property
    def has_sensitive_fields(self) -> bool:
        """True when the schema marks at least one field ``sensitive``."""
        return self._compiled.sensitive

    def validate(
        self, args: object, *, engine: Literal["builtin", "jsonschema"] = "builtin"
    ) -> str | None:
        """Check arguments against the schema.

        Args:
            args: The arguments a caller or a model supplied.
            engine: ``"builtin"`` (standard library) or ``"jsonschema"`` (the ``schema`` extra);
                both give the same verdict on the supported subset.

        Returns:
            None when the arguments are valid, otherwise the first finding as
            ``"$.path: message"``. Findings never quote the checked value.
        """
        return self._compiled.validate(args, engine=engine)

    def validate_args(self, args: object) -> str | None:
        """Check arguments with the built-in engine: pollard 0.8's name for `validate`.

        Returns:
            None when the arguments are valid, otherwise the first finding as ``"$.path: ..."``.
        """
        return self._compiled.validate(args, engine="builtin")

    def redact_args(
        self, args: object, replace: Callable[[object], object] | None = None
    ) -> object:
        """Return a copy of ``args`` with every sensitive field passed through ``replace``.

        Args:
            args: The arguments.
            replace: Maps a sensitive value to what is stored. When omitted (pollard 0.8's
                one-argument form), the plain SHA-256 marker ``redact(value)`` of a registry
                without a ``redaction_key`` is used.
        """
        if replace is None:
            replace = redact
        return self._compiled.redact(args, replace)

    def declaration(self) -> dict[str, Any]:
        """Return a provider-neutral tool declaration: ``{"name", "description", "parameters"}``.

        pollard's own ``sensitive`` keyword is removed from ``parameters`` so the declaration can
        be sent to a model provider as is.
        """
        return {
            "name": self.name,
            "description": self.description,
            "parameters": strip_keywords(self.schema, frozenset({"sensitive"})),
        }


class Registry:
    """A frozen set of actions, one version per name.

    Args:
        specs: The actions. Names must be unique.
        redaction_key: Optional secret bytes. When given, sensitive fields are replaced by a keyed
            (HMAC-SHA256) digest marker instead of a plain SHA-256 one, so a low-entropy secret
            cannot be recovered by hashing guesses. It changes the stored markers and therefore
            the ids of calls with sensitive arguments; it is never stored or shown.
        schema_engine: ``"builtin"`` (default, standard library) or ``"jsonschema"`` to delegate
            argument validation to the ``jsonschema`` package (``pip install "pollard[schema]"``).
            Schemas are always checked against the subset first, and both engines agree on it.

    Raises:
        ValueError: On a duplicate action name or an unknown engine.
        TypeError: When an item is not an ActionSpec or the key is not bytes.

    Example:
        >>> registry = Registry([ActionSpec("echo", "1", "Echo.", {"type": "object"}, False)])
        >>> "echo" in registry, registry.find("echo", "2")
        (True, None)
    """

    __slots__ = ("_by_name", "_redaction_key", "registry_digest", "schema_engine")

    def __init__(
        self,
        specs: Iterable[ActionSpec],
        *,
        redaction_key: bytes | None = None,
        schema_engine: Literal["builtin", "jsonschema"] = "builtin",
    ) -> None:
        by_name: dict[str, ActionSpec] = {}
        for spec in specs:
            if not isinstance(spec, ActionSpec):
                raise TypeError(f"Registry items must be ActionSpec, got {type(spec).__name__}")
            if spec.name in by_name:
                raise ValueError(
                    f"duplicate action name {spec.name!r}: a registry holds one version per name"
                )
            by_name[spec.name] = spec
        if redaction_key is not None and not isinstance(redaction_key, bytes):
            raise TypeError("redaction_key must be bytes or None")
        if schema_engine not in ("builtin", "jsonschema"):
            raise ValueError(
                f"schema_engine must be 'builtin' or 'jsonschema', not {schema_engine!r}"
            )
        if schema_engine == "jsonschema":
            try:
                import jsonschema  # noqa: F401
            except ImportError as exc:  # pragma: no cover - the dev environment has the extra
                raise ImportError(
                    'schema_engine="jsonschema" needs the schema extra: '
                    'pip install "pollard[schema]"'
                ) from exc
        self._by_name = dict(sorted(by_name.items()))
        self._redaction_key = redaction_key
        self.schema_engine: Literal["builtin", "jsonschema"] = schema_engine
        digests = sorted(spec.spec_digest for spec in self._by_name.values())
        self.registry_digest: str = hashlib.sha256(
            canonical_bytes({"spec_digests": digests})
        ).hexdigest()

    @property
    def redaction_key(self) -> bytes | None:
        """The HMAC key used for sensitive fields, or None (plain SHA-256 markers)."""
        return self._redaction_key

    def get(self, name: str, version: str | None = None) -> ActionSpec:
        """Return the action called ``name`` (at ``version`` when given), as pollard 0.8 does.

        Args:
            name: The action name.
            version: When given, the action is returned only if its version matches.

        Raises:
            KeyError: ``name`` (or ``"name@version"``) when no such action is registered. Use
                `Registry.find` for a ``None`` instead.
        """
        spec = self.find(name, version)
        if spec is None:
            raise KeyError(name if version is None else f"{name}@{version}")
        return spec

    def find(self, name: str, version: str | None = None) -> ActionSpec | None:
        """Return the action called ``name`` (at ``version`` when given), or None.

        Args:
            name: The action name.
            version: When given, the action is returned only if its version matches.
        """
        spec = self._by_name.get(name)
        if spec is None or (version is not None and spec.version != version):
            return None
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[ActionSpec]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        names = ", ".join(f"{s.name}@{s.version}" for s in self._by_name.values())
        return f"Registry([{names}], registry_digest={self.registry_digest[:12]}...)"

    def declarations(self) -> list[dict[str, Any]]:
        """Return every action's provider-neutral declaration (see ``ActionSpec.declaration``)."""
        return [spec.declaration() for spec in self._by_name.values()]
