"""The OpenAI Responses API: request validation, output items, usage, stored responses, events."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pollux.testing._emulator._core import ApiError, Call, Core
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

from ._common import bad_request, require_model


@dataclass(slots=True)
class StoredResponse:
    """A response kept for ``previous_response_id`` and retrieval."""

    body: dict[str, Any]
    context: list[str]
    open_calls: list[str]


@dataclass(slots=True)
class FileRecord:
    """An uploaded (or generated) file."""

    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int
    expires_at: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


@dataclass(slots=True)
class OpenAIState:
    """Objects the OpenAI wire stores: responses, files and batches."""

    core: Core
    responses: dict[str, StoredResponse] = field(default_factory=dict)
    files: dict[str, FileRecord] = field(default_factory=dict)
    batches: dict[str, Any] = field(default_factory=dict)

    def live_file(self, file_id: str) -> FileRecord | None:
        """The file, unless it was deleted or has expired on the virtual clock."""
        record = self.files.get(file_id)
        if record is None:
            return None
        if record.expires_at is not None and self.core.clock.now() >= record.expires_at:
            del self.files[file_id]
            return None
        return record


MAX_STORED = 50_000
_ITEM_TYPES = (
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "item_reference",
)
_PART_TYPES = ("input_text", "output_text", "input_image", "input_file", "input_audio", "refusal")


def _file_param(state: OpenAIState, file_id: Any, where: str) -> str:
    if not isinstance(file_id, str) or state.live_file(file_id) is None:
        raise bad_request(
            f"The file '{file_id}' does not exist or has expired.", where, "file_not_found"
        )
    return file_id


def _content(state: OpenAIState, request: ModelRequest, content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"Invalid type for '{where}': expected a string or an array.", where)
    texts: list[str] = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        here = f"{where}[{index}]"
        if kind in ("input_text", "output_text"):
            texts.append(str(part.get("text", "")))
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        elif kind == "input_image":
            ident = part.get("image_url") or (
                _file_param(state, part.get("file_id"), f"{here}.file_id")
                if part.get("file_id")
                else None
            )
            if not ident:
                raise bad_request(
                    f"Missing required parameter: '{here}.image_url'.",
                    f"{here}.image_url",
                    "missing_required_parameter",
                )
            request.add_attachment("image", str(ident))
        elif kind == "input_file":
            if part.get("file_id"):
                ident = _file_param(state, part.get("file_id"), f"{here}.file_id")
            else:
                ident = part.get("file_url") or part.get("file_data") or ""
            if not ident:
                raise bad_request(
                    f"Missing required parameter: '{here}.file_id'.",
                    f"{here}.file_id",
                    "missing_required_parameter",
                )
            request.add_attachment("file", str(ident))
        elif kind == "input_audio":
            audio = part.get("input_audio")
            data = audio.get("data") if isinstance(audio, Mapping) else None
            request.add_attachment("audio", str(data or ""))
        else:
            supported = ", ".join(f"'{t}'" for t in _PART_TYPES)
            raise bad_request(
                f"Invalid value: '{kind}'. Supported values are: {supported}.",
                f"{here}.type",
                "invalid_value",
            )
    return "\n".join(t for t in texts if t)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            str(p.get("text", "")) for p in output if isinstance(p, Mapping) and "text" in p
        )
    return json.dumps(output)


def compile_request(core: Core, state: OpenAIState, body: Mapping[str, Any]) -> ModelRequest:
    """Translate a Responses body into a :class:`ModelRequest` (validating like the API)."""
    model = require_model(core, body, status=400)
    request = ModelRequest(model=model)
    known_calls: set[str] = set()
    previous_id = body.get("previous_response_id")
    expected_outputs: list[str] = []
    if previous_id is not None:
        previous = state.responses.get(str(previous_id))
        if previous is None:
            raise bad_request(
                f"Previous response with id '{previous_id}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        request.prompt.extend(previous.context)
        known_calls.update(previous.open_calls)
        expected_outputs = list(previous.open_calls)
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        request.add_text(instructions)
    _compile_tools(request, body)
    raw_input = body.get("input")
    items: list[Any]
    if raw_input is None:
        items = []
    elif isinstance(raw_input, str):
        items = [{"role": "user", "content": raw_input}]
    elif isinstance(raw_input, list):
        items = raw_input
    else:
        raise bad_request("Invalid type for 'input': expected a string or an array.", "input")
    answered: set[str] = set()
    open_calls: list[str] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, Mapping):
            raise bad_request(f"Invalid type for '{where}': expected an object.", where)
        kind = item.get("type", "message")
        if kind not in _ITEM_TYPES:
            supported = ", ".join(f"'{t}'" for t in _ITEM_TYPES)
            raise bad_request(
                f"Invalid value: '{kind}'. Supported values are: {supported}.",
                f"{where}.type",
                "invalid_value",
            )
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(
                    f"Invalid value: '{role}'. Supported values are: 'user', 'assistant', "
                    "'system', and 'developer'.",
                    f"{where}.role",
                    "invalid_value",
                )
            text = _content(state, request, item.get("content"), f"{where}.content")
            request.add_text(text)
            if role == "user":
                request.last_user_text = text
                request.tool_results = []
        elif kind == "function_call":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not item.get("name"):
                raise bad_request(
                    f"Missing required parameter: '{where}.call_id'.",
                    f"{where}.call_id",
                    "missing_required_parameter",
                )
            known_calls.add(call_id)
            open_calls.append(call_id)
            request.add_text(f"{item.get('name')} {item.get('arguments', '')}")
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in known_calls:
                raise bad_request(
                    f"No tool call found for function call output with call_id {call_id}.",
                    "input",
                )
            answered.add(str(call_id))
            output = _output_text(item.get("output"))
            request.add_text(output)
            request.tool_results.append(output)
    missing = [c for c in expected_outputs + open_calls if c not in answered]
    if missing:
        raise bad_request(f"No tool output found for function call {missing[0]}.", "input")
    _compile_text_format(request, body)
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 16:
            raise bad_request(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
                f"16, but got {limit} instead.",
                "max_output_tokens",
                "integer_below_min_value",
            )
        request.max_output_tokens = limit
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping):
        effort = reasoning.get("effort")
        request.reasoning_effort = effort if isinstance(effort, str) else "medium"
    return request


def _compile_tools(request: ModelRequest, body: Mapping[str, Any]) -> None:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise bad_request("Invalid type for 'tools': expected an array.", "tools")
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            continue  # hosted tools are accepted and never called by the default model
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(
                f"Missing required parameter: 'tools[{index}].name'.",
                f"tools[{index}].name",
                "missing_required_parameter",
            )
        parameters = tool.get("parameters") or {}
        if tool.get("strict") is True:
            problem = strict_schema_problem(parameters)
            if problem:
                raise bad_request(
                    f"Invalid schema for function '{name}': {problem}",
                    f"tools[{index}].parameters",
                    "invalid_function_parameters",
                )
        request.tools.append(FunctionSpec(name, parameters))
        request.add_text(json.dumps(tool, sort_keys=True))
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        request.tool_choice = choice
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        request.tool_choice = f"function:{choice.get('name')}"


def _compile_text_format(request: ModelRequest, body: Mapping[str, Any]) -> None:
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if not isinstance(fmt, Mapping):
        return
    kind = fmt.get("type")
    if kind == "json_object":
        request.json_mode = True
    elif kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, Mapping):
            raise bad_request(
                "Missing required parameter: 'text.format.schema'.",
                "text.format.schema",
                "missing_required_parameter",
            )
        if not fmt.get("name"):
            raise bad_request(
                "Missing required parameter: 'text.format.name'.",
                "text.format.name",
                "missing_required_parameter",
            )
        if fmt.get("strict"):
            problem = strict_schema_problem(schema)
            if problem:
                raise bad_request(
                    f"Invalid schema for response_format '{fmt.get('name')}': {problem}",
                    "text.format.schema",
                    "invalid_json_schema",
                )
        request.schema = schema
    elif kind not in (None, "text"):
        raise bad_request(
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and "
            "'json_schema'.",
            "text.format.type",
            "invalid_value",
        )


def usage_body(out: ModelOutput) -> dict[str, Any]:
    """Responses usage with cached and reasoning token details."""
    return {
        "input_tokens": out.input_tokens,
        "input_tokens_details": {"cached_tokens": out.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": out.output_tokens,
        "output_tokens_details": {"reasoning_tokens": out.reasoning_tokens},
        "total_tokens": out.input_tokens + out.output_tokens,
    }


@dataclass(slots=True)
class _Built:
    body: dict[str, Any]
    out: ModelOutput
    request: ModelRequest
    items: list[dict[str, Any]]


RESPONSES_PARAMS = frozenset(
    [
        "access_programs",
        "background",
        "background_options",
        "context_management",
        "conversation",
        "image",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    ]
)


def _build(core: Core, state: OpenAIState, body: Mapping[str, Any], reply: Reply | None) -> _Built:
    for key in body:
        if key not in RESPONSES_PARAMS:
            raise bad_request(f"Unknown parameter: '{key}'.", key, "unknown_parameter")
    request = compile_request(core, state, body)
    out = generate(request, reply, core.cache, lambda: core.new_id("call_"))
    response_id = core.new_id("resp_")
    reasoning_cfg = body.get("reasoning") if isinstance(body.get("reasoning"), Mapping) else None
    items: list[dict[str, Any]] = []
    if out.reasoning is not None:
        wants_summary = bool(reasoning_cfg and reasoning_cfg.get("summary")) or (
            reply is not None and reply.reasoning is not None
        )
        item: dict[str, Any] = {
            "id": core.new_id("rs_"),
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": out.reasoning}] if wants_summary else [],
        }
        include = body.get("include") or ()
        if "reasoning.encrypted_content" in include:
            item["encrypted_content"] = base64.b64encode(out.reasoning.encode()).decode()
        items.append(item)
    status = "incomplete" if out.truncated else "completed"
    if out.text or not out.tool_calls:
        items.append(
            {
                "id": core.new_id("msg_"),
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": out.text, "annotations": [], "logprobs": []}
                ],
            }
        )
    for tc in out.tool_calls:
        items.append(
            {
                "id": core.new_id("fc_"),
                "type": "function_call",
                "status": "completed",
                "call_id": tc.call_id,
                "name": tc.name,
                "arguments": tc.arguments_json(),
            }
        )
    now = int(core.clock.now())
    text_cfg = body.get("text") if isinstance(body.get("text"), Mapping) else {}
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": now,
        "status": status,
        "background": False,
        "completed_at": now if status == "completed" else None,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if out.truncated else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        # What the model behind a name reports (an Azure deployment's model, a snapshot).
        "model": core.settings.served.get(request.model, request.model),
        "output": items,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {
            "effort": (reasoning_cfg or {}).get("effort"),
            "summary": (reasoning_cfg or {}).get("summary"),
        },
        "store": body.get("store", True) is not False,
        "temperature": body.get("temperature", 1.0),
        "text": {"format": (text_cfg or {}).get("format") or {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [_echo_tool(t) for t in body.get("tools") or () if isinstance(t, Mapping)],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage_body(out),
        "user": None,
    }
    if response["store"]:
        context = list(request.prompt)
        if out.text:
            context.append(out.text)
        context.extend(f"{tc.name} {tc.arguments_json()}" for tc in out.tool_calls)
        state.responses[response_id] = StoredResponse(
            response, context, [str(tc.call_id) for tc in out.tool_calls]
        )
        if len(state.responses) > MAX_STORED:
            # Bounded for long benchmark runs: forget the oldest response.
            del state.responses[next(iter(state.responses))]
    return _Built(response, out, request, items)


def _echo_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        return dict(tool)
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


def response_body(
    core: Core, state: OpenAIState, body: Mapping[str, Any], reply: Reply | None
) -> dict[str, Any]:
    """The non-streamed answer to a Responses body (also used for batch lines)."""
    return _build(core, state, body, reply).body


def create(call: Call) -> Outcome:
    """``POST /responses``, plain or streamed."""
    body = call.body()
    built = _build(call.core, call.state, body, call.reply)
    if not body.get("stream"):
        return json_response(built.body)
    return _stream(built)


def _stream(built: _Built) -> StreamResponse:
    final = built.body
    events: list[bytes] = []

    def emit(kind: str, payload: dict[str, Any]) -> None:
        events.append(sse_event({"type": kind, "sequence_number": len(events), **payload}, kind))

    shell = {
        **final,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "completed_at": None,
        "incomplete_details": None,
    }
    emit("response.created", {"response": shell})
    emit("response.in_progress", {"response": shell})
    for index, item in enumerate(built.items):
        kind = item["type"]
        if kind == "reasoning":
            emit(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "summary": []}},
            )
            for s_index, part in enumerate(item["summary"]):
                ids = {"item_id": item["id"], "output_index": index, "summary_index": s_index}
                emit(
                    "response.reasoning_summary_part.added",
                    {**ids, "part": {"type": "summary_text", "text": ""}},
                )
                for piece in chunk_text(part["text"]):
                    emit("response.reasoning_summary_text.delta", {**ids, "delta": piece})
                emit("response.reasoning_summary_text.done", {**ids, "text": part["text"]})
                emit("response.reasoning_summary_part.done", {**ids, "part": part})
        elif kind == "message":
            emit(
                "response.output_item.added",
                {
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                },
            )
            for c_index, part in enumerate(item["content"]):
                ids = {"item_id": item["id"], "output_index": index, "content_index": c_index}
                emit(
                    "response.content_part.added",
                    {
                        **ids,
                        "part": {"type": "output_text", "text": "", "annotations": []},
                    },
                )
                for piece in chunk_text(part["text"]):
                    emit("response.output_text.delta", {**ids, "delta": piece, "logprobs": []})
                emit("response.output_text.done", {**ids, "text": part["text"], "logprobs": []})
                emit("response.content_part.done", {**ids, "part": part})
        elif kind == "function_call":
            emit(
                "response.output_item.added",
                {
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "arguments": ""},
                },
            )
            ids = {"item_id": item["id"], "output_index": index}
            for piece in chunk_text(item["arguments"], 16):
                emit("response.function_call_arguments.delta", {**ids, "delta": piece})
            emit(
                "response.function_call_arguments.done",
                {**ids, "name": item["name"], "arguments": item["arguments"]},
            )
        emit("response.output_item.done", {"output_index": index, "item": item})
    closing = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    emit(closing, {"response": final})

    def error_event(message: str, code: str, sequence: int) -> bytes:
        failed = {**shell, "status": "failed", "error": {"code": code, "message": message}}
        return sse_event(
            {
                "type": "error",
                "code": code,
                "message": message,
                "param": None,
                "sequence_number": sequence,
            },
            "error",
        ) + sse_event(
            {"type": "response.failed", "sequence_number": sequence + 1, "response": failed},
            "response.failed",
        )

    return StreamResponse(events, error_event=error_event)


def retrieve(call: Call) -> Outcome:
    """``GET /responses/{response_id}``."""
    stored = call.state.responses.get(call.params["response_id"])
    if stored is None:
        raise _not_found(call.params["response_id"])
    return json_response(stored.body)


def delete(call: Call) -> Outcome:
    """``DELETE /responses/{response_id}``."""
    response_id = call.params["response_id"]
    if call.state.responses.pop(response_id, None) is None:
        raise _not_found(response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


def _not_found(response_id: str) -> ApiError:
    return ApiError(
        404,
        f"Response with id '{response_id}' not found.",
        error_type="invalid_request_error",
        param="response_id",
    )
