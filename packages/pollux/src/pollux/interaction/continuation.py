"""Continuation: the opaque, serializable replay state of a conversation."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, NoReturn

from pollux.errors import ConfigurationError, InternalError

from ._json import canonical_dumps, describe, json_copy, require_mapping

__all__ = ["Continuation"]

_SCHEMA_VERSION = 2


def _restore(provider: str, model: str | None, state: Mapping[str, Any]) -> Continuation:
    return Continuation._create(provider=provider, model=model, state=state)


class Continuation:
    """Opaque, serializable state for provider-correct replay.

    Applications receive it from :attr:`Output.continuation`, persist it with
    :meth:`to_jsonable` / :meth:`from_jsonable`, and pass it back through
    ``Input(continuation=...)``. A continuation belongs to the provider that produced it.
    Direct construction raises ``TypeError``.

    Internal API (for the pollux engine and providers only): ``Continuation._create(provider=,
    model=, state=)`` builds one; the read-only ``_provider``, ``_model`` and ``_state``
    accessors expose its content; ``_require_provider(provider)`` checks the owner. ``_state``
    is a read-only view of a private JSON copy; never mutate what it contains.

    Example:
        >>> data = {"version": 2, "provider": "openai", "model": "m", "state": {}}
        >>> Continuation.from_jsonable(data)
        Continuation(provider='openai', version=2)
    """

    SCHEMA_VERSION: ClassVar[int] = _SCHEMA_VERSION
    __slots__ = ("_c_model", "_c_provider", "_c_state")

    _c_provider: str
    _c_model: str | None
    _c_state: Mapping[str, Any]

    def __init__(self) -> None:
        raise TypeError(
            "Continuation values are created by pollux outputs or Continuation.from_jsonable()"
        )

    @classmethod
    def _create(cls, *, provider: str, model: str | None, state: Mapping[str, Any]) -> Continuation:
        """Build a continuation (engine use only). ``state`` must be JSON-compatible."""
        if not isinstance(provider, str) or not provider:
            raise InternalError(
                "Continuation needs a non-empty provider",
                hint="This is a pollux bug; please report it.",
            )
        if model is not None and not isinstance(model, str):
            raise InternalError(
                "Continuation model must be a string or None",
                hint="This is a pollux bug; please report it.",
            )
        if not isinstance(state, Mapping):
            raise InternalError(
                "Continuation state must be a mapping",
                hint="This is a pollux bug; please report it.",
            )
        try:
            frozen = json_copy(state, what="continuation state")
        except ConfigurationError as exc:
            raise InternalError(
                f"Continuation state is not JSON-compatible: {exc}",
                hint="This is a pollux bug; please report it.",
            ) from exc
        self = object.__new__(cls)
        object.__setattr__(self, "_c_provider", provider)
        object.__setattr__(self, "_c_model", model)
        object.__setattr__(self, "_c_state", MappingProxyType(frozen))
        return self

    @property
    def _provider(self) -> str:
        return self._c_provider

    @property
    def _model(self) -> str | None:
        return self._c_model

    @property
    def _state(self) -> Mapping[str, Any]:
        return self._c_state

    def _require_provider(self, provider: str) -> None:
        """Raise ConfigurationError unless this continuation belongs to ``provider``."""
        if provider != self._c_provider:
            raise ConfigurationError(
                f"Continuation provider {self._c_provider!r} does not match the active "
                f"provider {provider!r}",
                hint="Reuse a continuation only with the provider that produced it; start a "
                "new interaction, or pass portable Input(history=...) instead.",
            )

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Continuation is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Continuation is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self._c_provider, self._c_model, dict(self._c_state)))

    def __repr__(self) -> str:
        """Return a representation that reveals no replay state."""
        return f"Continuation(provider={self._c_provider!r}, version={_SCHEMA_VERSION})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Continuation):
            return NotImplemented
        return (
            self._c_provider == other._c_provider
            and self._c_model == other._c_model
            and self._c_state == other._c_state
        )

    def __hash__(self) -> int:
        return hash((self._c_provider, self._c_model, canonical_dumps(dict(self._c_state))))

    def to_jsonable(self) -> dict[str, Any]:
        """Return a JSON-compatible serialization (a fresh copy; safe to mutate).

        Besides ``model`` and the provider ``state`` this version reads, the layout carries the
        keys pollux 2.0 reads (``messages``, ``response_id``, ``provider_state``), so a
        continuation saved here still loads in 2.0.
        """
        state = json_copy(self._c_state)
        messages = state.get("messages")
        payload: dict[str, Any] = {
            "version": _SCHEMA_VERSION,
            "provider": self._c_provider,
            "model": self._c_model,
            "state": state,
            "messages": json_copy(messages) if isinstance(messages, list) else [],
        }
        response_id = state.get("response_id")
        if isinstance(response_id, str):
            payload["response_id"] = response_id
        rest = {k: v for k, v in state.items() if k not in ("messages", "response_id")}
        if rest:
            payload["provider_state"] = json_copy(rest)
        return payload

    @classmethod
    def from_jsonable(
        cls, data: Mapping[str, Any], *, expected_provider: str | None = None
    ) -> Continuation:
        """Restore a continuation serialized by :meth:`to_jsonable`.

        Args:
            data: The serialized continuation.
            expected_provider: When given, the provider the continuation must belong to.

        Also loads the layout pollux 2.0 stored (version 2 with ``messages``, ``response_id``
        and ``provider_state`` instead of ``state``), so stored continuations keep working: the
        response id continues an OpenAI conversation server-side, and the messages continue a
        Chat Completions one (OpenRouter, local servers) or an Anthropic one.

        Raises:
            ConfigurationError: A different schema version, a malformed payload, or a
                provider other than ``expected_provider``.
        """
        data = require_mapping(data, "Continuation")
        version = data.get("version")
        if version != _SCHEMA_VERSION or isinstance(version, bool):
            raise ConfigurationError(
                f"Incompatible continuation: expected schema version {_SCHEMA_VERSION}, "
                f"got {describe(version)}",
                hint="This continuation was produced by a different pollux version. Start a "
                "new interaction instead of reusing it.",
            )
        provider = data.get("provider")
        if not isinstance(provider, str) or not provider:
            raise ConfigurationError(
                "Incompatible continuation: missing provider identity",
                hint="Start a new interaction instead of editing continuation state.",
            )
        model = data.get("model")
        if model is not None and not isinstance(model, str):
            raise ConfigurationError(
                "Incompatible continuation: model must be a string or null",
                hint="Start a new interaction instead of editing continuation state.",
            )
        state = data.get("state")
        if state is None and "messages" in data:
            state = _seed_layout_state(data)
        if not isinstance(state, Mapping):
            raise ConfigurationError(
                "Incompatible continuation: state must be an object",
                hint="Start a new interaction instead of editing continuation state.",
            )
        try:
            frozen = json_copy(state, what="continuation state")
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"Incompatible continuation: {exc}",
                hint="Start a new interaction instead of editing continuation state.",
            ) from exc
        continuation = cls._create(provider=provider, model=model, state=frozen)
        if expected_provider is not None:
            continuation._require_provider(expected_provider)
        return continuation


def _seed_layout_state(data: Mapping[str, Any]) -> dict[str, Any]:
    """The provider state of a continuation stored in pollux 2.0's layout."""
    hint = "Start a new interaction instead of editing continuation state."
    messages = data.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise ConfigurationError(
            "Incompatible continuation: messages must be a list of objects", hint=hint
        )
    response_id = data.get("response_id")
    if response_id is not None and not isinstance(response_id, str):
        raise ConfigurationError(
            "Incompatible continuation: response_id must be a string or null", hint=hint
        )
    provider_state = data.get("provider_state")
    if provider_state is not None and not isinstance(provider_state, Mapping):
        raise ConfigurationError(
            "Incompatible continuation: provider_state must be an object or null", hint=hint
        )
    state: dict[str, Any] = dict(provider_state or {})
    state["messages"] = [dict(m) for m in messages]
    if response_id:
        state["response_id"] = response_id
    return state
