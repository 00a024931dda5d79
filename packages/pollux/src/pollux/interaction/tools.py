"""Tool types: declarations, calls the model makes, and results the application returns."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pollux.errors import ConfigurationError, ToolCallParseError

from ._json import (
    JSONValue,
    check_fields,
    describe,
    get_int,
    get_opt_int,
    get_opt_str,
    get_str,
    json_copy,
    require_mapping,
)

__all__ = [
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolDeclaration",
    "ToolResult",
    "validate_tool_choice",
]

ToolChoice: TypeAlias = Literal["auto", "required", "none"] | Mapping[str, str]
"""``"auto"``, ``"required"``, ``"none"``, or ``{"name": "<tool>"}`` to force one tool."""


def validate_tool_choice(value: object) -> None:
    """Raise ConfigurationError unless ``value`` is a valid :data:`ToolChoice`."""
    if value in ("auto", "required", "none"):
        return
    if isinstance(value, Mapping) and set(value) == {"name"}:
        name = value["name"]
        if isinstance(name, str) and name:
            return
    raise ConfigurationError(
        f"Invalid tool_choice: {value!r}",
        hint="Use 'auto', 'required', 'none', or {'name': 'tool_name'}.",
    )


@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    """A provider-neutral description of a tool the model may request.

    Args:
        name: The tool's name.
        description: What the tool does, for the model.
        parameters: The JSON Schema of the tool's arguments (an object schema).
        strict: Ask providers that support it to enforce the schema exactly.

    Example:
        >>> ToolDeclaration.from_dict({"type": "function", "function": {"name": "now"}}).name
        'now'
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    strict: bool = True

    def __post_init__(self) -> None:
        """Validate the declaration's shape."""
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(
                "tool declaration requires a non-empty 'name'",
                hint="Pass ToolDeclaration(name='get_weather', ...).",
            )
        if not isinstance(self.description, str):
            raise ConfigurationError(
                f"tool {self.name!r}: description must be a string",
                hint="Describe the tool in plain text.",
            )
        if not isinstance(self.parameters, Mapping):
            raise ConfigurationError(
                f"tool {self.name!r}: parameters must be a JSON Schema dict",
                hint="Pass parameters={'type': 'object', 'properties': {...}}.",
            )
        object.__setattr__(
            self, "parameters", json_copy(self.parameters, what=f"tool {self.name!r} parameters")
        )
        if not isinstance(self.strict, bool):
            raise ConfigurationError(
                f"tool {self.name!r}: strict must be a bool", hint="Pass strict=True or False."
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolDeclaration:
        """Build a declaration from a flat dict or an OpenAI-style ``{"function": {...}}`` dict.

        Raises:
            ConfigurationError: The dict has no non-empty ``name`` or an invalid field.
        """
        data = require_mapping(data, "ToolDeclaration")
        payload: Mapping[str, Any] = data
        nested = data.get("function")
        if isinstance(nested, Mapping):
            payload = nested
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                "tool declaration requires a non-empty 'name'",
                hint="Pass {'name': 'get_weather', 'description': ..., 'parameters': {...}}.",
            )
        description = payload.get("description", "")
        parameters = payload.get("parameters")
        strict = payload.get("strict", True)
        return cls(
            name=name,
            description=str(description) if description is not None else "",
            parameters=dict(parameters) if isinstance(parameters, Mapping) else {},
            strict=strict if isinstance(strict, bool) else True,
        )


def _parse_arguments(text: str) -> tuple[JSONValue, str | None]:
    if not text.strip():
        return None, None
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return None, f"Arguments are not valid JSON: {exc}"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A normalized tool request emitted by the model.

    ``arguments_text`` is the exact raw argument string (stream fragments assembled).
    ``arguments`` is the parsed JSON; when the text is not valid JSON it is ``None`` and
    ``arguments_error`` explains why.

    Args:
        id: The provider's call id; send it back in :class:`ToolResult.call_id`.
        name: The requested tool.
        arguments_text: The raw argument text.
        arguments: The parsed arguments.
        arguments_error: Why ``arguments_text`` did not parse, if it did not.
        index: The call's position among the turn's calls, when the provider gives one.
        provider_state: Provider-specific replay data (for example Gemini thought
            signatures). Opaque; pollux uses it to continue the conversation. It must be
            JSON-compatible (providers encode bytes as base64) so outputs can be persisted.

    Example:
        >>> call = ToolCall.from_text(id="c1", name="add", arguments_text='{"a": 1}')
        >>> call.arguments_dict()
        {'a': 1}
    """

    id: str
    name: str
    arguments_text: str = ""
    arguments: JSONValue = None
    arguments_error: str | None = None
    index: int | None = None
    provider_state: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Check the field types, so the call can be serialized and restored."""
        check_fields(
            self,
            {
                "id": "str",
                "name": "str",
                "arguments_text": "str",
                "arguments_error": "str?",
                "index": "count?",
            },
            hint="Build tool calls with ToolCall.from_text(id=..., name=..., arguments_text=...).",
        )
        if self.provider_state is not None and not isinstance(self.provider_state, Mapping):
            raise ConfigurationError(
                f"ToolCall.provider_state must be a dict or None, got "
                f"{describe(self.provider_state)}",
                hint="Leave provider_state to the provider that produced the call.",
            )

    @classmethod
    def from_text(
        cls,
        *,
        id: str,
        name: str,
        arguments_text: str = "",
        index: int | None = None,
        provider_state: dict[str, Any] | None = None,
    ) -> ToolCall:
        """Build a call from raw provider fields, parsing the arguments once."""
        if not isinstance(arguments_text, str):
            raise ConfigurationError(
                f"arguments_text must be a string, got {type(arguments_text).__name__}",
                hint="Pass the raw JSON text; use json.dumps() on a dict first.",
            )
        arguments, arguments_error = _parse_arguments(arguments_text)
        return cls(
            id=id,
            name=name,
            arguments_text=arguments_text,
            arguments=arguments,
            arguments_error=arguments_error,
            index=index,
            provider_state=provider_state,
        )

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolCall:
        """Build a call from an OpenAI Chat Completions ``tool_calls`` item."""
        data = require_mapping(data, "ToolCall")
        function = data.get("function")
        function = function if isinstance(function, Mapping) else {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments) if isinstance(arguments, (dict, list)) else ""
        index = data.get("index")
        call_id = data.get("id")
        name = function.get("name")
        return cls.from_text(
            id=call_id if isinstance(call_id, str) else "",
            name=name if isinstance(name, str) else "",
            arguments_text=arguments,
            index=index if isinstance(index, int) and not isinstance(index, bool) else None,
            provider_state={"openai": json_copy(dict(data), what="OpenAI tool call")},
        )

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any]) -> ToolCall:
        """Rebuild a call from :meth:`to_jsonable` output.

        Raises:
            ConfigurationError: The data is not a serialized tool call.
        """
        data = require_mapping(data, "ToolCall")
        text = get_str(data, "arguments_text", "ToolCall", default="")
        provider_state = data.get("provider_state")
        if provider_state is not None:
            provider_state = json_copy(
                require_mapping(provider_state, "ToolCall.provider_state"),
                what="ToolCall.provider_state",
            )
        arguments, parsed_error = _parse_arguments(text)
        error = get_opt_str(data, "arguments_error", "ToolCall")
        return cls(
            id=get_str(data, "id", "ToolCall"),
            name=get_str(data, "name", "ToolCall"),
            arguments_text=text,
            arguments=None if error is not None else arguments,
            arguments_error=error if error is not None else parsed_error,
            index=get_opt_int(data, "index", "ToolCall"),
            provider_state=provider_state,
        )

    def arguments_dict(self) -> dict[str, Any]:
        """Return the parsed arguments as a dict (``{}`` when there were none).

        Raises:
            ToolCallParseError: The arguments are malformed JSON or not a JSON object.
        """
        if self.arguments_error is not None:
            raise ToolCallParseError(
                f"Tool call {self.name!r} has invalid JSON arguments",
                hint=self.arguments_error,
                tool_name=self.name,
                tool_call_id=self.id,
                arguments_text=self.arguments_text,
            )
        if self.arguments is None:
            return {}
        if not isinstance(self.arguments, dict):
            raise ToolCallParseError(
                f"Tool call {self.name!r} arguments must be a JSON object",
                hint="Define tool parameters as an object schema and retry the turn.",
                tool_name=self.name,
                tool_call_id=self.id,
                arguments_text=self.arguments_text,
            )
        return dict(self.arguments)

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a compact JSON-compatible dict (optional facets omitted)."""
        payload: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "arguments_text": self.arguments_text,
        }
        if self.arguments_error is not None:
            payload["arguments_error"] = self.arguments_error
        if self.index is not None:
            payload["index"] = self.index
        if self.provider_state is not None:
            payload["provider_state"] = json_copy(self.provider_state, what="provider_state")
        return payload

    def to_openai(self) -> dict[str, Any]:
        """Serialize as an OpenAI Chat Completions ``tool_calls`` item."""
        payload: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_text},
        }
        if self.index is not None:
            payload["index"] = self.index
        return payload


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call arriving in a stream.

    Args:
        index: Which call of the turn the fragment belongs to.
        id: The call id, on the fragment that carries it.
        name: The tool name, on the fragment that carries it.
        arguments: The next piece of the argument text.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def __post_init__(self) -> None:
        """Check the field types, so the delta can be serialized and restored."""
        check_fields(
            self,
            {"index": "count", "id": "str?", "name": "str?", "arguments": "str"},
            hint="Pass index=<the call's position>, and text for id, name and arguments.",
        )

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dict (unset ``id``/``name`` omitted)."""
        payload: dict[str, Any] = {"index": self.index, "arguments": self.arguments}
        if self.id is not None:
            payload["id"] = self.id
        if self.name is not None:
            payload["name"] = self.name
        return payload

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any]) -> ToolCallDelta:
        """Rebuild a delta from :meth:`to_jsonable` output.

        Raises:
            ConfigurationError: The data is not a serialized delta.
        """
        data = require_mapping(data, "ToolCallDelta")
        return cls(
            index=get_int(data, "index", "ToolCallDelta"),
            id=get_opt_str(data, "id", "ToolCallDelta"),
            name=get_opt_str(data, "name", "ToolCallDelta"),
            arguments=get_str(data, "arguments", "ToolCallDelta", default=""),
        )


@dataclass(frozen=True, slots=True)
class ToolResult:
    """Application-produced output returned to the model for a prior tool call.

    Args:
        call_id: The :attr:`ToolCall.id` this result answers.
        content: The result as text.
        is_error: The tool failed; ``content`` describes the failure.

    Example:
        >>> ToolResult.from_value(call_id="c1", value={"b": 2, "a": 1}).content
        '{"a": 1, "b": 2}'
    """

    call_id: str
    content: str
    is_error: bool = False

    def __post_init__(self) -> None:
        """Validate field types."""
        if not isinstance(self.call_id, str) or not self.call_id:
            raise ConfigurationError(
                f"ToolResult.call_id must be a non-empty string, got {self.call_id!r}",
                hint="Pass call_id=tool_call.id from the output's tool_calls.",
            )
        if not isinstance(self.content, str):
            raise ConfigurationError(
                f"ToolResult.content must be a string, got {type(self.content).__name__}",
                hint="Use ToolResult.from_value(call_id=..., value=...) for JSON values.",
            )
        if not isinstance(self.is_error, bool):
            raise ConfigurationError(
                "ToolResult.is_error must be a bool", hint="Pass is_error=True or False."
            )

    @classmethod
    def from_value(cls, *, call_id: str, value: JSONValue, is_error: bool = False) -> ToolResult:
        """Build a result from a JSON value; strings are kept, others JSON-encoded.

        Raises:
            ConfigurationError: ``value`` is not JSON serializable.
        """
        if isinstance(value, str):
            content = value
        else:
            try:
                content = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(
                    "ToolResult.from_value() requires a JSON-serializable value",
                    hint="Return a string, dict, list, number, boolean, or None.",
                ) from exc
        return cls(call_id=call_id, content=content, is_error=is_error)

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize to a JSON-compatible dict."""
        payload: dict[str, Any] = {"call_id": self.call_id, "content": self.content}
        if self.is_error:
            payload["is_error"] = True
        return payload
