"""The mock provider (``Config(use_mock=True)``): deterministic, offline, honest about itself.

It never touches the network. Answers are derived from the prompt (so the same input gives the
same output), structured output is generated from the requested JSON Schema and validates against
it, usage is estimated at four characters per token, and tool loops work: when tools are declared
and the turn carries no tool results, the mock calls the first tool with schema-valid arguments;
after the results come back it answers in text. Deferred delivery (``defer()`` and friends)
runs on an in-memory timeline that moves one step per inspection (see
``pollux.providers._mock_deferred``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pollux.errors import ConfigurationError
from pollux.interaction.output import Usage
from pollux.interaction.tools import ToolCall, ToolCallDelta
from pollux.media_tokens import source_tokens
from pollux.providers._mock_deferred import MockDeferredJobs
from pollux.providers.base import (
    Capabilities,
    PreparedSources,
    ProviderBase,
    ProviderReadiness,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
)
from pollux.providers.openai_compat.compile import prior_messages, turn_messages

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.deferred import DeferredHandle, DeferredSnapshot
    from pollux.providers._deferred import DeferredJob, DeferredResults
    from pollux.source import Source

__all__ = ["MockProvider", "fake_from_schema"]

CAPABILITIES = Capabilities(
    streaming=True,
    structured_outputs=True,
    reasoning=True,
    reasoning_budget_tokens=True,
    tools=True,
    conversation=True,
    uploads=True,
    deferred_delivery=True,
    seed=True,
    tool_result_errors=True,
    # A CachePolicy is accepted offline (as pollux 2.0's mock does) and has no effect.
    prompt_cache_ttl=True,
)


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


#: Values for the common string formats (pydantic emits them for datetime, UUID, URLs, ...).
_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "duration": "P1D",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "email": "mock@example.com",
    "idn-email": "mock@example.com",
    "hostname": "example.com",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
}


def fake_from_schema(schema: Mapping[str, Any], *, root: Mapping[str, Any] | None = None) -> Any:
    """A deterministic value that validates against ``schema`` (the common JSON Schema subset).

    Covers ``$ref``, ``const``/``enum``/``default``, ``anyOf``/``oneOf``/``allOf``, objects
    (every property, ``minProperties``), arrays (``prefixItems``, ``minItems``/``maxItems``,
    ``uniqueItems``), strings (``format``, ``pattern``, ``minLength``/``maxLength``) and numbers
    (inclusive and exclusive bounds, ``multipleOf``).
    """
    root = root if root is not None else schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, Mapping) else {}
        return fake_from_schema(target, root=root)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return fake_from_schema(options[0], root=root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        return _fake_object(schema, root)
    if kind == "array":
        return _fake_array(schema, root)
    if kind == "string":
        return _fake_string(schema)
    if kind in ("integer", "number"):
        return _fake_number(schema, integer=kind == "integer")
    if kind == "boolean":
        return False
    return None


def _fake_answer(schema: Mapping[str, Any]) -> Any:
    """The mock's structured answer; a schema with no finite instance is a ConfigurationError.

    A ``$ref`` that leads back to itself (directly, or through required properties) makes
    :func:`fake_from_schema` recurse without end.
    """
    try:
        return fake_from_schema(schema)
    except RecursionError:
        raise ConfigurationError(
            "the mock provider cannot build an answer for output_schema: its $ref chain "
            "leads back to itself without end (the mock fills every property)",
            hint="Break the $ref cycle for mock runs, or test a recursive schema against a "
            "real provider or the emulator.",
        ) from None


def _fake_object(schema: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    value = {name: fake_from_schema(sub, root=root) for name, sub in props.items()}
    extra = schema.get("additionalProperties")
    wanted = int(schema.get("minProperties", 0))
    if isinstance(extra, Mapping):
        while len(value) < wanted:
            value[f"key{len(value)}"] = fake_from_schema(extra, root=root)
    return value


def _fake_array(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[Any]:
    prefix = schema.get("prefixItems")
    values = (
        [fake_from_schema(sub, root=root) for sub in prefix] if isinstance(prefix, list) else []
    )
    items = schema.get("items")
    count = max(len(values), int(schema.get("minItems", 0 if values else 1)))
    if "maxItems" in schema:
        count = min(count, int(schema["maxItems"]))
    if isinstance(items, Mapping):
        while len(values) < count:
            values.append(fake_from_schema(items, root=root))
    values = values[:count]
    if schema.get("uniqueItems"):
        values = [_distinct(value, position) for position, value in enumerate(values)]
    return values


def _distinct(value: Any, position: int) -> Any:
    if position == 0:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return value
    if isinstance(value, str):
        return f"{value}{position}"
    return value + position


def _fake_string(schema: Mapping[str, Any]) -> str:
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        generated = _from_pattern(pattern)
        if generated is not None:
            return generated
    fmt = schema.get("format")
    text = _FORMATS.get(fmt, "mock") if isinstance(fmt, str) else "mock"
    min_len = int(schema.get("minLength", 0))
    text = text.ljust(min_len, "x")
    if "maxLength" in schema:
        text = text[: int(schema["maxLength"])]
    return text


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _fake_number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    minimum, maximum = _number(schema.get("minimum")), _number(schema.get("maximum"))
    ex_min, ex_max = (
        _number(schema.get("exclusiveMinimum")),
        _number(schema.get("exclusiveMaximum")),
    )
    if integer:
        lows = [
            v
            for v in (minimum, None if ex_min is None else math.floor(ex_min) + 1)
            if v is not None
        ]
        highs = [
            v for v in (maximum, None if ex_max is None else math.ceil(ex_max) - 1) if v is not None
        ]
        low = math.ceil(max(lows)) if lows else None
        high = math.floor(min(highs)) if highs else None
        value: float = low if low is not None else (min(0, high) if high is not None else 0)
    else:
        lows = [v for v in (minimum, ex_min) if v is not None]
        highs = [v for v in (maximum, ex_max) if v is not None]
        low_f = max(lows) if lows else None
        high_f = min(highs) if highs else None
        exclusive = ex_min is not None or ex_max is not None
        if low_f is not None and high_f is not None:
            value = (low_f + high_f) / 2 if exclusive else low_f
        elif low_f is not None:
            value = low_f + 1 if ex_min is not None and ex_min >= low_f else low_f
        elif high_f is not None:
            value = min(0.0, high_f - 1 if ex_max is not None and ex_max <= high_f else high_f)
        else:
            value = 0.0
    multiple = _number(schema.get("multipleOf"))
    if multiple is not None and multiple > 0:
        value = math.ceil(value / multiple) * multiple
    return math.ceil(value) if integer else float(value)


def _from_pattern(pattern: str) -> str | None:
    """The shortest obvious string matching ``pattern`` (None when unsure)."""
    try:
        parser: Any = importlib.import_module("re._parser")
    except ImportError:  # pragma: no cover - Python 3.10
        parser = importlib.import_module("sre_parse")
    try:
        text = _emit(parser.parse(pattern))
    except Exception:  # an exotic construct: fall back to the plain value
        return None
    return text if re.search(pattern, text) else None


_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": " ",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
}


def _emit(pattern: Any) -> str:
    out: list[str] = []
    for op, arg in pattern:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if arg != ord("a") else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_emit_class(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, sub = arg
            out.append(_emit(sub) * low)
        elif name == "SUBPATTERN":
            out.append(_emit(arg[-1]))
        elif name == "ATOMIC_GROUP":
            out.append(_emit(arg))
        elif name == "BRANCH":
            out.append(_emit(arg[1][0]))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        else:
            raise ValueError(f"unsupported regex construct {name}")
    return "".join(out)


def _emit_class(items: Any) -> str:
    negated = bool(items) and str(items[0][0]) == "NEGATE"
    if negated:
        excluded = {arg for op, arg in items[1:] if str(op) == "LITERAL"}
        if any(str(op) != "LITERAL" for op, _ in items[1:]):
            raise ValueError("negated class with ranges")
        return next(c for c in "aZ0_ -x" if ord(c) not in excluded)
    op, arg = items[0]
    name = str(op)
    if name == "LITERAL":
        return chr(arg)
    if name == "RANGE":
        return chr(arg[0])
    if name == "CATEGORY":
        return _CATEGORY_CHARS[str(arg)]
    raise ValueError(f"unsupported class item {name}")


@dataclass(frozen=True, slots=True)
class _MockCompiled:
    response: ProviderResponse


class MockProvider(ProviderBase):
    """Offline provider used by ``Config(use_mock=True)`` and the demo."""

    CAPABILITIES = CAPABILITIES

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.provider
        self.model = config.model or "mock-model"
        self._deferred = MockDeferredJobs(self.name, self.model, self._answer)

    def capabilities_for(self, model: str | None) -> Capabilities:
        """Everything the engine can express; a CachePolicy is accepted (as 2.0 did) and unused."""
        return CAPABILITIES.with_overrides(self.config.capabilities)

    async def check_ready(self, model: str | None) -> ProviderReadiness:
        """Always ready: the mock needs no server, key or network."""
        return ProviderReadiness(
            ready=True,
            provider=self.name,
            model=model,
            message="mock provider: offline and always ready (answers are placeholders)",
        )

    async def prepare_sources(self, sources: Sequence[Source]) -> PreparedSources:
        """Read each source's size and fingerprint once per call (nothing is uploaded).

        In-memory and custom-loader sources are loaded, as a real provider would, so a failing
        loader surfaces here as a `SourceError`.
        """
        for source in sources:
            if source.source_type not in {"youtube", "uri", "arxiv"} and source._path is None:
                source._read_bytes()
        parts = tuple(self._part(s) for s in sources)
        return PreparedSources(sources=tuple(sources), parts=parts)

    def _part(self, source: Source) -> dict[str, Any]:
        # Media counts what the provider it stands in for would charge for its pixels or
        # seconds, as a quota counts it, not its bytes.
        part: dict[str, Any] = {"id": source.identifier, "mime": source.mime_type, "chars": 0}
        tokens = source_tokens(source, self.name, self.config.pricing_model or self.model)
        if tokens is None:
            part["chars"] = source.size_bytes
        else:
            part["tokens"] = tokens
        return part

    def compile(self, request: ProviderRequest) -> _MockCompiled:
        """Decide the whole answer up front (it is deterministic)."""
        return _MockCompiled(self._answer(request))

    def _answer(self, request: ProviderRequest) -> ProviderResponse:
        prompt = request.input.content or ""
        prompt_chars = len(prompt) + len(request.instructions or "")
        prompt_chars += sum(int(p["chars"]) for p in request.sources.parts)
        history = prior_messages(request)
        prompt_chars += sum(len(str(m.get("content") or "")) for m in history)
        digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8]
        req = request.requirements
        reasoning = None
        if req.reasoning_effort is not None or req.reasoning_budget_tokens is not None:
            reasoning = f"Mock reasoning about {prompt[:40]!r}."

        calls: tuple[ToolCall, ...] = ()
        structured = None
        if request.tools and not request.input.tool_results and req.tool_choice != "none":
            tool = request.tools[0]
            if isinstance(req.tool_choice, Mapping):
                wanted = req.tool_choice.get("name")
                tool = next((t for t in request.tools if t.name == wanted), tool)
            arguments = fake_from_schema(tool.parameters or {"type": "object"})
            calls = (
                ToolCall.from_text(
                    id=f"call_{digest}",
                    name=tool.name,
                    arguments_text=json.dumps(arguments, separators=(",", ":")),
                    index=0,
                ),
            )
            text = ""
        else:
            schema = req.output_schema_json()
            if schema is not None:
                structured = _fake_answer(schema)
                text = json.dumps(structured, separators=(",", ":"))
            elif request.input.tool_results:
                summary = "; ".join(r.content[:60] for r in request.input.tool_results)
                text = f"Mock answer using the tool results: {summary}"
            else:
                sources = len(request.sources.sources)
                about = f" over {sources} source(s)" if sources else ""
                text = f"Mock answer #{digest}{about} to: {prompt[:80]}"
        if req.max_tokens is not None and _tokens(text) > req.max_tokens:
            text = text[: req.max_tokens * 4]
            finish = "length"
            structured = None
        else:
            finish = "tool_calls" if calls else "stop"
        output_tokens = _tokens(text) + sum(_tokens(c.arguments_text) for c in calls)
        reasoning_tokens = _tokens(reasoning) if reasoning else None
        images = sum(int(p.get("tokens", 0)) for p in request.sources.parts)
        input_tokens = max(1, (prompt_chars + 3) // 4 + images)
        total = input_tokens + output_tokens + (reasoning_tokens or 0)
        return ProviderResponse(
            text=text,
            reasoning=reasoning,
            tool_calls=calls,
            usage=Usage(
                input_tokens=input_tokens,
                output_tokens=output_tokens + (reasoning_tokens or 0),
                total_tokens=total,
                reasoning_tokens=reasoning_tokens,
            ),
            finish_reason=finish,
            response_id=f"mock-{digest}",
            # Says so in every Output's diagnostics: these answers came from no model.
            artifacts={"mock": True},
        )

    async def execute(self, compiled: _MockCompiled) -> ProviderResponse:
        """Return the precomputed answer."""
        return compiled.response

    async def stream(self, compiled: _MockCompiled) -> AsyncIterator[StreamChunk]:
        """Replay the precomputed answer as word-sized chunks."""
        response = compiled.response
        if response.reasoning:
            yield StreamChunk(reasoning=response.reasoning)
        words = response.text.split(" ")
        for position, word in enumerate(words):
            piece = word if position == 0 else " " + word
            if piece:
                yield StreamChunk(text=piece)
        for call in response.tool_calls:
            index = call.index or 0
            yield StreamChunk(
                tool_call_deltas=(ToolCallDelta(index=index, id=call.id, name=call.name),)
            )
            yield StreamChunk(
                tool_call_deltas=(ToolCallDelta(index=index, arguments=call.arguments_text),)
            )
        yield StreamChunk(
            usage=response.usage,
            finish_reason=response.finish_reason,
            response_id=response.response_id,
            artifacts=response.artifacts,
        )

    def continuation_state(
        self, request: ProviderRequest, response: ProviderResponse
    ) -> dict[str, Any]:
        """The chat-style transcript after this turn (sources are not repeated)."""
        assistant: dict[str, Any] = {"role": "assistant", "content": response.text}
        if response.tool_calls:
            assistant["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_text},
                }
                for c in response.tool_calls
            ]
        return {"messages": [*prior_messages(request), *turn_messages(request), assistant]}

    # -- deferred delivery (in-memory timeline) ----------------------------------------------

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Queue a mock job (answers are computed now, revealed by the timeline)."""
        return await self._deferred.submit_deferred(requests, request_ids)

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """Report the job's state, then move it one step along the timeline."""
        return await self._deferred.inspect_deferred(handle)

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The job's snapshot and, once terminal, its answers."""
        return await self._deferred.collect_deferred(handle)

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """Cancel an active mock job."""
        await self._deferred.cancel_deferred(handle)
