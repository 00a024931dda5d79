"""``generateContent``, ``streamGenerateContent``, ``countTokens`` and the model catalog.

The request is compiled by :mod:`._gemini_request`; here the :class:`ModelOutput` is rendered as
a ``GenerateContentResponse`` (thought parts, function calls with thought signatures, usage,
finish and block reasons), whole or as server-sent events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pollux.testing._emulator._core import Call, Core
from pollux.testing._emulator._http import Outcome, StreamResponse, json_response, sse_event
from pollux.testing._emulator._model import ModelOutput, chunk_text, generate, prompt_tokens
from pollux.testing._emulator._script import Reply, ToolCall

from ._gemini_common import GoogleError, body_of, invalid, model_name, page
from ._gemini_reply import GeminiReply
from ._gemini_request import Compiled, check_model, compile_generate, new_signature
from ._gemini_state import GeminiState

DEFAULT_MODELS = (
    "gemini-2.5-flash",
    "gemini-2.5-flash-lite",
    "gemini-2.5-pro",
    "gemini-3-flash-preview",
    "gemini-3-pro-preview",
)
_EMPTY_FINISH = frozenset(["SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY"])


@dataclass(slots=True)
class Answer:
    """A rendered answer: the response body and what streaming needs to split it."""

    body: dict[str, Any]
    parts: list[dict[str, Any]]
    finish: str | None
    usage: dict[str, Any]
    model: str
    response_id: str


def _run(core: Core, compiled: Compiled, reply: Reply | None) -> ModelOutput:
    if compiled.cached_tokens and (reply is None or reply.cached_tokens is None):
        reply = replace(reply or Reply(), cached_tokens=compiled.cached_tokens)
    out = generate(compiled.request, reply, core.cache, lambda: "")
    if (
        compiled.budget is not None
        and compiled.budget > 0
        and out.reasoning_tokens > compiled.budget
    ):
        out.output_tokens -= out.reasoning_tokens - compiled.budget
        out.reasoning_tokens = compiled.budget
    if compiled.enum_answer and compiled.request.schema is not None and out.text.startswith('"'):
        out.text = json.loads(out.text)
    for stop in compiled.stop:
        cut = out.text.find(stop)
        if cut >= 0:
            out.text = out.text[:cut]
    return out


def _call_part(call: ToolCall) -> tuple[dict[str, Any], bool]:
    """A functionCall part, and whether its arguments were valid (an object)."""
    args: Any = call.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {}, False
    if not isinstance(args, Mapping):
        return {}, False
    function: dict[str, Any] = {"name": call.name, "args": dict(args)}
    if call.call_id:
        function["id"] = call.call_id
    return {"functionCall": function}, True


def answer(core: Core, compiled: Compiled, reply: Reply | None) -> Answer:
    """Run the model and render a ``GenerateContentResponse``."""
    out = _run(core, compiled, reply)
    model = compiled.request.model
    response_id = core.new_id("")
    extra = reply if isinstance(reply, GeminiReply) else None
    candidates_tokens = max(0, out.output_tokens - out.reasoning_tokens)
    usage: dict[str, Any] = {
        "promptTokenCount": out.input_tokens,
        "candidatesTokenCount": candidates_tokens,
        "totalTokenCount": out.input_tokens + candidates_tokens + out.reasoning_tokens,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": out.input_tokens}],
    }
    if out.reasoning_tokens:
        usage["thoughtsTokenCount"] = out.reasoning_tokens
    if out.cached_tokens:
        usage["cachedContentTokenCount"] = out.cached_tokens
        usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": out.cached_tokens}]
    body: dict[str, Any] = {"modelVersion": model, "responseId": response_id}
    if extra is not None and extra.block_reason:
        usage = {"promptTokenCount": out.input_tokens, "totalTokenCount": out.input_tokens}
        body["promptFeedback"] = {
            "blockReason": extra.block_reason,
            "safetyRatings": _ratings(blocked=extra.block_reason == "SAFETY"),
        }
        body["usageMetadata"] = usage
        return Answer(body, [], None, usage, model, response_id)
    # A scripted Reply(reasoning=...) thinks even on a model that would not by default.
    thinking = compiled.request.reasoning_effort is not None or out.reasoning is not None
    parts: list[dict[str, Any]] = []
    if out.reasoning and compiled.include_thoughts:
        parts.append({"text": out.reasoning, "thought": True})
    if out.text:
        parts.append({"text": out.text})
    finish = "MAX_TOKENS" if out.truncated else "STOP"
    for index, call in enumerate(out.tool_calls):
        part, ok = _call_part(call)
        if not ok:
            finish = "MALFORMED_FUNCTION_CALL"
            continue
        if index == 0 and (compiled.signatures or thinking):
            part["thoughtSignature"] = new_signature(f"{response_id}:{call.name}")
        parts.append(part)
    if finish == "MALFORMED_FUNCTION_CALL":
        parts = [p for p in parts if "functionCall" not in p]
    elif compiled.signatures and parts and not out.tool_calls and "thought" not in parts[-1]:
        parts[-1]["thoughtSignature"] = new_signature(f"{response_id}:text")
    if extra is not None and extra.finish_reason:
        finish = extra.finish_reason
        if finish in _EMPTY_FINISH:
            parts = []
    candidate: dict[str, Any] = {"index": 0, "finishReason": finish}
    if parts:
        candidate["content"] = {"parts": parts, "role": "model"}
    if finish in _EMPTY_FINISH:
        candidate["safetyRatings"] = _ratings(blocked=True)
    candidates = [candidate]
    if compiled.candidates > 1:
        # Identical answers, counted once each, as n samples of a deterministic model.
        candidates += [{**candidate, "index": i} for i in range(1, compiled.candidates)]
        usage["candidatesTokenCount"] = candidates_tokens * compiled.candidates
        usage["totalTokenCount"] = (
            out.input_tokens + usage["candidatesTokenCount"] + out.reasoning_tokens
        )
    body = {"candidates": candidates, "usageMetadata": usage, **body}
    return Answer(body, parts, finish, usage, model, response_id)


def _ratings(*, blocked: bool) -> list[dict[str, Any]]:
    categories = (
        "HARM_CATEGORY_HATE_SPEECH",
        "HARM_CATEGORY_DANGEROUS_CONTENT",
        "HARM_CATEGORY_HARASSMENT",
        "HARM_CATEGORY_SEXUALLY_EXPLICIT",
    )
    ratings: list[dict[str, Any]] = [
        {"category": c, "probability": "NEGLIGIBLE"} for c in categories
    ]
    if blocked:
        ratings[1] = {"category": categories[1], "probability": "HIGH", "blocked": True}
    return ratings


def generate_body(
    core: Core, state: GeminiState, model: str, body: Mapping[str, Any], reply: Reply | None
) -> dict[str, Any]:
    """The answer to one ``generateContent`` body (batch lines use it too)."""
    return answer(core, compile_generate(core, state, model, body), reply).body


def generate_content(call: Call) -> Outcome:
    """``POST models/{model}:generateContent``."""
    model = check_model(call.core, call.params["model"])
    return json_response(generate_body(call.core, call.state, model, body_of(call), call.reply))


def stream_generate_content(call: Call) -> Outcome:
    """``POST models/{model}:streamGenerateContent?alt=sse``: server-sent events."""
    model = check_model(call.core, call.params["model"], "streamGenerateContent")
    compiled = compile_generate(call.core, call.state, model, body_of(call))
    built = answer(call.core, compiled, call.reply)
    head = {"modelVersion": built.model, "responseId": built.response_id}
    if not built.body.get("candidates"):
        return StreamResponse([sse_event(built.body)], error_event=_stream_error)
    chunks: list[list[dict[str, Any]]] = []
    for part in built.parts:
        if "text" in part:
            pieces = chunk_text(part["text"]) or [part["text"]]
            for i, piece in enumerate(pieces):
                chunk = {**part, "text": piece}
                if i < len(pieces) - 1:
                    chunk.pop("thoughtSignature", None)
                chunks.append([chunk])
        else:
            if chunks and "functionCall" in chunks[-1][0]:
                chunks[-1].append(part)
            else:
                chunks.append([part])
    events: list[bytes] = []
    prompt_only = {
        "promptTokenCount": built.usage["promptTokenCount"],
        "totalTokenCount": built.usage["promptTokenCount"],
    }
    for index, parts in enumerate(chunks):
        last = index == len(chunks) - 1
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if last:
            candidate["finishReason"] = built.finish
        events.append(
            sse_event(
                {
                    "candidates": [candidate],
                    "usageMetadata": built.usage if last else prompt_only,
                    **head,
                }
            )
        )
    if not chunks:
        events.append(sse_event(built.body))
    return StreamResponse(events, error_event=_stream_error)


def _stream_error(message: str, code: str, sequence: int) -> bytes:
    return sse_event({"error": {"code": 500, "message": message, "status": "INTERNAL"}})


def count_tokens(call: Call) -> Outcome:
    """``POST models/{model}:countTokens`` (``contents`` or a whole ``generateContentRequest``)."""
    model = check_model(call.core, call.params["model"], "countTokens")
    body = body_of(call)
    inner = body.get("generateContentRequest")
    if isinstance(inner, Mapping):
        compiled = compile_generate(call.core, call.state, model, inner)
    else:
        if body.get("contents") is None:
            raise invalid("* CountTokensRequest.contents: contents is not specified\n")
        compiled = compile_generate(call.core, call.state, model, {"contents": body["contents"]})
    total = len(prompt_tokens(compiled.request.prompt))
    out: dict[str, Any] = {
        "totalTokens": total,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}],
    }
    if compiled.cached_tokens:
        out["cachedContentTokenCount"] = compiled.cached_tokens
    return json_response(out)


def _model_json(model: str) -> dict[str, Any]:
    thinking = "gemini-2.5" in model or "gemini-3" in model
    return {
        "name": f"models/{model}",
        "baseModelId": model,
        "version": "001",
        "displayName": model,
        "description": f"The emulator's {model}.",
        "inputTokenLimit": 1_048_576,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": [
            "generateContent",
            "countTokens",
            "createCachedContent",
            "batchGenerateContent",
        ],
        "temperature": 1.0,
        "topP": 0.95,
        "topK": 64,
        "maxTemperature": 2.0,
        "thinking": thinking,
    }


def get_model(call: Call) -> Outcome:
    """``GET models/{model}``."""
    model = model_name(call.params["model"])
    allowed = call.core.settings.models
    if allowed and model not in allowed:
        raise GoogleError(404, f"models/{model} is not found for API version v1beta.")
    return json_response(_model_json(model))


def list_models(call: Call) -> Outcome:
    """``GET models`` (paged)."""
    names = list(call.core.settings.models or DEFAULT_MODELS)
    return json_response(page(call, names, _model_json, "models", 50))
