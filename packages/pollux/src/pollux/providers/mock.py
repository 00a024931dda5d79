"""The mock provider (``Config(use_mock=True)``): deterministic, offline, honest about itself.

It never touches the network. Answers are derived from the prompt (so the same input gives the
same output), structured output is generated from the requested JSON Schema and validates against
it, usage is estimated at four characters per token, and tool loops work: when tools are declared
and the turn carries no tool results, the mock calls the first tool with schema-valid arguments;
after the results come back it answers in text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pollux.interaction.output import Usage
from pollux.interaction.tools import ToolCall, ToolCallDelta
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
    seed=True,
    tool_result_errors=True,
)


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


def fake_from_schema(schema: Mapping[str, Any], *, root: Mapping[str, Any] | None = None) -> Any:
    """A deterministic value that validates against ``schema`` (the common JSON Schema subset)."""
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
        props = schema.get("properties") or {}
        return {name: fake_from_schema(sub, root=root) for name, sub in props.items()}
    if kind == "array":
        items = schema.get("items") or {}
        count = max(1, int(schema.get("minItems", 1)))
        return [fake_from_schema(items, root=root) for _ in range(count)]
    if kind == "string":
        text = "mock"
        min_len = int(schema.get("minLength", 0))
        return text.ljust(min_len, "x")
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0.0))
    if kind == "boolean":
        return False
    return None


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

    def capabilities_for(self, model: str | None) -> Capabilities:
        """Everything the engine can express, except caches and deferred delivery."""
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
        """Read each source's size and fingerprint once per call (nothing is uploaded)."""
        parts = tuple(
            {"id": s.identifier, "mime": s.mime_type, "chars": s.size_bytes} for s in sources
        )
        return PreparedSources(sources=tuple(sources), parts=parts)

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
                structured = fake_from_schema(schema)
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
        input_tokens = max(1, (prompt_chars + 3) // 4)
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
