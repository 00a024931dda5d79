"""OpenTelemetry spans for provider calls, following the GenAI semantic conventions.

When ``opentelemetry-api`` is installed and the application set a tracer provider
(``trace.set_tracer_provider(...)``), every provider call pollux makes (``run``, ``run_many``,
``interact``, ``stream``) is one CLIENT span named ``chat {model}``. Without the package, or
without a provider, nothing is imported past the first check and nothing is emitted: the check
is made once per call and costs a dictionary lookup.

Attributes (see docs/reference/telemetry.md): ``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.response.id``,
``gen_ai.request.max_tokens``/``temperature``/``top_p``/``seed`` when set,
``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_creation.input_tokens``,
``gen_ai.response.finish_reasons``, ``error.type``; and ``pollux.*`` for what the conventions do
not name (cost, cache hit ratio and savings, reasoning tokens, 1-hour cache writes, retries).
A stream records its time to first token as the ``pollux.first_token`` event.

Prompt and answer content is never recorded unless the standard opt-in variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` is set; then the prompt and answer
text go on ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (and the instructions on
``gen_ai.system_instructions``) as the conventions' JSON.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from typing import TYPE_CHECKING, Any

from pollux._version import __version__

if TYPE_CHECKING:
    from pollux.interaction.output import Output
    from pollux.providers.base import ProviderRequest

__all__ = ["CAPTURE_CONTENT_ENV", "GEN_AI_PROVIDERS", "CallSpan", "start_call_span"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

GEN_AI_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "openrouter": "openrouter",
    "local": "pollux.local",
    "mock": "pollux.mock",
}
"""pollux provider -> ``gen_ai.provider.name`` (the conventions' well-known values where any)."""

_state: dict[str, Any] = {}


def _trace() -> Any:
    """The ``opentelemetry.trace`` module, or None when the package is not installed."""
    if "trace" not in _state:
        try:
            _state["trace"] = importlib.import_module("opentelemetry.trace")
        except ImportError:
            _state["trace"] = None
    return _state["trace"]


def _tracer() -> Any:
    trace = _trace()
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None  # no provider set: telemetry is off
    return provider.get_tracer("pollux", __version__)


class CallSpan:
    """One provider call's span; every method is a no-op on the disabled span."""

    __slots__ = ("_capture", "_first", "_model", "_span", "_start", "_trace")

    def __init__(
        self,
        span: Any = None,
        trace: Any = None,
        *,
        capture: bool = False,
        model: str | None = None,
    ) -> None:
        self._span = span
        self._trace = trace
        self._capture = capture
        self._model = model
        self._first = False
        self._start = time.perf_counter()

    def first_token(self) -> None:
        """Record the time to the first streamed token (once)."""
        if self._span is None or self._first:
            return
        self._first = True
        elapsed = time.perf_counter() - self._start
        self._span.add_event("pollux.first_token", {"pollux.time_to_first_token_s": elapsed})

    def succeed(self, output: Output) -> None:
        """Record the call's outcome from its Output and end the span."""
        span = self._span
        if span is None:
            return
        attributes = output_attributes(output)
        if self._model and "gen_ai.response.model" not in attributes:
            # The provider answered the model pollux asked for (responses carry no other name).
            attributes["gen_ai.response.model"] = self._model
        span.set_attributes(attributes)
        if self._capture:
            message: dict[str, Any] = {
                "role": "assistant",
                "parts": [{"type": "text", "content": output.text}],
            }
            if output.metrics.finish_reason is not None:
                message["finish_reason"] = output.metrics.finish_reason
            span.set_attribute("gen_ai.output.messages", json.dumps([message]))
        if output.metrics.completion_status == "error":
            span.set_attribute("error.type", "structured_output")
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.end()
        self._span = None  # ended: a later close of the stream records nothing more

    def fail(self, error: BaseException) -> None:
        """Record a failed call (``error.type``, ERROR status) and end the span."""
        span = self._span
        if span is None:
            return
        category = getattr(error, "error_category", None)
        span.set_attribute("error.type", str(category or type(error).__name__))
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, type(error).__name__))
        span.end()
        self._span = None


_OFF = CallSpan()


def start_call_span(provider: str, request: ProviderRequest) -> CallSpan:
    """Start the span of one provider call, or return the disabled span when telemetry is off."""
    tracer = _tracer()
    if tracer is None:
        return _OFF
    trace = _state["trace"]
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": GEN_AI_PROVIDERS.get(provider, provider),
    }
    if request.model:
        attributes["gen_ai.request.model"] = request.model
    settings = request.requirements
    for name, value in (
        ("max_tokens", settings.max_tokens),
        ("temperature", settings.temperature),
        ("top_p", settings.top_p),
        ("seed", getattr(settings, "seed", None)),
    ):
        if value is not None:
            attributes[f"gen_ai.request.{name}"] = value
    if request.stream:
        attributes["pollux.stream"] = True
    capture = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")
    if capture:
        prompt = request.input.content
        parts = [{"type": "text", "content": prompt}] if isinstance(prompt, str) else []
        attributes["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": parts}])
        if request.instructions:
            attributes["gen_ai.system_instructions"] = json.dumps(
                [{"type": "text", "content": request.instructions}]
            )
    name = f"chat {request.model}" if request.model else "chat"
    span = tracer.start_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes)
    return CallSpan(span, trace, capture=capture, model=request.model)


def output_attributes(output: Output) -> dict[str, Any]:
    """The response attributes of an Output (usage, finish reason, cost, cache figures)."""
    usage, metrics = output.usage, output.metrics
    attrs: dict[str, Any] = {}
    response = output.diagnostics.raw.get("response")
    if isinstance(response, dict):
        model = response.get("model")
        if isinstance(model, str) and model:
            attrs["gen_ai.response.model"] = model
        response_id = response.get("response_id")
        if isinstance(response_id, str) and response_id:
            attrs["gen_ai.response.id"] = response_id
    if usage.reported:
        attrs["gen_ai.usage.input_tokens"] = usage.input_tokens
        attrs["gen_ai.usage.output_tokens"] = usage.output_tokens
        if usage.cached_tokens is not None:
            attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
        if usage.cache_write_tokens is not None:
            attrs["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if usage.cache_write_1h_tokens is not None:
            attrs["pollux.usage.cache_write_1h_tokens"] = usage.cache_write_1h_tokens
        if usage.reasoning_tokens is not None:
            attrs["pollux.usage.reasoning_tokens"] = usage.reasoning_tokens
    else:
        attrs["pollux.usage.reported"] = False
    if metrics.finish_reason is not None:
        attrs["gen_ai.response.finish_reasons"] = (metrics.finish_reason,)
    attrs["pollux.completion_status"] = metrics.completion_status
    attrs["pollux.cache.mode"] = metrics.cache_mode
    if metrics.cost_usd is not None:
        attrs["pollux.cost.usd"] = metrics.cost_usd
    if metrics.cache_hit_ratio is not None:
        attrs["pollux.cache.hit_ratio"] = metrics.cache_hit_ratio
    if metrics.cache_savings_usd is not None:
        attrs["pollux.cache.savings_usd"] = metrics.cache_savings_usd
    attempts = output.diagnostics.raw.get("attempts")
    if isinstance(attempts, int):
        attrs["pollux.attempts"] = attempts
    return attrs
