"""Build the ``generate_content`` arguments for one neutral request.

The payload is plain data in the SDK's snake_case dict form (``{"model", "contents",
"config"}``), so tests read it directly and the SDK validates it once. Rules:

- Instructions are the ``system_instruction``; ``temperature``, ``top_p``, ``max_tokens``
  (``max_output_tokens``) and ``seed`` are forwarded, never dropped.
- Structured output sends ``response_mime_type="application/json"`` and the sanitized
  ``response_json_schema`` (see :mod:`.schema`).
- ``reasoning_effort`` becomes ``thinking_config.thinking_level`` on Gemini 3 and later, and a
  thinking budget on Gemini 2.x (which has no levels); ``reasoning_budget_tokens`` is the
  ``thinking_budget``. Thoughts are requested whenever thinking is on, so they reach
  ``Output.reasoning``.
- Tools are one ``function_declarations`` tool (schemas sanitized) plus ``url_context`` when a
  source asks for it; ``tool_choice`` maps to ``AUTO`` / ``ANY`` / ``NONE`` (a named tool is
  ``ANY`` restricted to that name).
- A conversation is replayed from the continuation's transcript (Gemini keeps no server-side
  state); the environment's source parts are put once at the head of the first user turn, so
  they are never duplicated turn after turn and the prefix stays cacheable. Tool results are
  ``function_response`` parts (an error result answers ``{"error": ...}``), merged with the new
  user text into one user turn. Thought signatures travel base64 in the transcript and are
  sent back as bytes.
- With a persistent cache, the request names ``cached_content`` and carries neither the
  sources nor the instructions nor the tools: they live in the cache.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError
from pollux.interaction.tools import ToolResult

from .schema import gemini_schema

if TYPE_CHECKING:
    from pollux.interaction.messages import Message
    from pollux.interaction.tools import ToolDeclaration

__all__ = [
    "REASONING_EFFORTS",
    "SKIP_SIGNATURE",
    "compile_history",
    "compile_tool_choice",
    "compile_tool_result",
    "compile_tools",
    "payload_contents",
    "rest_request",
    "thinking_config",
    "turn_contents",
    "validate_options",
]

#: Efforts pollux accepts for Gemini (``none`` turns thinking off where the model allows it).
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")

#: Gemini 2.x has thinking budgets, not levels: the budget each effort stands for.
EFFORT_BUDGETS = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576}

#: Google's documented placeholder for a function call that has no real thought signature
#: (a transcript replayed from portable history): Gemini 3 validates signatures otherwise.
SKIP_SIGNATURE = "skip_thought_signature_validator"

_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
# Keys pollux builds; provider_options may add any other GenerateContentConfig field.
_RESERVED = frozenset(
    {
        "system_instruction",
        "tools",
        "tool_config",
        "cached_content",
        "response_json_schema",
        "response_schema",
        "contents",
        "model",
    }
)


def _levels(model: str) -> bool:
    """Whether the model takes ``thinking_level`` (Gemini 3 and later) rather than a budget."""
    name = model.rsplit("/", 1)[-1]
    return not name.startswith(("gemini-2", "gemini-1"))


def _always_thinks(model: str) -> bool:
    """Whether the model refuses to turn thinking off (Gemini 2.5 Pro, Gemini 3 and later)."""
    return _levels(model) or model.rsplit("/", 1)[-1].startswith("gemini-2.5-pro")


def validate_options(
    *,
    model: str,
    reasoning_effort: str | None,
    provider_options: Mapping[str, Any] | None,
    reasoning_budget_tokens: int | None = None,
) -> None:
    """Reject what Gemini cannot honour, before any I/O.

    Raises:
        ConfigurationError: An unknown effort, thinking turned off on a model that always
            thinks, or provider options that would overwrite keys pollux generates.
    """
    if reasoning_effort is not None and reasoning_effort not in REASONING_EFFORTS:
        raise ConfigurationError(
            f"Unknown reasoning_effort {reasoning_effort!r} for provider='gemini'",
            hint=f"Use one of {', '.join(REASONING_EFFORTS)}, or reasoning_budget_tokens=N.",
        )
    off = (
        "reasoning_effort='none'"
        if reasoning_effort == "none"
        else ("reasoning_budget_tokens=0" if reasoning_budget_tokens == 0 else None)
    )
    if off is not None and _always_thinks(model):
        raise ConfigurationError(
            f"{model} cannot turn thinking off ({off}): it only works in thinking mode",
            hint="Use reasoning_effort='low' ('minimal' on Gemini 3) or a small "
            "reasoning_budget_tokens such as 128, or a model that can stop thinking "
            "(gemini-2.5-flash).",
        )
    if provider_options:
        reserved = sorted(_RESERVED & set(provider_options))
        if reserved:
            raise ConfigurationError(
                "provider_options['gemini'] may not set " + ", ".join(map(repr, reserved)),
                hint="pollux builds these itself; use the matching pollux parameter "
                "(instructions, tools, tool_choice, output, a CachePolicy).",
            )


def thinking_config(
    model: str, reasoning_effort: str | None, reasoning_budget_tokens: int | None
) -> dict[str, Any] | None:
    """The ``thinking_config`` for an effort or a budget (``None`` when neither is set)."""
    if reasoning_budget_tokens is not None:
        return {
            "thinking_budget": reasoning_budget_tokens,
            "include_thoughts": reasoning_budget_tokens != 0,
        }
    if reasoning_effort is None:
        return None
    if _levels(model):
        return {"thinking_level": reasoning_effort.upper(), "include_thoughts": True}
    budget = EFFORT_BUDGETS[reasoning_effort]
    return {"thinking_budget": budget, "include_thoughts": budget != 0}


def compile_tools(tools: Sequence[ToolDeclaration], *, url_context: bool) -> list[dict[str, Any]]:
    """The ``tools`` list: one function-declarations tool, plus ``url_context`` when asked."""
    compiled: list[dict[str, Any]] = []
    if tools:
        declarations = []
        for tool in tools:
            declaration: dict[str, Any] = {"name": tool.name}
            if tool.description:
                declaration["description"] = tool.description
            if tool.parameters:
                declaration["parameters_json_schema"] = gemini_schema(
                    tool.parameters, what=f"parameters of tool {tool.name!r}"
                )
            declarations.append(declaration)
        compiled.append({"function_declarations": declarations})
    if url_context:
        compiled.append({"url_context": {}})
    return compiled


def compile_tool_choice(choice: Any, tools: Sequence[ToolDeclaration]) -> dict[str, Any]:
    """Compile a pollux ``ToolChoice`` to a ``tool_config``."""
    if isinstance(choice, str):
        if choice not in _MODES:
            raise ConfigurationError(
                f"Unknown tool_choice {choice!r}",
                hint="Use 'auto', 'required', 'none' or {'name': '<tool name>'}.",
            )
        return {"function_calling_config": {"mode": _MODES[choice]}}
    if isinstance(choice, Mapping) and isinstance(choice.get("name"), str):
        name = choice["name"]
        if name not in {tool.name for tool in tools}:
            raise ConfigurationError(
                f"tool_choice names {name!r}, which is not a declared tool",
                hint="Declare the tool on the Environment (or tools=...), or fix the name.",
            )
        return {"function_calling_config": {"mode": "ANY", "allowed_function_names": [name]}}
    raise ConfigurationError(
        f"Invalid tool_choice {choice!r}",
        hint="Use 'auto', 'required', 'none' or {'name': '<tool name>'}.",
    )


def compile_tool_result(result: ToolResult, name: str) -> dict[str, Any]:
    """One ``function_response`` part; JSON-object content is sent as is, other text wrapped."""
    response: dict[str, Any]
    try:
        parsed = json.loads(result.content)
    except ValueError:
        parsed = None
    if result.is_error:
        response = {"error": parsed if isinstance(parsed, dict) else result.content}
    elif isinstance(parsed, dict):
        response = parsed
    else:
        response = {"result": result.content}
    return {"function_response": {"id": result.call_id, "name": name, "response": response}}


def _call_names(contents: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    for content in contents:
        for part in content.get("parts") or ():
            call = part.get("function_call")
            if isinstance(call, Mapping) and call.get("id"):
                names[str(call["id"])] = str(call.get("name") or "")
    return names


def compile_history(history: Sequence[Message], *, model: str) -> list[dict[str, Any]]:
    """Replay a portable transcript as Gemini contents (consecutive same-role turns merged).

    Function calls from a portable transcript carry no thought signature; on Gemini 3 they get
    Google's documented placeholder so the request validates.
    """
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for message in history:
        if message.role == "user":
            add("user", [{"text": message.content}])
        elif message.role == "assistant":
            parts: list[dict[str, Any]] = []
            if message.content:
                parts.append({"text": message.content})
            for call in message.tool_calls:
                names[call.id] = call.name
                part: dict[str, Any] = {
                    "function_call": {
                        "id": call.id,
                        "name": call.name,
                        "args": call.arguments_dict() if call.arguments_text.strip() else {},
                    }
                }
                if _levels(model):
                    part["thought_signature"] = _b64(SKIP_SIGNATURE.encode())
                parts.append(part)
            add("model", parts)
        else:
            call_id = message.tool_call_id or ""
            if call_id not in names:
                raise ConfigurationError(
                    f"History has a tool message for call {call_id!r} that no assistant "
                    "message requested",
                    hint="Put the assistant message with that tool call before its result.",
                )
            add(
                "user",
                [
                    compile_tool_result(
                        ToolResult(call_id=call_id, content=message.content), names[call_id]
                    )
                ],
            )
    return contents


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def turn_contents(
    *,
    transcript: Sequence[Mapping[str, Any]] | None,
    history: Sequence[Message] | None,
    content: str | None,
    tool_results: Sequence[ToolResult],
    model: str,
) -> list[dict[str, Any]]:
    """The conversation so far plus this turn's user content, without the source parts.

    This is what the continuation stores (base64 signatures, JSON-compatible); the sources are
    added by :func:`payload_contents` at send time.
    """
    contents = [copy.deepcopy(dict(c)) for c in transcript or ()]
    if history:
        contents.extend(compile_history(history, model=model))
    names = _call_names(contents)
    parts: list[dict[str, Any]] = []
    for result in tool_results:
        name = names.get(result.call_id)
        if name is None:
            raise ConfigurationError(
                f"tool result for unknown call id {result.call_id!r}",
                hint="Answer the ids in output.tool_calls of the turn you continue: "
                + (", ".join(sorted(names)) or "that turn requested no tools"),
            )
        parts.append(compile_tool_result(result, name))
    if content is not None and content.strip():
        parts.append({"text": content})
    if parts:
        if contents and contents[-1]["role"] == "user":
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": "user", "parts": parts})
    return contents


def payload_contents(
    contents: Sequence[Mapping[str, Any]], source_parts: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The contents to send: sources head the first user turn, signatures become bytes."""
    sent: list[dict[str, Any]] = []
    for content in contents:
        parts = []
        for part in content.get("parts") or ():
            signature = part.get("thought_signature")
            if isinstance(signature, str):
                part = {**part, "thought_signature": base64.b64decode(signature)}
            parts.append(part)
        sent.append({"role": content["role"], "parts": parts})
    if source_parts:
        shared = [dict(part) for part in source_parts]
        if sent and sent[0]["role"] == "user":
            sent[0]["parts"] = shared + sent[0]["parts"]
        else:
            sent.insert(0, {"role": "user", "parts": shared})
    if not sent:
        raise ConfigurationError(
            "The request has nothing to send: no prompt, sources or tool results",
            hint="Pass a prompt, or sources to ask about.",
        )
    return sent


# Config keys that are request fields in REST JSON (the rest go to generationConfig).
_TOP_LEVEL = frozenset(
    {"system_instruction", "tools", "tool_config", "safety_settings", "cached_content", "labels"}
)
# Keys whose values are user data (schemas, arguments): their inner keys are not renamed.
_OPAQUE = frozenset(
    {"response_json_schema", "parameters_json_schema", "response_schema", "args", "response"}
)


# Every request and response renames the same few keys: remember them.
@functools.lru_cache(maxsize=1024)
def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _rest(value: Any, *, opaque: bool = False) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, list):
        return [_rest(item, opaque=opaque) for item in value]
    if isinstance(value, Mapping):
        if opaque:
            return {key: _rest(item, opaque=True) for key, item in value.items()}
        return {_camel(k): _rest(v, opaque=k in _OPAQUE) for k, v in value.items()}
    return value


def rest_request(compiled: Mapping[str, Any]) -> dict[str, Any]:
    """One compiled ``generate_content`` call as a REST ``GenerateContentRequest`` (JSONL)."""
    config = dict(compiled.get("config") or {})
    config.pop("automatic_function_calling", None)
    request: dict[str, Any] = {"contents": _rest(list(compiled.get("contents") or ()))}
    generation: dict[str, Any] = {}
    for key, value in config.items():
        if key == "system_instruction":
            text = value if isinstance(value, str) else None
            request["systemInstruction"] = (
                {"parts": [{"text": text}]} if text is not None else _rest(value)
            )
        elif key in _TOP_LEVEL:
            request[_camel(key)] = _rest(value)
        else:
            generation[_camel(key)] = _rest(value, opaque=key in _OPAQUE)
    if generation:
        request["generationConfig"] = generation
    return request


def build_config(
    *,
    model: str,
    instructions: str | None,
    tools: Sequence[ToolDeclaration],
    url_context: bool,
    output_schema: Mapping[str, Any] | None,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
    seed: int | None,
    reasoning_effort: str | None,
    reasoning_budget_tokens: int | None,
    tool_choice: Any,
    cached_content: str | None,
    provider_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ``GenerateContentConfig`` as a dict (see the module docstring for the rules)."""
    config: dict[str, Any] = {}
    if cached_content is not None:
        config["cached_content"] = cached_content
    else:
        if instructions:
            config["system_instruction"] = instructions
        compiled_tools = compile_tools(tools, url_context=url_context)
        if compiled_tools:
            config["tools"] = compiled_tools
        if tool_choice is not None:
            config["tool_config"] = compile_tool_choice(tool_choice, tools)
    if output_schema is not None:
        config["response_mime_type"] = "application/json"
        config["response_json_schema"] = gemini_schema(output_schema)
    if temperature is not None:
        config["temperature"] = temperature
    if top_p is not None:
        config["top_p"] = top_p
    if max_tokens is not None:
        config["max_output_tokens"] = max_tokens
    if seed is not None:
        config["seed"] = seed
    thinking = thinking_config(model, reasoning_effort, reasoning_budget_tokens)
    if thinking is not None:
        config["thinking_config"] = thinking
    # Tools are declarations only: never let the SDK call Python functions on its own.
    if tools:
        config["automatic_function_calling"] = {"disable": True}
    for key, value in (provider_options or {}).items():
        if key in config:
            if isinstance(config[key], dict) and isinstance(value, Mapping):
                clash = sorted(set(config[key]) & set(value))
                if clash:
                    raise ConfigurationError(
                        f"provider_options['gemini'][{key!r}] collides with "
                        + ", ".join(map(repr, clash)),
                        hint="Set these through the pollux parameters, not provider_options.",
                    )
                config[key] = {**config[key], **copy.deepcopy(dict(value))}
                continue
            raise ConfigurationError(
                f"provider_options['gemini'] collides with {key!r}",
                hint="Set it through the pollux parameter, not provider_options.",
            )
        config[key] = copy.deepcopy(value)
    return config
