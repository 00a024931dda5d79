"""Compile neutral pollux requests into OpenAI Responses API keyword arguments.

Everything here is pure: no SDK import, no I/O. The result is the exact ``dict`` passed to
``client.responses.create(**kwargs)``, so tests assert it verbatim.

Rules (each parameter is forwarded or rejected, never dropped):

- ``temperature``/``top_p`` are forwarded; ``max_tokens`` becomes ``max_output_tokens``.
- ``seed`` and ``reasoning_budget_tokens`` do not exist in the Responses API: rejected in
  :func:`validate_options`, before any I/O.
- ``reasoning_effort`` becomes ``reasoning={"effort": ..., "summary": "auto"}``.
- An output schema becomes a strict ``text.format`` json_schema (the shared rule of
  :mod:`pollux.providers._schema`: optional properties become required and nullable).
- ``ToolResult.is_error`` is forwarded: the ``function_call_output`` carries a JSON envelope
  ``{"is_error": true, "content": ...}`` (the Responses API has no error flag of its own).
- A continuation continues through ``previous_response_id``: only the tool outputs and the new
  user text are sent, never the environment sources again.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError
from pollux.providers._schema import strict_schema

if TYPE_CHECKING:
    from pollux.interaction.messages import Message
    from pollux.interaction.tools import ToolDeclaration, ToolResult

#: The ``text.format.name`` pollux uses for structured output.
SCHEMA_NAME = "pollux_structured_output"

#: Reasoning efforts the Responses API accepts.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")

_TOOL_CHOICES = ("auto", "required", "none")


def compile_tool(tool: ToolDeclaration) -> dict[str, Any]:
    """Compile one :class:`ToolDeclaration` to a Responses ``function`` tool."""
    parameters: Mapping[str, Any] = tool.parameters or {"type": "object", "properties": {}}
    compiled: dict[str, Any] = {"type": "function", "name": tool.name}
    if tool.description:
        compiled["description"] = tool.description
    # One strict rule for every provider (pollux.providers._schema): optional stays optional
    # (required and nullable), and a schema strict mode cannot express goes out non-strict.
    strict = strict_schema(parameters) if tool.strict else None
    compiled["parameters"] = strict if strict is not None else dict(parameters)
    compiled["strict"] = strict is not None
    return compiled


def compile_tool_choice(choice: Any, tools: Sequence[ToolDeclaration]) -> Any:
    """Compile a pollux ``ToolChoice`` (``auto``/``required``/``none``/``{"name": ...}``)."""
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise ConfigurationError(
                f"Unknown tool_choice {choice!r}",
                hint="Use 'auto', 'required', 'none' or {'name': '<tool name>'}.",
            )
        return choice
    if isinstance(choice, Mapping) and isinstance(choice.get("name"), str):
        name = choice["name"]
        if name not in {tool.name for tool in tools}:
            raise ConfigurationError(
                f"tool_choice names {name!r}, which is not a declared tool",
                hint="Declare the tool on the Environment (or tools=...), or fix the name.",
            )
        return {"type": "function", "name": name}
    raise ConfigurationError(
        f"Invalid tool_choice {choice!r}",
        hint="Use 'auto', 'required', 'none' or {'name': '<tool name>'}.",
    )


def compile_tool_result(result: ToolResult) -> dict[str, Any]:
    """Compile one :class:`ToolResult` to a ``function_call_output`` item."""
    output = result.content
    if result.is_error:
        output = json.dumps({"is_error": True, "content": result.content}, ensure_ascii=False)
    return {"type": "function_call_output", "call_id": result.call_id, "output": output}


def compile_history(history: Sequence[Message]) -> list[dict[str, Any]]:
    """Replay a portable transcript as Responses input items."""
    items: list[dict[str, Any]] = []
    for message in history:
        if message.role == "user":
            items.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            items.extend(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments_text,
                }
                for call in message.tool_calls
            )
        else:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content,
                }
            )
    return items


def validate_options(
    *,
    seed: int | None,
    reasoning_effort: str | None,
    reasoning_budget_tokens: int | None,
    provider_options: Mapping[str, Any] | None,
) -> None:
    """Reject what the Responses API cannot honour, before any I/O.

    Raises:
        ConfigurationError: For ``seed``, a reasoning budget, an unknown effort, or provider
            options that would overwrite keys pollux generates.
    """
    if seed is not None:
        raise ConfigurationError(
            "provider='openai' (Responses API) does not support seed",
            hint="Remove seed=..., or use a provider that honours it (for example local).",
        )
    if reasoning_budget_tokens is not None:
        raise ConfigurationError(
            "provider='openai' does not support reasoning_budget_tokens",
            hint=f"Use reasoning_effort= one of {', '.join(REASONING_EFFORTS)} instead.",
        )
    if reasoning_effort is not None and reasoning_effort not in REASONING_EFFORTS:
        raise ConfigurationError(
            f"Unknown reasoning_effort {reasoning_effort!r} for provider='openai'",
            hint=f"Use one of {', '.join(REASONING_EFFORTS)}.",
        )
    if provider_options:
        reserved = set(_RESERVED_KEYS) & set(provider_options)
        if reserved:
            raise ConfigurationError(
                "provider_options['openai'] may not set "
                + ", ".join(sorted(repr(k) for k in reserved)),
                hint="pollux builds these keys itself; use the matching pollux parameter.",
            )


# Keys pollux always owns; provider_options may add others, and may extend the objects pollux
# builds (``text``, ``reasoning``) with keys pollux does not set.
_RESERVED_KEYS = ("model", "input", "instructions", "stream", "previous_response_id")
# Lists that provider_options extend instead of replacing: hosted tools (web_search, ...) join
# the declared function tools; extra ``include`` values join any pollux sets.
_EXTENDABLE_LISTS = frozenset({"tools", "include"})


def compile_request(
    *,
    model: str,
    instructions: str | None,
    source_parts: Sequence[Mapping[str, Any]],
    content: str | None,
    tools: Sequence[ToolDeclaration] = (),
    output_schema: Mapping[str, Any] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    reasoning_effort: str | None = None,
    tool_choice: Any = None,
    previous_response_id: str | None = None,
    history: Sequence[Message] | None = None,
    tool_results: Sequence[ToolResult] = (),
    provider_options: Mapping[str, Any] | None = None,
    stream: bool = False,
) -> dict[str, Any]:
    """Build the keyword arguments of one ``responses.create`` call.

    Args:
        model: The model name.
        instructions: The system instructions (re-sent every turn: the Responses API does
            not carry them over through ``previous_response_id``).
        source_parts: Prepared input parts for the environment sources (see ``uploads``).
        content: The user text of this turn.
        tools: Tool declarations (re-sent every turn, like instructions).
        output_schema: JSON Schema for structured output, strictified here.
        temperature: Sampling temperature.
        top_p: Nucleus sampling.
        max_tokens: Output token cap, sent as ``max_output_tokens``.
        reasoning_effort: Reasoning effort; a summary is requested too.
        tool_choice: A pollux tool choice.
        previous_response_id: The response this turn continues (continuation turns).
        history: A portable transcript to replay (first turns with history).
        tool_results: Results of the previous turn's tool calls.
        provider_options: Raw extra keys for ``responses.create``.
        stream: Whether to request server-sent events.

    Returns:
        The keyword arguments for ``responses.create``.
    """
    if tool_results and previous_response_id is None and not history:
        raise ConfigurationError(
            "tool_results need the turn that requested them",
            hint="Pass Input(continuation=previous_output.continuation, tool_results=...).",
        )
    items: list[dict[str, Any]] = []
    continuing = previous_response_id is not None
    if not continuing and history:
        # Sources lead as their own user turn so the replayed transcript keeps its order.
        if source_parts:
            items.append({"role": "user", "content": [dict(p) for p in source_parts]})
        items.extend(compile_history(history))
    items.extend(compile_tool_result(result) for result in tool_results)
    user_parts: list[dict[str, Any]] = []
    if not continuing and not history:
        user_parts.extend(dict(p) for p in source_parts)
    if content is not None and content.strip():
        user_parts.append({"type": "input_text", "text": content})
    if user_parts:
        items.append({"role": "user", "content": user_parts})

    kwargs: dict[str, Any] = {"model": model, "input": items}
    if instructions:
        kwargs["instructions"] = instructions
    if previous_response_id is not None:
        kwargs["previous_response_id"] = previous_response_id
    if tools:
        kwargs["tools"] = [compile_tool(tool) for tool in tools]
    if tool_choice is not None:
        kwargs["tool_choice"] = compile_tool_choice(tool_choice, tools)
    if output_schema is not None:
        if output_schema.get("type") != "object":
            raise ConfigurationError(
                "provider='openai' structured output needs a JSON Schema whose root is an object",
                hint='Wrap the value: {"type": "object", "properties": {"items": <your schema>}}.',
            )
        strict = strict_schema(output_schema)
        kwargs["text"] = {
            "format": {
                "type": "json_schema",
                "name": SCHEMA_NAME,
                "schema": strict if strict is not None else dict(output_schema),
                "strict": strict is not None,
            }
        }
    if temperature is not None:
        kwargs["temperature"] = temperature
    if top_p is not None:
        kwargs["top_p"] = top_p
    if max_tokens is not None:
        kwargs["max_output_tokens"] = max_tokens
    if reasoning_effort is not None:
        kwargs["reasoning"] = {"effort": reasoning_effort}
        extra_reasoning = (provider_options or {}).get("reasoning")
        # The summary is a default, not a user choice: provider_options may pick another one.
        if not (isinstance(extra_reasoning, Mapping) and "summary" in extra_reasoning):
            kwargs["reasoning"]["summary"] = "auto"
    if provider_options:
        collisions = _merge_options(kwargs, provider_options, prefix="")
        if collisions:
            raise ConfigurationError(
                "provider_options['openai'] collides with "
                + ", ".join(repr(k) for k in collisions),
                hint="Set these through the pollux parameters, not provider_options.",
            )
    if stream:
        kwargs["stream"] = True
    return kwargs


def _merge_options(target: dict[str, Any], extra: Mapping[str, Any], *, prefix: str) -> list[str]:
    """Deep-merge ``extra`` into ``target``; return the leaf keys both define (not merged).

    Objects merge key by key, so ``{"text": {"verbosity": "low"}}`` combines with the
    ``text.format`` pollux builds, and ``{"reasoning": {"summary": "detailed"}}`` with the
    effort; ``tools`` and ``include`` lists are extended (hosted tools join the function tools);
    any other key set on both sides is a collision.
    """
    collisions: list[str] = []
    for key, value in extra.items():
        path = f"{prefix}{key}"
        current = target.get(key)
        if key not in target:
            target[key] = copy.deepcopy(value)
        elif isinstance(current, dict) and isinstance(value, Mapping):
            collisions.extend(_merge_options(current, value, prefix=f"{path}."))
        elif not prefix and key in _EXTENDABLE_LISTS and isinstance(current, list):
            if not isinstance(value, list):
                collisions.append(path)
            else:
                current.extend(copy.deepcopy(value))
        else:
            collisions.append(path)
    return collisions


__all__ = [
    "REASONING_EFFORTS",
    "SCHEMA_NAME",
    "compile_history",
    "compile_request",
    "compile_tool",
    "compile_tool_choice",
    "compile_tool_result",
    "strict_schema",
    "validate_options",
]
