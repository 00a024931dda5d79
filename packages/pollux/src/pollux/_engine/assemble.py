"""One assembly path from a provider response to an Output, shared by interact and stream.

``interact`` assembles the ProviderResponse that ``execute`` returned; ``stream`` folds its chunks
into a ProviderResponse with :class:`StreamAccumulator` and then calls the same
:func:`assemble`. So ``done.output`` equals what ``interact`` returns for the same exchange,
by construction (only ``metrics.duration_s`` differs, since it is measured).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pollux._pricing import call_cost
from pollux._scrub import scrub
from pollux.interaction.continuation import Continuation
from pollux.interaction.output import (
    CacheMode,
    Diagnostics,
    Metrics,
    Output,
    Usage,
    completion_status_for,
)
from pollux.interaction.tools import ToolCall
from pollux.providers._schema import drop_null_optionals, schema_problem
from pollux.providers.base import TOOL_CALL_STATES, ProviderResponse, StreamChunk

if TYPE_CHECKING:
    from pollux.interaction.tools import ToolCallDelta
    from pollux.providers.base import Provider, ProviderRequest

__all__ = [
    "STRUCTURED_OUTPUT_CATEGORY",
    "StreamAccumulator",
    "assemble",
    "parse_structured",
    "structured_facets",
]

#: ``diagnostics.error["error_category"]`` of an answer that does not match its output schema.
STRUCTURED_OUTPUT_CATEGORY = "structured_output"


def _strip_fences(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        if stripped.rstrip().endswith("```"):
            stripped = stripped.rstrip()[:-3]
    return stripped.strip()


def parse_structured(
    request: ProviderRequest, response: ProviderResponse
) -> tuple[Any, str | None]:
    """The structured value for a schema request, and an error message when it failed.

    A pydantic model is validated (``model_validate``); a failure is reported, not hidden: the
    value is ``None`` and :func:`structured_facets` turns the message into the Output's error.
    """
    req = request.requirements
    if req.output_schema is None:
        return None, None
    value = response.structured
    if value is None:
        if not response.text.strip():
            return None, "the model returned no text to parse as JSON"
        try:
            value = json.loads(_strip_fences(response.text))
        except ValueError as exc:
            return None, f"the model's text is not valid JSON: {exc}"
    # Strict mode sent optional properties as required-and-nullable (see
    # pollux.providers._schema): a null there means "absent", as the user declared it.
    schema = req.output_schema_json() or {}
    value = drop_null_optionals(value, schema)
    model = req.output_schema_model()
    if model is None:
        problem = schema_problem(value, schema)
        if problem is not None:
            return None, f"the JSON does not validate against the output schema: {problem}"
        return value, None
    try:
        return model.model_validate(value), None
    except Exception as exc:  # pydantic.ValidationError, without importing pydantic here
        return None, f"the JSON does not validate against {model.__name__}: {exc}"


def structured_facets(message: str, *, provider: str, finish_reason: str | None) -> dict[str, Any]:
    """The ``diagnostics.raw`` entries of an answer that does not match its output schema.

    The Output keeps its text (the answer the model gave), ``structured`` stays ``None``,
    ``metrics.completion_status`` is ``"error"`` (so ``Output.failed`` is true and
    ``OutputCollection.status`` counts it) and ``diagnostics.error`` says why, with
    ``error_category == "structured_output"``. ``raw["structured_error"]`` keeps the bare
    message for code written before the error facet existed.
    """
    message = scrub(message)
    truncated = completion_status_for(finish_reason) == "truncated"
    if truncated:
        message += f" (the answer was cut off: finish_reason={finish_reason!r})"
        hint = "Raise max_tokens so the whole JSON answer fits, or ask for a shorter answer."
    else:
        hint = (
            "The model's text is in Output.text. Simplify or loosen the schema, state the "
            "format in the prompt, or use a model with native structured output."
        )
    return {
        "structured_error": message,
        "error": {
            "type": "structured_output",
            "message": f"the answer does not match the output schema: {message}",
            "hint": hint,
            "provider": provider,
            "phase": "parse",
            "error_category": STRUCTURED_OUTPUT_CATEGORY,
        },
    }


def assemble(
    provider: Provider,
    request: ProviderRequest,
    response: ProviderResponse,
    *,
    model: str | None,
    duration_s: float,
    attempts: int = 1,
    continuable: bool = False,
    pricing_model: str | None = None,
) -> Output:
    """Build the Output for one completed exchange.

    A continuation is attached when the model asked for tools, when the turn continued a
    conversation, or when ``continuable`` (a single interaction on a provider with
    conversation support, so a plain chat can go on). Fan-out outputs skip it otherwise:
    nobody continues 300 parallel answers, and the transcript copy is not free.

    The cost is priced by ``model``, or for a deployment (Azure OpenAI) by the model the
    response names, else ``pricing_model`` (``Config.pricing_model``).
    """
    structured, structured_error = parse_structured(request, response)
    item = request.input
    continuation = None
    if (
        continuable
        or response.tool_calls
        or item.continuation is not None
        or item.history is not None
    ):
        continuation = Continuation._create(
            provider=provider.name,
            model=model,
            state=provider.continuation_state(request, response),
        )
    raw: dict[str, Any] = {"response": response.to_jsonable()}
    status = completion_status_for(response.finish_reason)
    if structured_error is not None:
        raw.update(
            structured_facets(
                structured_error, provider=provider.name, finish_reason=response.finish_reason
            )
        )
        status = "error"
    if attempts > 1:
        raw["attempts"] = attempts
    usage = response.usage
    # Only what the response reports counts: a cache served the call if the provider reports
    # cached input tokens, never because pollux sent a cache reference.
    cache_reads = (usage.cached_tokens or 0) if usage is not None else 0
    cache_writes = (usage.cache_write_tokens or 0) if usage is not None else 0
    cache_mode: CacheMode = "implicit" if cache_reads or cache_writes else "none"
    cache_used = cache_hit = cache_reads > 0
    cache = request.sources.cache
    if cache is not None:
        # A persistent cache (CachePolicy): a hit is a cache that existed before this call.
        cache_mode = "persistent"
        cache_hit = cache_used and not cache.created
        # What the bill needs about the cache itself: a created one is paid for (creation and
        # storage for its TTL), and pollard's bridge charges it to the run that created it.
        facts: dict[str, Any] = {"name": cache.name, "created": cache.created}
        if cache.tokens is not None:
            facts["tokens"] = cache.tokens
        if cache.ttl_seconds is not None:
            facts["ttl_seconds"] = cache.ttl_seconds
        raw["cache"] = facts
    if usage is None:
        # No usage at all: zeros that mean "unknown", marked so nothing prices them as free.
        usage = Usage(reported=False)
    cost, saved = call_cost(
        provider.name,
        model or "",
        usage,
        served=(response.artifacts or {}).get("model_version"),
        declared=pricing_model,
    )
    return Output(
        text=response.text,
        structured=structured,
        reasoning=response.reasoning,
        tool_calls=response.tool_calls,
        continuation=continuation,
        usage=usage,
        metrics=Metrics(
            duration_s=duration_s,
            cache_used=cache_used,
            cache_mode=cache_mode,
            cache_hit=cache_hit,
            finish_reason=response.finish_reason,
            completion_status=status,
            cache_hit_ratio=(
                (usage.cached_tokens or 0) / usage.input_tokens
                if usage.reported and usage.input_tokens
                else None
            ),
            cost_usd=None if cost is None else float(cost),
            cache_savings_usd=None if saved is None else float(saved),
        ),
        diagnostics=Diagnostics(raw=raw),
    )


@dataclass(slots=True)
class _Slot:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StreamAccumulator:
    """Folds StreamChunks into the ProviderResponse ``execute`` would have returned."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    slots: dict[int, _Slot] = field(default_factory=dict)
    usage: Usage | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    structured: Any = None
    provider_state: dict[str, Any] | None = None
    artifacts: dict[str, Any] | None = None
    final_calls: tuple[ToolCall, ...] = ()

    def add(self, chunk: StreamChunk) -> None:
        """Fold one chunk in."""
        if chunk.text:
            self.text.append(chunk.text)
        if chunk.reasoning:
            self.reasoning.append(chunk.reasoning)
        for delta in chunk.tool_call_deltas:
            self._add_delta(delta)
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.response_id is not None and self.response_id is None:
            self.response_id = chunk.response_id
        if chunk.structured is not None:
            self.structured = chunk.structured
        if chunk.provider_state:
            self.provider_state = _merge(self.provider_state, chunk.provider_state)
        if chunk.artifacts:
            self.artifacts = _merge(self.artifacts, chunk.artifacts)
        if chunk.tool_calls:
            self.final_calls = chunk.tool_calls

    def _add_delta(self, delta: ToolCallDelta) -> None:
        slot = self.slots.get(delta.index)
        if slot is None:
            slot = self.slots[delta.index] = _Slot()
        if delta.id and slot.id is None:
            slot.id = delta.id
        if delta.name and slot.name is None:
            slot.name = delta.name
        if delta.arguments:
            slot.arguments.append(delta.arguments)

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls the provider reported complete, else the assembled ones (first-seen order).

        A provider whose calls carry replay state (Gemini thought signatures) sends it under
        ``provider_state[TOOL_CALL_STATES]`` (call index -> state), so streamed calls equal the
        calls ``execute`` returns.
        """
        if self.final_calls:
            return self.final_calls
        states = (self.provider_state or {}).get(TOOL_CALL_STATES) or {}
        return tuple(
            ToolCall.from_text(
                id=slot.id or f"call_{index}",
                name=slot.name or "",
                arguments_text="".join(slot.arguments),
                index=index,
                provider_state=states.get(str(index)),
            )
            for index, slot in self.slots.items()
        )

    def response(self) -> ProviderResponse:
        """The complete response."""
        state = self.provider_state
        if state is not None and TOOL_CALL_STATES in state:
            state = {k: v for k, v in state.items() if k != TOOL_CALL_STATES} or None
        return ProviderResponse(
            text="".join(self.text),
            reasoning="".join(self.reasoning) or None,
            tool_calls=self.tool_calls(),
            usage=self.usage,
            finish_reason=self.finish_reason,
            response_id=self.response_id,
            structured=self.structured,
            provider_state=state,
            artifacts=self.artifacts,
        )


def _merge(current: dict[str, Any] | None, update: dict[str, Any]) -> dict[str, Any]:
    # Lists are extended (streamed fragments such as reasoning_details); other values replace.
    merged = dict(current or {})
    for key, value in update.items():
        previous = merged.get(key)
        if isinstance(previous, list) and isinstance(value, list):
            merged[key] = previous + value
        else:
            merged[key] = value
    return merged
