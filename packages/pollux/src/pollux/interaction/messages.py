"""Portable, application-authored transcript messages (``Input(history=...)``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from pollux.errors import ConfigurationError

from ._json import describe, get_list, require_mapping
from .tools import ToolCall

__all__ = ["Message", "MessageRole"]

MessageRole = Literal["user", "assistant", "tool"]
"""The roles a history :class:`Message` may have."""

_ROLES = ("user", "assistant", "tool")
_ROLE_HINT = (
    "Use 'user', 'assistant', or 'tool'. Put system instructions on Environment.instructions."
)


def _openai_text_content(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in (
                "text",
                "input_text",
                "output_text",
            ):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
                    continue
            raise ConfigurationError(
                "OpenAI history messages may only contain text parts",
                hint="Keep media in Source values on the Environment.",
            )
        return "".join(parts)
    raise ConfigurationError(
        f"OpenAI message content must be text, got {type(content).__name__}",
        hint="Pass a string or a list of {'type': 'text', 'text': ...} parts.",
    )


def _tool_calls_from_jsonable(raw: object) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    holder = {"tool_calls": raw}
    return tuple(ToolCall.from_jsonable(item) for item in get_list(holder, "tool_calls", "Message"))


@dataclass(frozen=True, slots=True)
class Message:
    """A portable, application-authored text or tool transcript message.

    Rules by role:

    - ``user``: non-empty text; no tool calls, no ``tool_call_id``.
    - ``assistant``: text or tool calls (or both); no ``tool_call_id``.
    - ``tool``: a non-empty ``tool_call_id``; no tool calls.

    Tool calls in history must carry no provider state (build them with
    :meth:`ToolCall.from_text`).

    Args:
        role: ``"user"``, ``"assistant"`` or ``"tool"``.
        content: The text.
        tool_calls: Calls an assistant message made.
        tool_call_id: The call a tool message answers.

    Raises:
        ConfigurationError: The message breaks a rule above.

    Example:
        >>> Message.from_openai({"role": "user", "content": "hi"}).to_jsonable()
        {'role': 'user', 'content': 'hi'}
    """

    role: MessageRole
    content: str = ""
    tool_calls: Sequence[ToolCall] = ()
    tool_call_id: str | None = None

    def __post_init__(self) -> None:
        """Freeze tool calls and reject shapes that cannot be replayed portably."""
        if self.role not in _ROLES:
            raise ConfigurationError(
                f"Unsupported history message role: {describe(self.role)}", hint=_ROLE_HINT
            )
        if not isinstance(self.content, str):
            raise ConfigurationError(
                "Message content must be text",
                hint="Keep media in Source values or the current Input.",
            )
        raw_calls: object = self.tool_calls
        if isinstance(raw_calls, (str, bytes)) or not isinstance(raw_calls, Sequence):
            raise ConfigurationError(
                "Message tool_calls must be a sequence of ToolCall values",
                hint="Pass tool_calls=[ToolCall.from_text(...)].",
            )
        calls = tuple(self.tool_calls)
        if not all(isinstance(call, ToolCall) for call in calls):
            raise ConfigurationError(
                "Message tool_calls must contain ToolCall values",
                hint="Normalize provider tool calls with ToolCall.from_text(...).",
            )
        if any(call.provider_state is not None for call in calls):
            raise ConfigurationError(
                "Portable history tool calls cannot contain provider state",
                hint="Rebuild transcript calls with ToolCall.from_text(...), or continue with "
                "Input(continuation=output.continuation).",
            )
        object.__setattr__(self, "tool_calls", calls)
        if self.tool_call_id is not None and not isinstance(self.tool_call_id, str):
            raise ConfigurationError(
                "Message tool_call_id must be a string",
                hint="Pass the id of the tool call this message answers.",
            )

        if self.role == "user":
            if not self.content.strip():
                raise ConfigurationError(
                    "User history messages require non-empty text",
                    hint="Drop empty user turns from the history.",
                )
            if calls or self.tool_call_id is not None:
                raise ConfigurationError(
                    "User history messages cannot contain tool-call fields",
                    hint="Put tool calls on assistant messages and results on tool messages.",
                )
        elif self.role == "assistant":
            if not self.content and not calls:
                raise ConfigurationError(
                    "Assistant history messages require text or tool calls",
                    hint="Drop empty assistant turns from the history.",
                )
            if self.tool_call_id is not None:
                raise ConfigurationError(
                    "Assistant history messages cannot have tool_call_id",
                    hint="Use role='tool' for tool results.",
                )
        else:
            if self.tool_call_id is None or not self.tool_call_id.strip():
                raise ConfigurationError(
                    "Tool history messages require a non-empty tool_call_id",
                    hint="Pass tool_call_id=<the ToolCall.id this result answers>.",
                )
            if calls:
                raise ConfigurationError(
                    "Tool history messages cannot contain nested tool calls",
                    hint="Put tool calls on the preceding assistant message.",
                )

    def to_jsonable(self) -> dict[str, Any]:
        """Serialize this message to a JSON-compatible dict."""
        payload: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            payload["tool_calls"] = [call.to_jsonable() for call in self.tool_calls]
        if self.tool_call_id is not None:
            payload["tool_call_id"] = self.tool_call_id
        return payload

    @classmethod
    def from_jsonable(cls, data: Mapping[str, Any]) -> Message:
        """Parse and validate a message produced by :meth:`to_jsonable`.

        Raises:
            ConfigurationError: The data is not a valid message.
        """
        data = require_mapping(data, "Message")
        role = data.get("role")
        if role not in _ROLES:
            raise ConfigurationError(
                f"Unsupported history message role: {describe(role)}", hint=_ROLE_HINT
            )
        content = data.get("content", "")
        if not isinstance(content, str):
            raise ConfigurationError(
                "Message content must be text", hint="Keep media in Source values."
            )
        tool_call_id = data.get("tool_call_id")
        return cls(
            role=cast("MessageRole", role),
            content=content,
            tool_calls=_tool_calls_from_jsonable(data.get("tool_calls")),
            tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
        )

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Message:
        """Build a message from one OpenAI Chat Completions message.

        System messages are rejected: stable system context belongs on
        :attr:`Environment.instructions`, not in portable history.

        Raises:
            ConfigurationError: An unsupported role or non-text content.
        """
        data = require_mapping(data, "OpenAI message")
        role = data.get("role")
        if role not in _ROLES:
            raise ConfigurationError(
                f"Unsupported OpenAI history role: {describe(role)}",
                hint="Move system messages to Environment.instructions.",
            )
        raw_calls = data.get("tool_calls")
        calls = (
            tuple(
                ToolCall.from_text(
                    id=call.id, name=call.name, arguments_text=call.arguments_text, index=call.index
                )
                for call in (
                    ToolCall.from_openai(item) for item in raw_calls if isinstance(item, Mapping)
                )
            )
            if isinstance(raw_calls, list)
            else ()
        )
        tool_call_id = data.get("tool_call_id")
        return cls(
            role=cast("MessageRole", role),
            content=_openai_text_content(data.get("content")),
            tool_calls=calls,
            tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
        )

    def to_openai(self) -> dict[str, Any]:
        """Serialize as one OpenAI Chat Completions message."""
        payload: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            payload["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            payload["tool_call_id"] = self.tool_call_id
        return payload
