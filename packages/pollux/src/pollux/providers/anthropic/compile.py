"""Compile a neutral interaction into the keyword arguments of one ``messages.create`` call.

Wire mapping:

- ``instructions`` -> ``system`` (one text block, so it can carry a cache breakpoint).
- Sources lead the first user message of the conversation, re-sent every turn but never copied
  into the continuation (so a long agent loop does not repeat them turn after turn).
- Conversation: a continuation replays its Anthropic messages verbatim (signed ``thinking`` and
  ``redacted_thinking`` blocks included, untouched, as the API requires for extended-thinking
  tool loops); ``Input.history`` is translated; tool results become ``tool_result`` blocks (with
  ``is_error``) leading the next user message. Consecutive messages of the same role are merged,
  since the API requires strict user/assistant alternation.
- Tools -> ``{name, description, input_schema, strict}``; ``tool_choice`` ``auto``/``none`` as
  is, ``required`` -> ``any``, ``{"name": ...}`` -> ``{"type": "tool", "name": ...}``.
- Structured output -> ``output_config.format = {type: json_schema, schema}``, where the schema
  is the declared one with ``additionalProperties: false`` added to objects that do not say
  otherwise (the API requires closed objects). Nothing else changes: ``required`` stays as
  declared, so optional fields stay optional.
- Reasoning: see :mod:`.models`. ``reasoning_effort`` -> adaptive thinking plus
  ``output_config.effort`` where the model has them, else a thinking budget (low 2048, medium
  5120, high 10240, max 12288); ``reasoning_budget_tokens`` -> ``thinking.budget_tokens`` (0
  disables thinking). Manual thinking with tools adds the ``interleaved-thinking-2025-05-14``
  beta, so the model may think between tool calls.
- ``max_tokens`` is required on the wire: the model family's default when not given (raised
  above a thinking budget when only the default is in the way).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError

from .caching import apply_breakpoints
from .models import EFFORT_BUDGETS, EFFORTS, family
from .uploads import FILES_BETA

if TYPE_CHECKING:
    from pollux.interaction.messages import Message
    from pollux.interaction.tools import ToolDeclaration, ToolResult

__all__ = [
    "INTERLEAVED_THINKING_BETA",
    "AnthropicCall",
    "compile_history",
    "compile_request",
    "compile_tool",
    "compile_tool_choice",
    "compile_tool_result",
    "conversation",
    "json_schema",
    "output_root",
    "plain",
    "validate_options",
]

#: The beta for thinking between tool calls on models with manual (budget) thinking.
INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"

#: The smallest thinking budget the API accepts.
MIN_BUDGET_TOKENS = 1024

_TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any"}
# Keys pollux always owns; provider_options may add others and extend ``tools`` (server tools).
_RESERVED_KEYS = ("model", "messages", "stream", "system")
_EXTENDABLE_LISTS = frozenset({"tools", "stop_sequences"})


@dataclass(frozen=True, slots=True)
class AnthropicCall:
    """One compiled request: the ``messages.create`` kwargs and the betas it needs.

    Attributes:
        kwargs: Plain-JSON keyword arguments (what the SDK sends as the body).
        betas: ``anthropic-beta`` values the request needs (Files API, interleaved thinking).
        breakpoints: How many ``cache_control`` breakpoints were placed.
    """

    kwargs: dict[str, Any]
    betas: tuple[str, ...] = ()
    breakpoints: int = 0
    stream: bool = field(default=False)

    def headers(self) -> dict[str, str] | None:
        """The extra headers to send (``anthropic-beta``), or ``None``."""
        return {"anthropic-beta": ",".join(self.betas)} if self.betas else None


def plain(value: Any) -> Any:
    """A deep plain-JSON copy (continuation state is a read-only view; the SDK needs dicts)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The declared schema, closed where the API requires it; the input is not modified.

    Every object schema without ``additionalProperties`` gets ``additionalProperties: false``;
    ``required`` and every other keyword stay as declared.

    Raises:
        ConfigurationError: An object allows additional properties (the API cannot enforce that).
    """
    root = copy.deepcopy(dict(schema))
    closed: dict[str, Any] = _close(root, "#")
    return closed


_DEF_KEYS = ("$defs", "definitions")


def _local_refs(node: Any) -> set[str]:
    """Every local ``$ref`` under ``node``."""
    if isinstance(node, list):
        return set().union(*(_local_refs(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
    for key, value in node.items():
        if key not in _DEF_KEYS:
            found |= _local_refs(value)
    return found


def output_root(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The output schema with a root ``$ref`` resolved; recursive schemas refused.

    Pydantic names a recursive model's root in ``$defs`` (``{"$ref": "#/$defs/Tree"}``), and a
    hand-written schema may do the same. Anthropic's structured output serves neither
    recursion nor a root that is not an object, so recursion is refused here with its own
    message, before any request is paid for.

    Raises:
        ConfigurationError: A definition refers back to itself, directly or through others.
    """
    definitions = {
        f"#/{key}/{name}": sub
        for key in _DEF_KEYS
        if isinstance(schema.get(key), Mapping)
        for name, sub in schema[key].items()
    }
    edges = {ref: _local_refs(sub) & definitions.keys() for ref, sub in definitions.items()}

    def cycle_from(start: str) -> bool:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            ref = todo.pop()
            if ref == start:
                return True
            if ref not in seen:
                seen.add(ref)
                todo.extend(edges.get(ref, ()))
        return False

    for ref in sorted(definitions):
        if cycle_from(ref):
            raise ConfigurationError(
                f"The output schema is recursive ({ref} refers to itself), which Anthropic's "
                "structured output cannot serve",
                hint="Bound the recursion: nest a fixed number of levels with their own models, "
                "or make the recursive part a JSON string field you parse yourself.",
            )
    root_ref = schema.get("$ref")
    target = definitions.get(root_ref) if isinstance(root_ref, str) else None
    if not isinstance(target, Mapping):
        return schema
    rest = {key: value for key, value in schema.items() if key != "$ref"}
    return {**rest, **target}


def _close(node: Any, path: str) -> Any:
    if isinstance(node, list):
        return [_close(item, f"{path}/{i}") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    for key in ("$defs", "definitions", "properties", "patternProperties"):
        value = node.get(key)
        if isinstance(value, dict):
            node[key] = {name: _close(sub, f"{path}/{key}/{name}") for name, sub in value.items()}
    for key in ("items", "anyOf", "oneOf", "allOf", "prefixItems", "not"):
        if key in node:
            node[key] = _close(node[key], f"{path}/{key}")
    is_object = node.get("type") == "object" or ("properties" in node and "type" not in node)
    if is_object:
        extra = node.get("additionalProperties", False)
        if extra is not False:
            raise ConfigurationError(
                f"provider='anthropic' structured output needs closed objects, but {path} "
                "allows additional properties",
                hint="Drop additionalProperties (or set it to false), or model the open part "
                "as a list of key/value objects.",
            )
        node["additionalProperties"] = False
    return node


def compile_tool(tool: ToolDeclaration, *, strict_ok: bool) -> dict[str, Any]:
    """Compile one :class:`ToolDeclaration` to a Messages API tool."""
    parameters: Mapping[str, Any] = tool.parameters or {"type": "object", "properties": {}}
    compiled: dict[str, Any] = {"name": tool.name}
    if tool.description:
        compiled["description"] = tool.description
    if tool.strict and strict_ok:
        compiled["input_schema"] = json_schema(parameters)
        compiled["strict"] = True
    else:
        compiled["input_schema"] = plain(parameters)
    return compiled


def compile_tool_choice(choice: Any) -> dict[str, Any]:
    """Compile a pollux ``ToolChoice`` (the engine checked that a named tool is declared)."""
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise ConfigurationError(
                f"Unknown tool_choice {choice!r}",
                hint="Use 'auto', 'required', 'none' or {'name': '<tool name>'}.",
            )
        return {"type": _TOOL_CHOICES[choice]}
    if isinstance(choice, Mapping) and isinstance(choice.get("name"), str):
        return {"type": "tool", "name": choice["name"]}
    raise ConfigurationError(
        f"Invalid tool_choice {choice!r}",
        hint="Use 'auto', 'required', 'none' or {'name': '<tool name>'}.",
    )


def compile_tool_result(result: ToolResult) -> dict[str, Any]:
    """Compile one :class:`ToolResult` to a ``tool_result`` block (``is_error`` forwarded)."""
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": result.content,
    }
    if result.is_error:
        block["is_error"] = True
    return block


def compile_history(history: Sequence[Message]) -> list[dict[str, Any]]:
    """Translate a portable transcript into Anthropic messages (roles not yet merged)."""
    messages: list[dict[str, Any]] = []
    for message in history:
        if message.role == "user":
            if message.content:  # the API refuses empty content
                text = {"type": "text", "text": message.content}
                messages.append({"role": "user", "content": [text]})
        elif message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            for call in message.tool_calls:
                arguments = call.arguments if isinstance(call.arguments, dict) else {}
                blocks.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}
                )
            if blocks:
                messages.append({"role": "assistant", "content": blocks})
        else:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": message.tool_call_id,
                            "content": message.content,
                        }
                    ],
                }
            )
    return messages


def _blocks(content: Any) -> list[Any]:
    # The API also takes a message's content as a plain string, and continuations stored in
    # pollux 2.0's portable layout carry it that way; list("text") would split it into letters.
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def _merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1] = {
                "role": message["role"],
                "content": list(merged[-1]["content"]) + _blocks(message["content"]),
            }
        else:
            merged.append({"role": message["role"], "content": _blocks(message["content"])})
    for message in merged:
        if message["role"] == "user":
            # tool_result blocks must lead a user message.
            content = message["content"]
            results = [b for b in content if b.get("type") == "tool_result"]
            if results and content[: len(results)] != results:
                others = [b for b in content if b.get("type") != "tool_result"]
                message["content"] = results + others
    return merged


def conversation(
    *,
    prior: Sequence[Mapping[str, Any]] | None,
    history: Sequence[Message] | None,
    tool_results: Sequence[ToolResult],
    content: str | None,
) -> list[dict[str, Any]]:
    """The conversation without sources: earlier turns, then this turn's user message.

    This is also what a continuation keeps (with the assistant's reply appended).
    """
    messages: list[dict[str, Any]] = plain(list(prior)) if prior else []
    if not prior and history:
        messages.extend(compile_history(history))
    turn: list[dict[str, Any]] = [compile_tool_result(result) for result in tool_results]
    if content is not None and content.strip():
        turn.append({"type": "text", "text": content})
    if turn:
        messages.append({"role": "user", "content": turn})
    return _merge_roles(messages)


def validate_options(
    *,
    model: str | None,
    reasoning_effort: str | None,
    reasoning_budget_tokens: int | None,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    tool_choice: Any,
    has_schema: bool,
    provider_options: Mapping[str, Any] | None,
    has_tools: bool = False,
) -> None:
    """Reject what the Messages API cannot honour for this model, before any I/O.

    Raises:
        ConfigurationError: With a hint saying what to change.
    """
    fam = family(model)
    thinking = reasoning_effort is not None or bool(reasoning_budget_tokens)
    if (reasoning_effort is not None or reasoning_budget_tokens is not None) and not fam.reasoning:
        raise ConfigurationError(
            f"{model!r} has no extended thinking (reasoning_effort / reasoning_budget_tokens)",
            hint="Use Claude 3.7 or a Claude 4+ model, or drop the reasoning options.",
        )
    if reasoning_effort is not None:
        if reasoning_effort not in EFFORTS:
            raise ConfigurationError(
                f"Unknown reasoning_effort {reasoning_effort!r} for provider='anthropic'",
                hint=f"Use one of {', '.join(EFFORTS)}.",
            )
        if reasoning_effort == "max" and not fam.max_effort:
            raise ConfigurationError(
                f"reasoning_effort='max' is not available on {model!r}",
                hint="Use 'high', or a model with the max effort (Opus 4.6 or later).",
            )
    if reasoning_budget_tokens is not None and 0 < reasoning_budget_tokens < MIN_BUDGET_TOKENS:
        raise ConfigurationError(
            f"reasoning_budget_tokens={reasoning_budget_tokens} is below Anthropic's minimum "
            f"of {MIN_BUDGET_TOKENS}",
            hint=f"Pass at least {MIN_BUDGET_TOKENS}, or 0 to turn thinking off.",
        )
    budget = _budget(fam.adaptive_thinking, reasoning_effort, reasoning_budget_tokens)
    # With tools, budget thinking is interleaved (the beta): the budget then covers every
    # thinking block of the turn and may exceed max_tokens.
    if budget and not has_tools and max_tokens is not None and max_tokens <= budget:
        raise ConfigurationError(
            f"max_tokens={max_tokens} must be larger than the thinking budget ({budget})",
            hint="Raise max_tokens (thinking counts toward it), or lower the reasoning budget.",
        )
    if thinking:
        if temperature is not None and temperature != 1:
            raise ConfigurationError(
                "provider='anthropic' does not take temperature together with thinking",
                hint="Drop temperature=, or drop the reasoning options.",
            )
        if top_p is not None and top_p < 0.95:
            raise ConfigurationError(
                "provider='anthropic' takes top_p between 0.95 and 1 with thinking",
                hint="Raise top_p to 0.95 or more, drop it, or drop the reasoning options.",
            )
        if tool_choice == "required" or isinstance(tool_choice, Mapping):
            raise ConfigurationError(
                "provider='anthropic' allows only tool_choice 'auto' or 'none' with thinking",
                hint="Use tool_choice='auto', or drop the reasoning options.",
            )
    if has_schema and not fam.structured_outputs:
        raise ConfigurationError(
            f"{model!r} has no JSON-schema structured output",
            hint="Use a Claude 4+ model, or drop output= and parse the text yourself.",
        )
    if provider_options:
        reserved = set(_RESERVED_KEYS) & set(provider_options)
        if reserved:
            raise ConfigurationError(
                "provider_options['anthropic'] may not set "
                + ", ".join(sorted(repr(k) for k in reserved)),
                hint="pollux builds these keys itself; use the matching pollux parameter.",
            )


def _budget(adaptive: bool, effort: str | None, budget: int | None) -> int | None:
    if budget is not None:
        return budget
    if effort is not None and not adaptive:
        return EFFORT_BUDGETS[effort]
    return None


def compile_request(
    *,
    model: str,
    instructions: str | None,
    source_blocks: Sequence[Mapping[str, Any]],
    messages: list[dict[str, Any]],
    tools: Sequence[ToolDeclaration] = (),
    output_schema: Mapping[str, Any] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    reasoning_effort: str | None = None,
    reasoning_budget_tokens: int | None = None,
    tool_choice: Any = None,
    provider_options: Mapping[str, Any] | None = None,
    cache: Mapping[str, str] | None = None,
    conversation_end: int | None = None,
    uses_files: bool = False,
    stream: bool = False,
) -> AnthropicCall:
    """Build one ``messages.create`` call.

    Args:
        model: The model name.
        instructions: The system prompt.
        source_blocks: Content blocks of the environment's sources (see ``uploads``).
        messages: The conversation without sources (see :func:`conversation`).
        tools: Tool declarations.
        output_schema: JSON Schema for structured output.
        temperature: Sampling temperature.
        top_p: Nucleus sampling.
        max_tokens: Output token cap (the family default when ``None``).
        reasoning_effort: ``low``/``medium``/``high``/``max``.
        reasoning_budget_tokens: An explicit thinking budget (0 disables thinking).
        tool_choice: A pollux tool choice.
        provider_options: Raw extra keys for the request body.
        cache: The ``cache_control`` value to mark the stable prefix with, or ``None``.
        conversation_end: Index in ``messages`` of the last replayed message (a breakpoint).
        uses_files: Whether a source block references the Files API (adds its beta).
        stream: Whether to request server-sent events.

    Returns:
        The compiled call.
    """
    fam = family(model)
    betas: list[str] = []
    body_messages = [dict(m) for m in messages]
    if source_blocks:
        lead = [dict(block) for block in source_blocks]
        if body_messages and body_messages[0]["role"] == "user":
            body_messages[0] = {"role": "user", "content": lead + list(body_messages[0]["content"])}
        else:
            body_messages.insert(0, {"role": "user", "content": lead})
            if conversation_end is not None:
                conversation_end += 1
    kwargs: dict[str, Any] = {"model": model, "messages": body_messages}
    if instructions:
        kwargs["system"] = [{"type": "text", "text": instructions}]
    if tools:
        kwargs["tools"] = [compile_tool(tool, strict_ok=fam.structured_outputs) for tool in tools]
    if tool_choice is not None:
        kwargs["tool_choice"] = compile_tool_choice(tool_choice)
    output_config: dict[str, Any] = {}
    if output_schema is not None:
        root = output_root(output_schema)
        if root.get("type") != "object":
            raise ConfigurationError(
                "provider='anthropic' structured output needs a JSON Schema whose root is an "
                "object",
                hint='Wrap the value: {"type": "object", "properties": {"items": <your schema>}}.',
            )
        output_config["format"] = {"type": "json_schema", "schema": json_schema(root)}
    budget = _budget(fam.adaptive_thinking, reasoning_effort, reasoning_budget_tokens)
    if reasoning_budget_tokens == 0:
        kwargs["thinking"] = {"type": "disabled"}
    elif budget:
        kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if tools:
            betas.append(INTERLEAVED_THINKING_BETA)
    elif reasoning_effort is not None:
        kwargs["thinking"] = {"type": "adaptive"}
    if reasoning_effort is not None and fam.effort:
        output_config["effort"] = reasoning_effort
    if output_config:
        kwargs["output_config"] = output_config
    if max_tokens is None:
        max_tokens = fam.default_max_tokens
        if budget and max_tokens <= budget:
            max_tokens = budget + fam.default_max_tokens
    kwargs["max_tokens"] = max_tokens
    if temperature is not None:
        kwargs["temperature"] = temperature
    if top_p is not None:
        kwargs["top_p"] = top_p
    if provider_options:
        collisions = _merge_options(kwargs, provider_options, prefix="")
        if collisions:
            raise ConfigurationError(
                "provider_options['anthropic'] collides with "
                + ", ".join(repr(k) for k in collisions),
                hint="Set these through the pollux parameters, not provider_options.",
            )
    breakpoints = 0
    if cache is not None:
        breakpoints = apply_breakpoints(
            kwargs,
            dict(cache),
            source_count=len(source_blocks),
            conversation_end=conversation_end,
        )
    if uses_files:
        betas.insert(0, FILES_BETA)
    if stream:
        kwargs["stream"] = True
    return AnthropicCall(kwargs=kwargs, betas=tuple(betas), breakpoints=breakpoints, stream=stream)


def _merge_options(target: dict[str, Any], extra: Mapping[str, Any], *, prefix: str) -> list[str]:
    """Deep-merge ``extra`` into ``target``; return the leaf keys both define (not merged).

    Objects merge key by key (``{"output_config": {"task_budget": ...}}`` joins the format pollux
    builds); ``tools`` and ``stop_sequences`` lists are extended (server tools join the declared
    tools); any other key set on both sides is a collision.
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
            if isinstance(value, list):
                current.extend(copy.deepcopy(value))
            else:
                collisions.append(path)
        else:
            collisions.append(path)
    return collisions
