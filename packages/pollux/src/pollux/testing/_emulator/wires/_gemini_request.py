"""Translate and validate a ``GenerateContentRequest`` the way the real API does.

The body becomes the emulator's :class:`ModelRequest`; on the way the checks the real API makes
are made: field names, roles, empty parts, Files API references that are gone or not ``ACTIVE``,
caches that are gone or clash with the request, thought signatures on Gemini 3 tool loops,
function responses that do not match the calls, thinking settings the model refuses.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pollux.testing._emulator._core import Core
from pollux.testing._emulator._model import FunctionSpec, ModelRequest

from ._gemini_common import GoogleError, invalid, model_name
from ._gemini_state import GeminiState

_ROLES = ("user", "model", "function", "tool")
_SIGNATURE_TAG = b"EmuSig"
# Google documents these values as "no signature, skip the check" for migrated histories.
_SIGNATURE_BYPASS = (b"skip_thought_signature_validator", b"context_engineering_is_the_way_to_go")
_LEVELS = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}
# The fields of GenerateContentRequest and GenerationConfig (as google-genai 3.6 sends them):
# the real API refuses any other name, so a misspelt parameter fails here too.
_REQUEST_FIELDS = frozenset(
    [
        "model",
        "contents",
        "systemInstruction",
        "tools",
        "toolConfig",
        "safetySettings",
        "generationConfig",
        "cachedContent",
        "labels",
        "serviceTier",
        "store",
        "continuationToken",
    ]
)
_CONFIG_FIELDS = frozenset(
    [
        "candidateCount",
        "logprobs",
        "seed",
        "stopSequences",
        "temperature",
        "thinkingConfig",
        "topK",
        "topP",
        "audioTranscriptionConfig",
        "enableEnhancedCivicAnswers",
        "frequencyPenalty",
        "imageConfig",
        "maxOutputTokens",
        "mediaResolution",
        "presencePenalty",
        "responseJsonSchema",
        "responseLogprobs",
        "responseMimeType",
        "responseModalities",
        "responseSchema",
        "speechConfig",
        "enableAffectiveDialog",
        "routingConfig",
        "modelSelectionConfig",
    ]
)


def _unknown_fields(body: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    for key in body:
        if key not in _REQUEST_FIELDS:
            raise invalid(
                f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
            )
    for key in config:
        if key not in _CONFIG_FIELDS:
            raise invalid(
                f"Invalid JSON payload received. Unknown name \"{key}\" at 'generation_config': "
                "Cannot find field."
            )


@dataclass(slots=True)
class Compiled:
    """A translated request and the Gemini-only settings its answer needs."""

    request: ModelRequest
    include_thoughts: bool
    budget: int | None
    cached_tokens: int
    signatures: bool
    stop: list[str]
    enum_answer: bool
    candidates: int = 1


def not_found_model(model: str, method: str = "generateContent") -> GoogleError:
    """The 404 for a model outside ``Emulator(models=...)``."""
    return GoogleError(
        404,
        f"models/{model} is not found for API version v1beta, or is not supported for {method}. "
        "Call ListModels to see the list of available models and their supported methods.",
    )


def check_model(core: Core, raw: str, method: str = "generateContent") -> str:
    """The bare model id, checked against ``Emulator(models=...)`` when that is set."""
    model = model_name(raw)
    if not model:
        raise invalid("* GenerateContentRequest.model: unexpected model name format\n")
    allowed = core.settings.models
    if allowed and model not in allowed:
        raise not_found_model(model, method)
    return model


def json_schema(schema: Any) -> Any:
    """A Gemini ``Schema`` (upper-case OpenAPI types) as the JSON Schema the generator reads."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out["type"] = value.lower()
        elif key == "properties" and isinstance(value, Mapping):
            out["properties"] = {k: json_schema(v) for k, v in value.items()}
        elif key in ("defs", "$defs") and isinstance(value, Mapping):
            # Reachable both as "#/defs/..." (Gemini's spelling) and "#/$defs/...".
            out["defs"] = out["$defs"] = {k: json_schema(v) for k, v in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = json_schema(value)
        elif key == "ref":
            out["$ref"] = value
        else:
            out[key] = value
    return out


def _decode_signature(value: Any) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def new_signature(seed: str) -> str:
    """A thought signature the emulator can recognise later (plain base64 alphabet only)."""
    head = base64.b64encode(_SIGNATURE_TAG).decode()  # 8 characters, no padding
    return head + hashlib.blake2b(seed.encode(), digest_size=16).hexdigest()


def _valid_signature(value: Any) -> bool:
    raw = _decode_signature(value)
    return raw is not None and (raw.startswith(_SIGNATURE_TAG) or raw in _SIGNATURE_BYPASS)


class _Compiler:
    def __init__(self, core: Core, state: GeminiState, model: str, where: str) -> None:
        self.core = core
        self.state = state
        self.model = model
        self.where = where
        self.request = ModelRequest(model=model)

    def system(self, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, str):
            self.request.add_text(value)
            return
        if not isinstance(value, Mapping):
            raise invalid(f"Invalid value at '{self.where}system_instruction'.")
        for part in value.get("parts") or ():
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                self.request.add_text(part["text"])

    def tools(self, tools: Any, tool_config: Any) -> None:
        if tools is None:
            tools = []
        if not isinstance(tools, list):
            raise invalid(f"Invalid value at '{self.where}tools': expected a list.")
        for index, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                raise invalid(f"Invalid value at '{self.where}tools[{index}]'.")
            for d_index, decl in enumerate(tool.get("functionDeclarations") or ()):
                name = decl.get("name") if isinstance(decl, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise invalid(
                        f"* GenerateContentRequest.tools[{index}].function_declarations"
                        f"[{d_index}].name: [FIELD_INVALID] Invalid function name. Must start "
                        "with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), "
                        "underscores (_), dots (.), colons (:), or dashes (-), with a maximum "
                        "length of 128.\n"
                    )
                assert isinstance(decl, Mapping)
                if "parameters" in decl and "parametersJsonSchema" in decl:
                    raise invalid(
                        f"* GenerateContentRequest.tools[{index}].function_declarations"
                        f"[{d_index}]: parameters and parameters_json_schema cannot both be "
                        "set.\n"
                    )
                params = decl.get("parametersJsonSchema") or json_schema(
                    decl.get("parameters") or {}
                )
                self.request.tools.append(FunctionSpec(name, params))
                self.request.add_text(json.dumps(decl, sort_keys=True, default=str))
            for key in tool:
                if key != "functionDeclarations":
                    self.request.add_text(key)
        config = (
            tool_config.get("functionCallingConfig") if isinstance(tool_config, Mapping) else None
        )
        if isinstance(config, Mapping):
            mode = str(config.get("mode") or "AUTO").upper()
            allowed = config.get("allowedFunctionNames") or []
            if mode == "NONE":
                self.request.tool_choice = "none"
            elif mode == "ANY":
                self.request.tool_choice = (
                    f"function:{allowed[0]}" if len(allowed) == 1 else "required"
                )
            elif mode not in ("AUTO", "VALIDATED", "MODE_UNSPECIFIED"):
                raise invalid(
                    f"Invalid value at '{self.where}tool_config.function_calling_config.mode' "
                    f"(type.googleapis.com/google.ai.generativelanguage.v1beta."
                    f'FunctionCallingConfig.Mode), "{mode}"'
                )

    def contents(self, contents: Any, *, required: bool = True) -> None:
        if contents is None or contents == []:
            if required:
                raise invalid("* GenerateContentRequest.contents: contents is not specified\n")
            return
        if not isinstance(contents, list):
            raise invalid(f"Invalid value at '{self.where}contents': expected a list.")
        for index, content in enumerate(contents):
            if not isinstance(content, Mapping):
                raise invalid(f"Invalid value at '{self.where}contents[{index}]'.")
            role = content.get("role") or "user"
            if role not in _ROLES:
                raise invalid("Please use a valid role: user, model.")
            parts = content.get("parts")
            if not isinstance(parts, list) or not parts:
                raise invalid(
                    f"* GenerateContentRequest.contents[{index}].parts: contents.parts must not "
                    "be empty.\n"
                )
            texts: list[str] = []
            answers: list[str] = []
            for p_index, part in enumerate(parts):
                if not isinstance(part, Mapping):
                    raise invalid(f"Invalid value at 'contents[{index}].parts[{p_index}]'.")
                self._part(part, texts, answers, f"contents[{index}].parts[{p_index}]")
            if role == "model":
                continue
            if texts or not answers:
                self.request.last_user_text = "\n".join(texts)
                self.request.tool_results = []
            self.request.tool_results.extend(answers)

    def _part(self, part: Mapping[str, Any], texts: list[str], answers: list[str], at: str) -> None:
        request = self.request
        if part.get("thought") and isinstance(part.get("text"), str):
            return  # thoughts sent back are not prompt text
        if isinstance(part.get("text"), str):
            request.add_text(part["text"])
            texts.append(part["text"])
        elif isinstance(part.get("inlineData"), Mapping):
            blob = part["inlineData"]
            data = blob.get("data")
            if not isinstance(data, str) or not blob.get("mimeType"):
                raise invalid(f"* GenerateContentRequest.{at}.inline_data: data is required.\n")
            request.add_attachment(_kind(str(blob["mimeType"])), data)
        elif isinstance(part.get("fileData"), Mapping):
            ref = part["fileData"]
            uri = ref.get("fileUri")
            if not isinstance(uri, str) or not uri:
                raise invalid(f"* GenerateContentRequest.{at}.file_data.file_uri: required.\n")
            stored = self._file_mime(uri)
            mime = str(ref.get("mimeType") or stored)
            request.add_attachment(_kind(mime), uri)
        elif isinstance(part.get("functionCall"), Mapping):
            call = part["functionCall"]
            request.add_text(f"{call.get('name', '')} {json.dumps(call.get('args') or {})}")
        elif isinstance(part.get("functionResponse"), Mapping):
            answer = part["functionResponse"]
            output = json.dumps(answer.get("response") or {}, sort_keys=True)
            request.add_text(f"{answer.get('name', '')} {output}")
            answers.append(output)
        elif isinstance(part.get("executableCode"), Mapping) or isinstance(
            part.get("codeExecutionResult"), Mapping
        ):
            request.add_text(json.dumps(dict(part), sort_keys=True))
        elif not (set(part) - {"thoughtSignature", "videoMetadata", "thought", "mediaResolution"}):
            raise invalid(
                f"* GenerateContentRequest.{at}.data: required oneof field 'data' must have "
                "one initialized field\n"
            )

    def _file_mime(self, uri: str) -> str:
        """Check a Files API reference the way the real API does; return its MIME type."""
        marker = uri.rfind("/files/")
        if uri.startswith("files/"):
            file_id = uri[6:]
        elif marker >= 0 and "/gemini/" in uri:
            file_id = uri[marker + 7 :]
        else:
            return "video/mp4" if "youtube.com" in uri or "youtu.be" in uri else "text/html"
        record = self.state.live_file(file_id)
        if record is None:
            raise GoogleError(
                403,
                f"You do not have permission to access the File {file_id} or it may not exist.",
            )
        state = self.state.file_state(record)
        if state != "ACTIVE":
            raise GoogleError(
                400,
                f"The File {file_id} is not in an ACTIVE state and usage is not allowed.",
                "FAILED_PRECONDITION",
            )
        return record.mime_type


def _kind(mime: str) -> str:
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("audio/"):
        return "audio"
    return "file"


def _check_signatures(contents: Any) -> None:
    """Gemini 3: in the current turn, each step's first function call keeps its signature."""
    if not isinstance(contents, list):
        return
    start = 0
    for index, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content, Mapping) else None
        if content.get("role", "user") != "model" and any(
            isinstance(p, Mapping) and "functionResponse" not in p for p in parts or ()
        ):
            start = index
    for index in range(start, len(contents)):
        content = contents[index]
        if content.get("role") != "model":
            continue
        calls = [p for p in content.get("parts") or () if "functionCall" in p]
        if not calls:
            continue
        first = calls[0]
        if "thoughtSignature" not in first:
            name = first["functionCall"].get("name", "")
            raise invalid(
                "Function call is missing a thought_signature in functionCall parts. This is "
                "required for tools to work correctly, and missing thought_signature may lead "
                f"to degraded model performance. Additional data, function call `{name}` , "
                f"position {index + 1}. Please refer to "
                "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
            )
        if not _valid_signature(first["thoughtSignature"]):
            raise invalid("Corrupted thought signature.")


def _check_responses(contents: Any) -> None:
    if not isinstance(contents, list):
        return
    for index, content in enumerate(contents[:-1]):
        if content.get("role") != "model":
            continue
        calls = sum(1 for p in content.get("parts") or () if "functionCall" in p)
        if not calls:
            continue
        answers = sum(1 for p in contents[index + 1].get("parts") or () if "functionResponse" in p)
        if answers and answers != calls:
            raise invalid(
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )


def _thinking(model: str, config: Mapping[str, Any]) -> tuple[str | None, int | None, bool]:
    thinking = config.get("thinkingConfig")
    thinking = thinking if isinstance(thinking, Mapping) else {}
    level = thinking.get("thinkingLevel")
    budget = thinking.get("thinkingBudget")
    include = bool(thinking.get("includeThoughts"))
    gemini3 = "gemini-3" in model
    if level is not None and budget is not None:
        raise invalid("You can only set only one of thinking budget and thinking level.")
    if level is not None:
        if not gemini3:
            raise invalid("Thinking level is not supported for this model.")
        effort = _LEVELS.get(str(level).lower())
        if effort is None:
            raise invalid(
                f"Invalid value at 'generation_config.thinking_config.thinking_level', \"{level}\""
            )
        return effort, None, include
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < -1:
            raise invalid(
                "Invalid value at 'generation_config.thinking_config.thinking_budget' (TYPE_INT32)"
            )
        if budget == 0:
            if "pro" in model:
                raise invalid("Budget 0 is invalid. This model only works in thinking mode.")
            return None, 0, include
        if budget == -1:
            return "medium", None, include
        return (
            ("low" if budget <= 1024 else "medium" if budget <= 8192 else "high"),
            budget,
            include,
        )
    default = gemini3 or ("gemini-2.5" in model and "lite" not in model)
    return ("medium" if default else None), None, include


def compile_generate(
    core: Core, state: GeminiState, model: str, body: Mapping[str, Any], where: str = ""
) -> Compiled:
    """Translate and validate a ``GenerateContentRequest`` body."""
    compiler = _Compiler(core, state, model, where)
    request = compiler.request
    cached_tokens = 0
    cache_name = body.get("cachedContent")
    if cache_name is not None:
        if not isinstance(cache_name, str):
            raise invalid("Invalid value at 'cached_content' (TYPE_STRING)")
        cache = state.live_cache(cache_name)
        if cache is None:
            raise GoogleError(403, "CachedContent not found (or permission denied)")
        if any(body.get(k) for k in ("systemInstruction", "tools", "toolConfig")):
            raise invalid(
                "CachedContent can not be used with GenerateContent request setting "
                "system_instruction, tools or tool_config.\n\nProposed fix: move those values "
                "to CachedContent from GenerateContent request."
            )
        if cache.model != model:
            raise invalid(
                f"Model used by GenerateContent request (models/{model}) and CachedContent "
                f"(models/{cache.model}) has to be the same."
            )
        held = cache.request
        request.prompt.extend(held.prompt)
        request.attachments.update(held.attachments)
        request.tools.extend(held.tools)
        request.tool_choice = held.tool_choice
        request.last_user_text = held.last_user_text
        request.tool_results = list(held.tool_results)
        cached_tokens = cache.tokens
    else:
        compiler.system(body.get("systemInstruction"))
        compiler.tools(body.get("tools"), body.get("toolConfig"))
    contents = body.get("contents")
    compiler.contents(contents)
    signatures = state.checks_signatures(model)
    if signatures:
        _check_signatures(contents)
    _check_responses(contents)
    config = body.get("generationConfig") or {}
    if not isinstance(config, Mapping):
        raise invalid("Invalid value at 'generation_config'.")
    _unknown_fields(body, config)
    count = config.get("candidateCount", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 8:
        raise invalid(
            "* GenerateContentRequest.generation_config.candidate_count: candidate_count must "
            "be between 1 and 8.\n"
        )
    limit = config.get("maxOutputTokens")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise invalid(
                "* GenerateContentRequest.generation_config.max_output_tokens: "
                "max_output_tokens must be positive.\n"
            )
        request.max_output_tokens = limit
    temperature = config.get("temperature")
    if temperature is not None and not (
        isinstance(temperature, (int, float)) and 0 <= temperature <= 2
    ):
        raise invalid(
            "* GenerateContentRequest.generation_config.temperature: temperature must be "
            "in the range [0.0, 2.0].\n"
        )
    mime = config.get("responseMimeType")
    schema = config.get("responseSchema")
    raw_schema = config.get("responseJsonSchema")
    if schema is not None and raw_schema is not None:
        raise invalid(
            "* GenerateContentRequest.generation_config.response_schema: response_schema and "
            "response_json_schema cannot both be set.\n"
        )
    enum_answer = mime == "text/x.enum"
    if (schema is not None or raw_schema is not None) and mime not in (
        "application/json",
        "text/x.enum",
    ):
        raise invalid(
            "* GenerateContentRequest.generation_config.response_mime_type: "
            "response_mime_type must be one of [application/json, text/x.enum] when "
            "response_schema is set.\n"
        )
    if mime == "application/json":
        if raw_schema is not None:
            request.schema = raw_schema
        elif schema is not None:
            request.schema = json_schema(schema)
        else:
            request.json_mode = True
    elif enum_answer and schema is not None:
        request.schema = json_schema(schema)
    effort, budget, include = _thinking(model, config)
    request.reasoning_effort = effort
    stop = config.get("stopSequences") or []
    return Compiled(
        request,
        include,
        budget,
        cached_tokens,
        signatures,
        [s for s in stop if isinstance(s, str) and s],
        enum_answer,
        count,
    )
