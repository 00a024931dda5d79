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

A deferred (batch) job's answers are spans too: collecting a job emits one ``chat {model}`` span
per request (:func:`record_deferred_spans`), from the job's submission to its completion, with
the same response attributes (usage, cost at the batch tier, finish reason, ``error.type`` for a
request that failed, expired or was cancelled) plus ``pollux.deferred.job_id`` and
``pollux.deferred.request_id``. Each collect records them (a second collect of the same job
records them again).

Prompt and answer content is never recorded unless the standard opt-in variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` is set; then the prompt and answer
text go on ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (and the instructions on
``gen_ai.system_instructions``) as the conventions' JSON.

Metrics, on the same terms with a meter provider (``metrics.set_meter_provider(...)``): every
attempt admitted by a provider quota (``Config(quota=...)``) records its wait in the histogram
``pollux.quota.wait.duration`` (seconds, 0 when there was room) and, when it waited, adds one to
the counter ``pollux.quota.waits``; both carry ``gen_ai.provider.name`` and
``gen_ai.request.model``.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from typing import TYPE_CHECKING, Any

from pollux._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pollux.interaction.deferred import DeferredHandle, DeferredSnapshot
    from pollux.interaction.output import Output
    from pollux.providers.base import ProviderRequest

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "GEN_AI_PROVIDERS",
    "QUOTA_WAITS",
    "QUOTA_WAIT_DURATION",
    "CallSpan",
    "record_deferred_spans",
    "record_quota_wait",
    "start_call_span",
]

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

#: The histogram of every quota admission's wait, in seconds.
QUOTA_WAIT_DURATION = "pollux.quota.wait.duration"
#: The counter of quota admissions that had to wait.
QUOTA_WAITS = "pollux.quota.waits"


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


def _metrics() -> Any:
    """The ``opentelemetry.metrics`` module, or None when the package is not installed."""
    if "metrics" not in _state:
        try:
            _state["metrics"] = importlib.import_module("opentelemetry.metrics")
        except ImportError:
            _state["metrics"] = None
    return _state["metrics"]


def _quota_instruments() -> tuple[Any, Any] | None:
    """(wait histogram, wait counter) of the current meter provider, or None when off.

    Made once per provider: creating instruments on every admission would cost more than the
    recording, and a provider set later (or a test's) gets its own.
    """
    metrics = _metrics()
    if metrics is None:
        return None
    provider = metrics.get_meter_provider()
    # The API's default stands in until an application sets a provider (its class is private).
    if isinstance(provider, metrics.NoOpMeterProvider) or (
        type(provider).__name__ == "_ProxyMeterProvider"
    ):
        return None  # no provider set: metrics are off
    cached = _state.get("quota_instruments")
    if cached is not None and cached[0] is provider:
        return cached[1], cached[2]
    meter = provider.get_meter("pollux", __version__)
    histogram = meter.create_histogram(
        QUOTA_WAIT_DURATION,
        unit="s",
        description="How long an attempt waited for room in its provider quota before it was "
        "dispatched (0 when there was room)",
    )
    counter = meter.create_counter(
        QUOTA_WAITS,
        unit="{wait}",
        description="Attempts that had to wait for room in their provider quota",
    )
    _state["quota_instruments"] = (provider, histogram, counter)
    return histogram, counter


def record_quota_wait(provider: str, model: str | None, waited_s: float) -> None:
    """Record one quota admission's wait (a no-op without a meter provider)."""
    instruments = _quota_instruments()
    if instruments is None:
        return
    histogram, counter = instruments
    attributes = {"gen_ai.provider.name": GEN_AI_PROVIDERS.get(provider, provider)}
    if model:
        attributes["gen_ai.request.model"] = model
    histogram.record(waited_s, attributes)
    if waited_s > 0:
        counter.add(1, attributes)


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


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def record_deferred_spans(
    handle: DeferredHandle, snapshot: DeferredSnapshot, outputs: Sequence[Output]
) -> None:
    """One ``chat {model}`` span per collected deferred answer (no-op when telemetry is off).

    Each span runs from the job's submission to its completion (the collect time when the
    provider reported none) and carries the answer's attributes, as a live call's span does.
    """
    tracer = _tracer()
    if tracer is None:
        return
    trace = _state["trace"]
    end = _ns(snapshot.completed_at if snapshot.completed_at is not None else time.time())
    start = min(_ns(handle.submitted_at), end)
    for output in outputs:
        deferred = output.diagnostics.raw.get("deferred")
        deferred = deferred if isinstance(deferred, dict) else {}
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": GEN_AI_PROVIDERS.get(handle.provider, handle.provider),
            "gen_ai.request.model": handle.model,
            "pollux.deferred.job_id": handle.job_id,
        }
        if isinstance(deferred.get("request_id"), str):
            attributes["pollux.deferred.request_id"] = deferred["request_id"]
        attributes.update(output_attributes(output))
        attributes.setdefault("gen_ai.response.model", handle.model)
        span = tracer.start_span(
            f"chat {handle.model}",
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
            start_time=start,
        )
        if output.metrics.completion_status == "error":
            error = deferred.get("error")
            category = error.get("error_category") if isinstance(error, dict) else None
            span.set_attribute(
                "error.type", str(category or deferred.get("status") or "structured_output")
            )
            span.set_status(trace.Status(trace.StatusCode.ERROR))
        span.end(end_time=end)


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
