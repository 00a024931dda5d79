"""Chat Completions: the OpenAI-compatible surface of local servers and OpenRouter.

Mounted as ``"local"`` (base URL ``.../local/v1``, health at ``.../local/health``) and
``"openrouter"`` (base URL ``.../openrouter/api/v1``, reasoning in the ``reasoning`` field).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pollux.testing._emulator._core import ApiError, Call, Core, Route, WireSpec
from pollux.testing._emulator._http import Outcome, StreamResponse, json_response, sse_event
from pollux.testing._emulator._model import (
    FunctionSpec,
    ModelOutput,
    ModelRequest,
    chunk_text,
    generate,
)
from pollux.testing._emulator._schema import strict_schema_problem
from pollux.testing._emulator._script import Reply

from ._common import bad_request, bearer_key, model_catalog, openai_error_body, require_model

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_PART_TYPES = ("text", "image_url", "input_audio", "file", "refusal")


def _text_of(content: Any, request: ModelRequest | None, where: str) -> str:
    """Collect the text of a message's content, registering attachments on ``request``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"Invalid type for '{where}': expected a string or an array.", where)
    texts: list[str] = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" or kind == "refusal":
            texts.append(str(part.get(kind, "")))
        elif kind == "image_url" and request is not None:
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if not isinstance(url, str) or not url:
                raise bad_request(
                    f"Missing required parameter: '{where}[{index}].image_url.url'.",
                    f"{where}[{index}].image_url.url",
                    "missing_required_parameter",
                )
            request.add_attachment("image", url)
        elif kind == "input_audio" and request is not None:
            audio = part.get("input_audio")
            if not isinstance(audio, Mapping) or not audio.get("data"):
                raise bad_request(
                    f"Missing required parameter: '{where}[{index}].input_audio.data'.",
                    f"{where}[{index}].input_audio.data",
                    "missing_required_parameter",
                )
            request.add_attachment("audio", str(audio.get("data")))
        elif kind == "file" and request is not None:
            file = part.get("file")
            ident = ""
            if isinstance(file, Mapping):
                ident = str(file.get("file_data") or file.get("file_id") or "")
            if not ident:
                raise bad_request(
                    f"Missing required parameter: '{where}[{index}].file.file_data'.",
                    f"{where}[{index}].file.file_data",
                    "missing_required_parameter",
                )
            request.add_attachment("file", ident)
        elif kind not in _PART_TYPES:
            supported = ", ".join(f"'{t}'" for t in _PART_TYPES)
            raise bad_request(
                f"Invalid value: '{kind}'. Supported values are: {supported}.",
                f"{where}[{index}].type",
                "invalid_value",
            )
    return "\n".join(t for t in texts if t)


def compile_request(core: Core, body: Mapping[str, Any]) -> ModelRequest:
    """Translate a Chat Completions body into a :class:`ModelRequest` (validating like the API)."""
    model = require_model(core, body)
    messages = body.get("messages")
    if messages is None:
        raise bad_request(
            "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"
        )
    if not isinstance(messages, list) or not messages:
        raise bad_request("[] is too short - 'messages'", "messages", "empty_array")
    request = ModelRequest(model=model)
    _compile_tools(request, body)
    pending: dict[str, int] = {}
    pending_from = -1
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise bad_request(f"Invalid type for 'messages[{index}]'.", f"messages[{index}]")
        role = message.get("role")
        if role not in _ROLES:
            supported = ", ".join(f"'{r}'" for r in _ROLES)
            raise bad_request(
                f"Invalid value: '{role}'. Supported values are: {supported}.",
                f"messages[{index}].role",
                "invalid_value",
            )
        if pending and role != "tool":
            missing = ", ".join(pending)
            raise bad_request(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {missing}",
                f"messages.[{pending_from}].role",
            )
        where = f"messages[{index}].content"
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in pending:
                raise bad_request(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{index}].role",
                )
            del pending[call_id]
            output = _text_of(message.get("content"), None, where)
            request.add_text(output)
            request.tool_results.append(output)
            continue
        text = _text_of(message.get("content"), request, where)
        request.add_text(text)
        if role == "user":
            request.last_user_text = text
            request.tool_results = []
        elif role == "assistant":
            for position, tool_call in enumerate(message.get("tool_calls") or ()):
                function = tool_call.get("function") if isinstance(tool_call, Mapping) else None
                call_id = tool_call.get("id") if isinstance(tool_call, Mapping) else None
                if not isinstance(function, Mapping) or not isinstance(call_id, str):
                    raise bad_request(
                        f"Missing required parameter: 'messages[{index}].tool_calls[{position}]"
                        ".id'.",
                        f"messages[{index}].tool_calls[{position}].id",
                        "missing_required_parameter",
                    )
                request.add_text(f"{function.get('name', '')} {function.get('arguments', '')}")
                pending[call_id] = position
                pending_from = index
    if pending:
        raise bad_request(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. The following tool_call_ids did not have response "
            f"messages: {', '.join(pending)}",
            f"messages.[{pending_from}].role",
        )
    _compile_format(request, body)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise bad_request(
                f"Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but "
                f"got {limit} instead.",
                "max_tokens",
                "integer_below_min_value",
            )
        request.max_output_tokens = limit
    effort = body.get("reasoning_effort")
    reasoning = body.get("reasoning")
    if effort is None and isinstance(reasoning, Mapping):
        effort = reasoning.get("effort") or ("medium" if reasoning.get("enabled") else None)
    if effort is None and any(word in model.lower() for word in ("reason", "think")):
        effort = "medium"
    request.reasoning_effort = effort if isinstance(effort, str) else None
    return request


def _compile_tools(request: ModelRequest, body: Mapping[str, Any]) -> None:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise bad_request("Invalid type for 'tools': expected an array.", "tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not function.get("name"):
            raise bad_request(
                f"Missing required parameter: 'tools[{index}].function.name'.",
                f"tools[{index}].function.name",
                "missing_required_parameter",
            )
        parameters = function.get("parameters") or {}
        if function.get("strict"):
            problem = strict_schema_problem(parameters)
            if problem:
                raise bad_request(
                    f"Invalid schema for function '{function['name']}': {problem}",
                    f"tools[{index}].function.parameters",
                    "invalid_function_parameters",
                )
        request.tools.append(FunctionSpec(str(function["name"]), parameters))
        request.add_text(json.dumps(function, sort_keys=True))
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        request.tool_choice = choice
    elif isinstance(choice, Mapping):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        request.tool_choice = f"function:{name}"


def _compile_format(request: ModelRequest, body: Mapping[str, Any]) -> None:
    fmt = body.get("response_format")
    if not isinstance(fmt, Mapping):
        return
    kind = fmt.get("type")
    if kind == "json_object":
        request.json_mode = True
    elif kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), Mapping):
            raise bad_request(
                "Missing required parameter: 'response_format.json_schema.schema'.",
                "response_format.json_schema.schema",
                "missing_required_parameter",
            )
        if spec.get("strict"):
            problem = strict_schema_problem(spec["schema"])
            if problem:
                raise bad_request(
                    f"Invalid schema for response_format '{spec.get('name', '')}': {problem}",
                    "response_format",
                    "invalid_json_schema",
                )
        request.schema = spec["schema"]
    elif kind not in (None, "text"):
        raise bad_request(
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and "
            "'json_schema'.",
            "response_format.type",
            "invalid_value",
        )


def usage_body(out: ModelOutput) -> dict[str, Any]:
    """Chat Completions usage with cached and reasoning token details."""
    return {
        "prompt_tokens": out.input_tokens,
        "completion_tokens": out.output_tokens,
        "total_tokens": out.input_tokens + out.output_tokens,
        "prompt_tokens_details": {"cached_tokens": out.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": out.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _finish(out: ModelOutput) -> str:
    if out.truncated:
        return "length"
    return "tool_calls" if out.tool_calls else "stop"


OPENAI_CHAT_PARAMS = frozenset(
    [
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "messages",
        "metadata",
        "modalities",
        "model",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    ]
)


def reject_unknown(body: Mapping[str, Any], known: frozenset[str]) -> None:
    """Reject parameters the OpenAI API does not know, as it does (400 ``unknown_parameter``)."""
    for key in body:
        if key not in known:
            raise bad_request(f"Unknown parameter: '{key}'.", key, "unknown_parameter")


def completion(
    call: Call,
    *,
    reasoning_field: str = "reasoning_content",
    known_params: frozenset[str] | None = None,
) -> Outcome:
    """``POST /chat/completions``, plain or streamed.

    ``known_params`` makes unknown parameters a 400, as on OpenAI; local servers and OpenRouter
    accept (and ignore) extra parameters.
    """
    body = call.body()
    if known_params is not None:
        reject_unknown(body, known_params)
    if body.get("stream"):
        request = compile_request(call.core, body)
        out = generate(request, call.reply, call.core.cache, lambda: call.core.new_id("call_"))
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        completion_id = call.core.new_id("chatcmpl-")
        created = int(call.core.clock.now())
        return _stream(completion_id, created, request.model, out, include_usage, reasoning_field)
    return json_response(completion_body(call.core, body, call.reply, reasoning_field))


def completion_body(
    core: Core,
    body: Mapping[str, Any],
    reply: Reply | None,
    reasoning_field: str = "reasoning_content",
) -> dict[str, Any]:
    """The non-streamed Chat Completions answer to ``body`` (also used for batch lines)."""
    request = compile_request(core, body)
    out = generate(request, reply, core.cache, lambda: core.new_id("call_"))
    completion_id = core.new_id("chatcmpl-")
    created = int(core.clock.now())
    message: dict[str, Any] = {
        "role": "assistant",
        "content": out.text if (out.text or not out.tool_calls) else None,
        "refusal": None,
    }
    if out.reasoning is not None:
        message[reasoning_field] = out.reasoning
    if out.tool_calls:
        message["tool_calls"] = [
            {
                "id": tc.call_id,
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.arguments_json()},
            }
            for tc in out.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(out)}
        ],
        "usage": usage_body(out),
        "system_fingerprint": "fp_emulator",
    }


def _stream(
    completion_id: str,
    created: int,
    model: str,
    out: ModelOutput,
    include_usage: bool,
    reasoning_field: str,
) -> StreamResponse:
    base: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_emulator",
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse_event({**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events.extend(chunk({reasoning_field: piece}) for piece in chunk_text(out.reasoning or ""))
    events.extend(chunk({"content": piece}) for piece in chunk_text(out.text))
    for index, tc in enumerate(out.tool_calls):
        head = {
            "index": index,
            "id": tc.call_id,
            "type": "function",
            "function": {"name": tc.name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        events.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in chunk_text(tc.arguments_json(), 16)
        )
    events.append(chunk({}, _finish(out)))
    if include_usage:
        events.append(sse_event({**base, "choices": [], "usage": usage_body(out)}))
    events.append(b"data: [DONE]\n\n")
    return StreamResponse(events)


def list_models(call: Call, *, catalog_fields: bool = False) -> Outcome:
    """``GET /models``."""
    created = int(call.core.clock.now())
    data = []
    for model in model_catalog(call.core):
        entry: dict[str, Any] = {
            "id": model,
            "object": "model",
            "created": created,
            "owned_by": "pollux-emulator",
        }
        if catalog_fields:
            entry.update(_openrouter_fields(model))
        data.append(entry)
    return json_response({"object": "list", "data": data})


def retrieve_model(call: Call, *, catalog_fields: bool = False) -> Outcome:
    """``GET /models/{model}``."""
    model = call.params["model"]
    # As generation does: without ``Emulator(models=...)`` every model name exists (the listing
    # still shows only the default); an unknown one is the real API's 404 model_not_found.
    allowed = call.core.settings.models
    if allowed and model not in allowed:
        raise ApiError(
            404,
            f"The model '{model}' does not exist",
            error_type="invalid_request_error",
            param="model",
            code="model_not_found",
        )
    entry: dict[str, Any] = {
        "id": model,
        "object": "model",
        "created": int(call.core.clock.now()),
        "owned_by": "pollux-emulator",
    }
    if catalog_fields:
        entry.update(_openrouter_fields(model))
    return json_response(entry)


def _openrouter_fields(model: str) -> dict[str, Any]:
    return {
        "name": model,
        "context_length": 128_000,
        "architecture": {
            "input_modalities": ["text", "image", "file", "audio"],
            "output_modalities": ["text"],
        },
        "supported_parameters": [
            "max_tokens",
            "reasoning",
            "response_format",
            "structured_outputs",
            "temperature",
            "tool_choice",
            "tools",
        ],
    }


def health(call: Call) -> Outcome:
    """``GET /health``."""
    return json_response({"status": "ok"})


def _local_routes() -> tuple[Route, ...]:
    return (
        Route("POST", "/v1/chat/completions", "chat.completions", completion, generates=True),
        Route("GET", "/v1/models", "models.list", list_models),
        Route("GET", "/v1/models/{model}", "models.retrieve", retrieve_model),
        Route("GET", "/health", "health", health),
        Route("GET", "/v1/health", "health", health),
    )


def _openrouter_routes() -> tuple[Route, ...]:
    return (
        Route(
            "POST",
            "/api/v1/chat/completions",
            "chat.completions",
            lambda call: completion(call, reasoning_field="reasoning"),
            generates=True,
        ),
        Route(
            "GET",
            "/api/v1/models",
            "models.list",
            lambda call: list_models(call, catalog_fields=True),
        ),
        Route(
            "GET",
            "/api/v1/models/{model}",
            "models.retrieve",
            lambda call: retrieve_model(call, catalog_fields=True),
        ),
    )


WIRES = (
    WireSpec("local", "/local", "/local/v1", _local_routes(), openai_error_body, bearer_key),
    WireSpec(
        "openrouter",
        "/openrouter",
        "/openrouter/api/v1",
        _openrouter_routes(),
        openai_error_body,
        bearer_key,
    ),
)
