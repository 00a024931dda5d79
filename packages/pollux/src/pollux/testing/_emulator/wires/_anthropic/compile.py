"""Validate a Messages API body the way the API does and translate it for the default model.

Errors use the API's wording (``"<field path>: <problem>"``) and its 400 ``invalid_request_error``;
an unknown ``file_id`` is its 404 ``not_found_error``. What the real API enforces and this module
checks: required fields, unknown top-level fields, strict user/assistant alternation starting with
``user``, every ``tool_use`` answered by a ``tool_result`` in the next message (and no stray
``tool_result``), block types per role, thinking budgets, thinking signatures sent back verbatim,
a thinking block heading the last assistant turn of an extended-thinking tool loop, tool choice
against the tools offered, and structured-output schemas that leave an object open.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pollux.testing._emulator._core import ApiError, Core
from pollux.testing._emulator._model import (
    ATTACHMENT_TOKENS,
    FunctionSpec,
    ModelRequest,
    count_tokens,
)

from .cache import TTLS, CacheBlock
from .errors import invalid, not_found
from .signing import valid_redacted, valid_signature
from .state import AnthropicState

__all__ = ["COUNT_PARAMS", "CREATE_PARAMS", "Compiled", "compile_body"]

CREATE_PARAMS = frozenset(
    [
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_k",
        "top_p",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "output_format",
        "cache_control",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
        "inference_geo",
        "speed",
        "diagnostics",
    ]
)
COUNT_PARAMS = frozenset(
    [
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "output_format",
        "cache_control",
        "mcp_servers",
        "context_management",
        "speed",
    ]
)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_USER_BLOCKS = ("text", "image", "document", "tool_result", "search_result")
_ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")
# Server-side tool blocks are carried through as opaque content (never produced by the emulator).
_OPAQUE_BLOCKS = (
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
)
_THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


@dataclass(slots=True)
class Compiled:
    """A validated request: the model's view of it and its cache blocks."""

    request: ModelRequest
    blocks: list[CacheBlock] = field(default_factory=list)
    thinking: str | None = None
    display: str = "summarized"
    stop_sequences: list[str] = field(default_factory=list)
    disable_parallel: bool = False

    @property
    def total_tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)


INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"


def compile_body(
    core: Core,
    state: AnthropicState,
    body: Mapping[str, Any],
    *,
    counting: bool = False,
    betas: frozenset[str] = frozenset(),
) -> Compiled:
    """Validate ``body`` (a create or, with ``counting``, a count_tokens body) and translate it.

    ``betas`` are the request's ``anthropic-beta`` values: with interleaved thinking and tools,
    ``thinking.budget_tokens`` may exceed ``max_tokens`` (it spans the whole turn), as on the API.

    Raises:
        ApiError: The request is invalid, as the real API would say.
    """
    known = COUNT_PARAMS if counting else CREATE_PARAMS
    for key in body:
        if key not in known:
            raise invalid(f"{key}: Extra inputs are not permitted")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model: Field required")
    if core.settings.models and model not in core.settings.models:
        raise not_found(f"model: {model}")
    compiled = Compiled(ModelRequest(model=model))
    if not counting:
        limit = body.get("max_tokens")
        if limit is None:
            raise invalid("max_tokens: Field required")
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise invalid("max_tokens: Input should be a valid integer")
        if limit < 1:
            raise invalid("max_tokens: Input should be greater than or equal to 1")
        compiled.request.max_output_tokens = limit
        compiled.stop_sequences = _stop_sequences(body.get("stop_sequences"))
        _sampling(body)
    _tools(compiled, body.get("tools"))
    _tool_choice(compiled, body.get("tool_choice"))
    _system(compiled, body.get("system"))
    interleaved = INTERLEAVED_BETA in betas and bool(compiled.request.tools)
    max_tokens = None if counting or interleaved else body.get("max_tokens")
    _thinking(compiled, body.get("thinking"), max_tokens)
    _output(compiled, body)
    _messages(state, compiled, body.get("messages"))
    top = body.get("cache_control")
    if top is not None:
        # Top-level cache_control marks the last cacheable block.
        ttl = _cache_ttl(top, "cache_control")
        for block in reversed(compiled.blocks):
            if block.tokens > 0:
                block.ttl = block.ttl or ttl
                break
    return compiled


def _sampling(body: Mapping[str, Any]) -> None:
    for key, high in (("temperature", 1.0), ("top_p", 1.0)):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise invalid(f"{key}: Input should be a valid number")
        if not 0 <= value <= high:
            raise invalid(f"{key}: Input should be between 0 and {high:g}")
    top_k = body.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0):
        raise invalid("top_k: Input should be an integer greater than or equal to 0")
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive"):
        # Extended thinking fixes the sampling, as the API says.
        if body.get("temperature") not in (None, 1, 1.0):
            raise invalid(
                "`temperature` may only be set to 1 when thinking is enabled. Please consult our "
                f"documentation at {_THINKING_DOCS}#feature-compatibility"
            )
        if body.get("top_k") is not None:
            raise invalid(
                "`top_k` may not be set when thinking is enabled. Please consult our "
                f"documentation at {_THINKING_DOCS}#feature-compatibility"
            )
        top_p = body.get("top_p")
        if top_p is not None and not 0.95 <= top_p <= 1:
            raise invalid(
                "`top_p` must be between 0.95 and 1 when thinking is enabled. Please consult our "
                f"documentation at {_THINKING_DOCS}#feature-compatibility"
            )


def _stop_sequences(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise invalid("stop_sequences: Input should be a valid list of strings")
    for index, item in enumerate(value):
        if not item.strip():
            raise invalid(f"stop_sequences.{index}: each stop sequence must contain non-whitespace")
    return list(value)


def _cache_ttl(value: Any, where: str) -> str:
    if not isinstance(value, Mapping) or value.get("type") != "ephemeral":
        raise invalid(f"{where}.type: Input should be 'ephemeral'")
    ttl = value.get("ttl", "5m")
    if ttl not in TTLS:
        raise invalid(f"{where}.ttl: Input should be '5m' or '1h'")
    return str(ttl)


def _add_block(
    compiled: Compiled, identity: Any, tokens: int, cache: Any, where: str
) -> CacheBlock:
    block = CacheBlock(identity, tokens, where=where)
    if cache is not None:
        block.ttl = _cache_ttl(cache, f"{where}.cache_control")
    compiled.blocks.append(block)
    return block


def _identity(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _tools(compiled: Compiled, tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, Mapping):
            raise invalid(f"{where}: Input should be a valid dictionary")
        kind = tool.get("type")
        name = tool.get("name")
        if kind in (None, "custom"):
            if not isinstance(name, str) or not _TOOL_NAME.match(name):
                raise invalid(
                    f"{where}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                )
            schema = tool.get("input_schema")
            if not isinstance(schema, Mapping):
                raise invalid(f"{where}.custom.input_schema: Field required")
            if schema.get("type") != "object":
                raise invalid(f"{where}.custom.input_schema.type: Input should be 'object'")
            if tool.get("strict") is True:
                problem = open_object(schema)
                if problem:
                    raise invalid(f"{where}.custom.input_schema: {problem}")
            compiled.request.tools.append(FunctionSpec(name, schema))
        elif not isinstance(name, str) or not name:
            raise invalid(f"{where}.name: Field required")
        if name in names:
            raise invalid("tools: Tool names must be unique.")
        names.add(str(name))
        text = json.dumps(_identity(tool), sort_keys=True)
        compiled.request.add_text(text)
        _add_block(
            compiled,
            ("tool", _identity(tool)),
            count_tokens(text),
            tool.get("cache_control"),
            where,
        )


def _tool_choice(compiled: Compiled, choice: Any) -> None:
    if choice is None:
        return
    if not isinstance(choice, Mapping):
        raise invalid("tool_choice: Input should be a valid dictionary")
    kind = choice.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        raise invalid(
            f"tool_choice: Input tag '{kind}' found using 'type' does not match any of the "
            "expected tags: 'auto', 'any', 'tool', 'none'"
        )
    compiled.disable_parallel = bool(choice.get("disable_parallel_tool_use"))
    if kind in ("any", "tool") and not compiled.request.tools:
        raise invalid("tool_choice: tool_choice may only be specified while providing tools.")
    if kind == "any":
        compiled.request.tool_choice = "required"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise invalid("tool_choice.tool.name: Field required")
        if all(t.name != name for t in compiled.request.tools):
            raise invalid(f"tool_choice.tool.name: Tool '{name}' not found in the tools provided")
        compiled.request.tool_choice = f"function:{name}"
    elif kind == "none":
        compiled.request.tool_choice = "none"


def _system(compiled: Compiled, system: Any) -> None:
    if system is None:
        return
    if isinstance(system, str):
        if system:
            compiled.request.add_text(system)
            _add_block(compiled, ("system", system), count_tokens(system), None, "system")
        return
    if not isinstance(system, list):
        raise invalid("system: Input should be a valid string or list of text blocks")
    for index, block in enumerate(system):
        where = f"system.{index}"
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise invalid(f"{where}.type: Input should be 'text'")
        text = block.get("text")
        if not isinstance(text, str):
            raise invalid(f"{where}.text: Field required")
        if not text:
            raise invalid(f"{where}.text: text content blocks must be non-empty")
        compiled.request.add_text(text)
        _add_block(
            compiled,
            ("system", _identity(block)),
            count_tokens(text),
            block.get("cache_control"),
            where,
        )


def _thinking(compiled: Compiled, thinking: Any, max_tokens: Any) -> None:
    if thinking is None:
        return
    if not isinstance(thinking, Mapping):
        raise invalid("thinking: Input should be a valid dictionary")
    kind = thinking.get("type")
    if kind in ("disabled", "between_tools"):
        return
    if kind not in ("enabled", "adaptive"):
        raise invalid(
            f"thinking: Input tag '{kind}' found using 'type' does not match any of the expected "
            "tags: 'adaptive', 'disabled', 'enabled'"
        )
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise invalid("thinking.enabled.budget_tokens: Field required")
        if budget < 1024:
            raise invalid(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            )
        if isinstance(max_tokens, int) and max_tokens <= budget:
            raise invalid(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                f"documentation at {_THINKING_DOCS}#max-tokens-and-context-window-size"
            )
    display = thinking.get("display")
    if display not in (None, "summarized", "omitted"):
        raise invalid(f"thinking.{kind}.display: Input should be 'summarized' or 'omitted'")
    if compiled.request.tool_choice == "required" or compiled.request.tool_choice.startswith(
        "function:"
    ):
        raise invalid("Thinking may not be enabled when tool_choice forces tool use.")
    compiled.thinking = str(kind)
    compiled.display = str(display or "summarized")
    compiled.request.reasoning_effort = compiled.request.reasoning_effort or "medium"


def _output(compiled: Compiled, body: Mapping[str, Any]) -> None:
    config = body.get("output_config")
    fmt: Any = None
    where = "output_config.format"
    if config is not None:
        if not isinstance(config, Mapping):
            raise invalid("output_config: Input should be a valid dictionary")
        effort = config.get("effort")
        if effort is not None:
            if effort not in _EFFORTS:
                raise invalid(
                    "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or "
                    "'max'"
                )
            if compiled.thinking is not None:
                compiled.request.reasoning_effort = "xhigh" if effort == "max" else str(effort)
        fmt = config.get("format")
    if body.get("output_format") is not None:
        if fmt is not None:
            raise invalid(
                "output_format: use output_config.format or the deprecated output_format, not both"
            )
        fmt, where = body.get("output_format"), "output_format"
    if fmt is None:
        return
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        raise invalid(f"{where}.type: Input should be 'json_schema'")
    schema = fmt.get("schema")
    if not isinstance(schema, Mapping):
        raise invalid(f"{where}.schema: Field required")
    problem = open_object(schema)
    if problem:
        raise invalid(f"{where}.schema: {problem}")
    compiled.request.schema = schema


def open_object(schema: Any) -> str | None:
    """Why ``schema`` cannot be used for constrained output (an open object), or ``None``."""
    if isinstance(schema, list):
        for item in schema:
            problem = open_object(item)
            if problem:
                return problem
        return None
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    is_object = kind == "object" or (isinstance(kind, list) and "object" in kind)
    if (is_object or "properties" in schema) and schema.get("additionalProperties") is not False:
        return "For 'object' type, 'additionalProperties' must be explicitly set to false"
    for key in ("properties", "$defs", "definitions"):
        for sub in (schema.get(key) or {}).values():
            problem = open_object(sub)
            if problem:
                return problem
    for key in ("items", "anyOf", "allOf", "oneOf", "prefixItems"):
        if key in schema:
            problem = open_object(schema[key])
            if problem:
                return problem
    return None


# --- messages -------------------------------------------------------------------------------------


def _messages(state: AnthropicState, compiled: Compiled, messages: Any) -> None:
    if messages is None:
        raise invalid("messages: Field required")
    if not isinstance(messages, list):
        raise invalid("messages: Input should be a valid list")
    if not messages:
        raise invalid("messages: at least one message is required")
    previous_role: str | None = None
    open_calls: list[str] = []
    last_assistant: tuple[int, list[Any]] | None = None
    ends_with_results = False
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, Mapping):
            raise invalid(f"{where}: Input should be a valid dictionary")
        role = message.get("role")
        if role not in ("user", "assistant"):
            if role == "system":
                raise invalid(
                    f'{where}.role: Unexpected role "system". The Messages API accepts a '
                    'top-level `system` parameter, not "system" as an input message role.'
                )
            raise invalid(f"{where}.role: Input should be 'user' or 'assistant'")
        if previous_role is None and role != "user":
            raise invalid('messages: first message must use the "user" role')
        if role == previous_role:
            raise invalid(
                'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{role}" roles in a row'
            )
        previous_role = str(role)
        blocks = _content_list(message.get("content"), where)
        if not blocks and not (role == "assistant" and index == len(messages) - 1):
            raise invalid(
                f"{where}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        if role == "assistant":
            open_calls = _assistant(compiled, blocks, where)
            last_assistant = (index, blocks)
            ends_with_results = False
        else:
            answered = _user(state, compiled, blocks, where, open_calls)
            missing = [c for c in open_calls if c not in answered]
            if missing:
                raise invalid(
                    f"{where}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
            open_calls = []
            ends_with_results = bool(answered)
    if compiled.thinking is not None and ends_with_results and last_assistant is not None:
        index, blocks = last_assistant
        first = blocks[0].get("type") if blocks and isinstance(blocks[0], Mapping) else "text"
        if first not in ("thinking", "redacted_thinking"):
            raise invalid(
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{first}`. When `thinking` is enabled, a final `assistant` message must "
                "start with a thinking block (preceeding the lastmost set of `tool_use` and "
                "`tool_result` blocks). We recommend you include thinking blocks from previous "
                "turns. To avoid this requirement, disable `thinking`. Please consult our "
                f"documentation at {_THINKING_DOCS}"
            )


def _content_list(content: Any, where: str) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise invalid(f"{where}.content: Input should be a valid string or list of content blocks")
    return content


def _block_type(block: Any, where: str, allowed: tuple[str, ...], role: str) -> str:
    if not isinstance(block, Mapping):
        raise invalid(f"{where}: Input should be a valid dictionary")
    kind = block.get("type")
    if kind in allowed or kind in _OPAQUE_BLOCKS:
        return str(kind)
    if kind in _USER_BLOCKS or kind in _ASSISTANT_BLOCKS:
        raise invalid(f"{where}: `{kind}` blocks are not allowed in `{role}` messages")
    expected = ", ".join(f"'{t}'" for t in (*allowed, *_OPAQUE_BLOCKS))
    raise invalid(
        f"{where}.type: Input tag '{kind}' found using 'type' does not match any of the expected "
        f"tags: {expected}"
    )


def _text_block(compiled: Compiled, block: Mapping[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid(f"{where}.text: Field required")
    if not text:
        raise invalid(f"{where}.text: text content blocks must be non-empty")
    compiled.request.add_text(text)
    _add_block(compiled, _identity(block), count_tokens(text), block.get("cache_control"), where)
    return text


def _assistant(compiled: Compiled, blocks: list[Any], where: str) -> list[str]:
    calls: list[str] = []
    for index, block in enumerate(blocks):
        here = f"{where}.content.{index}"
        kind = _block_type(block, here, _ASSISTANT_BLOCKS, "assistant")
        if kind == "text":
            _text_block(compiled, block, here)
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not call_id:
                raise invalid(f"{here}.id: Field required")
            if not isinstance(name, str) or not name:
                raise invalid(f"{here}.name: Field required")
            if not isinstance(block.get("input"), Mapping):
                raise invalid(f"{here}.input: Input should be a valid dictionary")
            calls.append(call_id)
            text = f"{name} {json.dumps(block.get('input'), sort_keys=True)}"
            compiled.request.add_text(text)
            _add_block(
                compiled, _identity(block), count_tokens(text), block.get("cache_control"), here
            )
        elif kind == "thinking":
            if "signature" not in block:
                raise invalid(f"{here}.thinking.signature: Field required")
            if not valid_signature(str(block.get("thinking", "")), block.get("signature")):
                raise invalid(f"{here}: Invalid `signature` in `thinking` block")
            if block.get("cache_control") is not None:
                raise invalid(f"{here}.thinking.cache_control: Extra inputs are not permitted")
            _add_block(compiled, _identity(block), 0, None, here)
        elif kind == "redacted_thinking":
            if not valid_redacted(block.get("data")):
                raise invalid(f"{here}: Invalid `data` in `redacted_thinking` block")
            _add_block(compiled, _identity(block), 0, None, here)
        else:
            _opaque(compiled, block, here)
    return calls


def _opaque(compiled: Compiled, block: Mapping[str, Any], where: str) -> None:
    text = json.dumps(_identity(block), sort_keys=True)
    compiled.request.add_text(text)
    _add_block(compiled, _identity(block), count_tokens(text), block.get("cache_control"), where)


def _user(
    state: AnthropicState,
    compiled: Compiled,
    blocks: list[Any],
    where: str,
    open_calls: list[str],
) -> set[str]:
    request = compiled.request
    texts: list[str] = []
    results: list[str] = []
    answered: set[str] = set()
    for index, block in enumerate(blocks):
        here = f"{where}.content.{index}"
        kind = _block_type(block, here, _USER_BLOCKS, "user")
        if kind == "text":
            texts.append(_text_block(compiled, block, here))
        elif kind in ("image", "document"):
            _media(state, compiled, block, here, kind)
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if call_id not in open_calls:
                raise invalid(
                    f"{here}: unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. "
                    "Each `tool_result` block must have a corresponding `tool_use` block in the "
                    "previous message."
                )
            answered.add(str(call_id))
            is_error = block.get("is_error")
            if is_error is not None and not isinstance(is_error, bool):
                raise invalid(f"{here}.is_error: Input should be a valid boolean")
            output = _result_text(state, compiled, block.get("content"), here)
            request.add_text(output)
            # The default model's answer shows the error flag, so a test sees it arrived.
            results.append(f"[error] {output}" if is_error else output)
            _add_block(
                compiled, _identity(block), count_tokens(output), block.get("cache_control"), here
            )
        else:
            _opaque(compiled, block, here)
    if texts:
        request.last_user_text = "\n".join(texts)
    request.tool_results = results
    return answered


def _result_text(state: AnthropicState, compiled: Compiled, content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where}.content: Input should be a valid string or list of content blocks")
    texts: list[str] = []
    for index, block in enumerate(content):
        here = f"{where}.content.{index}"
        if not isinstance(block, Mapping):
            raise invalid(f"{here}: Input should be a valid dictionary")
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind in ("image", "document"):
            _media(state, compiled, block, here, str(kind))
        elif kind != "search_result":
            raise invalid(
                f"{here}.type: Input tag '{kind}' found using 'type' does not match any of the "
                "expected tags: 'text', 'image', 'document', 'search_result'"
            )
    return "\n".join(texts)


def _media(
    state: AnthropicState, compiled: Compiled, block: Mapping[str, Any], where: str, kind: str
) -> None:
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise invalid(f"{where}.source: Field required")
    source_type = source.get("type")
    here = f"{where}.source"
    identity: str
    text: str | None = None
    if source_type == "base64":
        media_type = source.get("media_type")
        allowed = _IMAGE_TYPES if kind == "image" else ("application/pdf",)
        if media_type not in allowed:
            raise invalid(
                f"{here}.base64.media_type: Input should be "
                + " or ".join(f"'{t}'" for t in allowed)
            )
        data = source.get("data")
        if not isinstance(data, str) or not data:
            raise invalid(f"{here}.base64.data: Field required")
        identity = data
    elif source_type == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise invalid(f"{here}.url.url: Input should be a valid URL")
        identity = url
    elif source_type == "file":
        file_id = source.get("file_id")
        record = state.live_file(file_id) if isinstance(file_id, str) else None
        if record is None:
            raise ApiError(404, f"File not found: {file_id}", error_type="not_found_error")
        mime = record.mime_type
        if kind == "image" and not mime.startswith("image/"):
            raise invalid(f"{here}: The file {file_id} is {mime}, not an image")
        if kind == "document" and mime not in ("application/pdf", "text/plain"):
            raise invalid(
                f"{here}: The file {file_id} is {mime}; documents must be application/pdf or "
                "text/plain"
            )
        identity = record.id
        if mime == "text/plain":
            text = record.data.decode("utf-8", "replace")
    elif kind == "document" and source_type == "text":
        data = source.get("data")
        if not isinstance(data, str):
            raise invalid(f"{here}.text.data: Field required")
        identity, text = data, data
    elif kind == "document" and source_type == "content":
        inner = source.get("content")
        text = inner if isinstance(inner, str) else json.dumps(inner, sort_keys=True)
        identity = text
    else:
        expected = "'base64', 'url', 'file'" + (", 'text', 'content'" if kind == "document" else "")
        raise invalid(
            f"{here}: Input tag '{source_type}' found using 'type' does not match any of the "
            f"expected tags: {expected}"
        )
    if text is not None:
        compiled.request.add_text(text)
        compiled.request.attachments["file"] += 1
        tokens = count_tokens(text)
    else:
        slot = "image" if kind == "image" else "file"
        compiled.request.add_attachment(slot, identity)
        tokens = ATTACHMENT_TOKENS[slot]
    _add_block(compiled, _identity(block), tokens, block.get("cache_control"), where)
