"""OpenTelemetry bridge (``pip install "pollard[otel]"``): a recorded tree as spans.

Two entry points, both given a tracer you configured:

* :func:`export_spans` rebuilds a recorded subtree offline as nested spans.
* :func:`live_span_hook` returns an ``on_node`` callback for ``Runtime(on_node=...)`` that emits
  a span for every newly stored node while the run is going.

Spans follow the OpenTelemetry GenAI semantic conventions: a model call is a ``chat {model}``
client span with ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.response.model``, ``gen_ai.usage.input_tokens``/``output_tokens``, the cache token counts
(``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_creation.input_tokens``) and
``gen_ai.response.finish_reasons``, the same names pollux's own spans use; a tool call is an
``execute_tool {tool}`` span with ``gen_ai.tool.name``; other nodes are ``pollard {kind}`` spans.
Every span carries ``pollard.node.id``, ``pollard.parent.id``, ``pollard.node.kind``,
``pollard.node.attempt``, ``pollard.charge.<meter>`` and the refusal/pruned markers.

Spans are timed from the record: a step starts at its ``created_at`` (stamped when it starts
executing) and lasts its recorded ``duration_s``. An exported run's top span covers the whole
subtree (first start to last end).
Prompt and result content never goes on a span: only names, ids, digests, counts and charges.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from pollard._core._store import Store
from pollard._edge._view import (
    ViewNode,
    format_decimal,
    kind_name,
    parse_timestamp,
    view_node,
)

try:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'pollard.otel needs OpenTelemetry: pip install "pollard[otel]"', name=exc.name
    ) from exc

__all__ = ["export_spans", "live_span_hook", "node_attributes", "span_name"]

AttributeValue = str | bool | int | float | tuple[str, ...]
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_LIVE_PARENTS_MAX = 10_000

# Model-name prefixes (LiteLLM and pollard adapters) -> gen_ai.provider.name well-known values.
_PROVIDER_PREFIXES = {
    "openai": "openai",
    "azure": "azure.ai.openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "vertex_ai": "gcp.vertex_ai",
    "gemini": "gcp.gemini",
    "google": "gcp.gemini",
    "mistral": "mistral_ai",
    "groq": "groq",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "cohere": "cohere",
    "perplexity": "perplexity",
}


def _model(payload: Mapping[str, Any]) -> str | None:
    for key in ("model", "modelId", "model_id"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _provider(payload: Mapping[str, Any], model: str | None) -> str | None:
    extra = payload.get("_pollard")
    if isinstance(extra, Mapping):
        value = extra.get("provider")
        if isinstance(value, str) and value:
            return value
    if model:
        for sep in ("/", ":"):
            prefix, found, _ = model.partition(sep)
            if found and prefix.lower() in _PROVIDER_PREFIXES:
                return _PROVIDER_PREFIXES[prefix.lower()]
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(node: Any) -> tuple[int | None, int | None]:
    for source in (
        node.meta.get("usage"),
        (node.result or {}).get("usage") if isinstance(node.result, Mapping) else None,
    ):
        if isinstance(source, Mapping):
            inp = _int(source.get("input_tokens", source.get("prompt_tokens")))
            out = _int(source.get("output_tokens", source.get("completion_tokens")))
            if inp is not None or out is not None:
                return inp, out
    return None, None


def _cache_usage(node: Any) -> dict[str, int]:
    """The cache token attributes (GenAI conventions) from a node's recorded usage."""
    out: dict[str, int] = {}
    for source in (
        node.meta.get("usage"),
        (node.result or {}).get("usage") if isinstance(node.result, Mapping) else None,
    ):
        if not isinstance(source, Mapping):
            continue
        read = _int(source.get("cache_read_tokens", source.get("cache_read_input_tokens")))
        write = _int(source.get("cache_write_tokens", source.get("cache_creation_input_tokens")))
        if read is not None:
            out["gen_ai.usage.cache_read.input_tokens"] = read
        if write is not None:
            out["gen_ai.usage.cache_creation.input_tokens"] = write
        if out:
            return out
    return out


def _finish_reason(node: Any) -> str | None:
    result = node.result if isinstance(node.result, Mapping) else {}
    output = result.get("output")
    metrics = output.get("metrics") if isinstance(output, Mapping) else None
    for value in (
        metrics.get("finish_reason") if isinstance(metrics, Mapping) else None,
        result.get("finish_reason"),
    ):
        if isinstance(value, str) and value:
            return value
    return None


def _number(value: Any) -> int | float:
    text = format_decimal(value)
    return int(text) if "." not in text else float(text)


def span_name(node: Any) -> str:
    """The span name of a node: ``chat {model}``, ``execute_tool {tool}`` or ``pollard {kind}``."""
    kind = kind_name(node.kind)
    payload = node.payload if isinstance(node.payload, Mapping) else {}
    if kind == "model_call":
        model = _model(payload)
        return f"chat {model}" if model else "chat"
    if kind == "tool_call":
        tool = payload.get("tool")
        return f"execute_tool {tool}" if isinstance(tool, str) and tool else "execute_tool"
    return f"pollard {kind}"


def node_attributes(node: Any) -> dict[str, AttributeValue]:
    """The span attributes of a node: GenAI conventions plus ``pollard.*``; never content.

    Args:
        node: A ``pollard.Node``.

    Returns:
        Attribute names to primitive values.
    """
    row: ViewNode = view_node(node, 0)
    payload = node.payload if isinstance(node.payload, Mapping) else {}
    meta = node.meta if isinstance(node.meta, Mapping) else {}
    attrs: dict[str, AttributeValue] = {
        "pollard.node.id": row.id,
        "pollard.node.kind": row.kind,
        "pollard.node.attempt": row.attempt,
        "pollard.node.pruned": row.pruned,
    }
    if row.parent:
        attrs["pollard.parent.id"] = row.parent
    digest = getattr(node, "result_digest", None)
    if isinstance(digest, str) and digest:
        attrs["pollard.result.digest"] = digest
    registry = payload.get("registry_digest", meta.get("registry_digest"))
    if isinstance(registry, str) and registry:
        attrs["pollard.registry.digest"] = registry
    if row.redacted:
        attrs["pollard.node.redacted"] = True
    if row.dry_run:
        attrs["pollard.node.dry_run"] = True
    if row.kind == "root" and row.label:
        attrs["pollard.run.label"] = row.label
    for meter, amount in row.charges.items():
        attrs[f"pollard.charge.{meter}"] = _number(amount)
    for meter, amount in row.avoided.items():
        attrs[f"pollard.avoided.{meter}"] = _number(amount)
    if row.refusal is not None:
        for key in ("reason", "meter", "blocked_kind"):
            if key in row.refusal:
                attrs[f"pollard.refusal.{key}"] = row.refusal[key]
        attrs["error.type"] = "pollard.refusal"
    if row.kind == "model_call":
        attrs["gen_ai.operation.name"] = "chat"
        model = _model(payload)
        if model:
            attrs["gen_ai.request.model"] = model
        provider = _provider(payload, model)
        if provider:
            attrs["gen_ai.provider.name"] = provider
        result = node.result if isinstance(node.result, Mapping) else {}
        response_model = result.get("model")
        if isinstance(response_model, str) and response_model:
            attrs["gen_ai.response.model"] = response_model
        inp, out = _usage(node)
        if inp is not None:
            attrs["gen_ai.usage.input_tokens"] = inp
        if out is not None:
            attrs["gen_ai.usage.output_tokens"] = out
        attrs.update(_cache_usage(node))
        reason = _finish_reason(node)
        if reason is not None:
            # A sequence in the conventions; OpenTelemetry takes a tuple of strings.
            attrs["gen_ai.response.finish_reasons"] = (reason,)
    elif row.kind == "tool_call":
        attrs["gen_ai.operation.name"] = "execute_tool"
        tool = payload.get("tool")
        if isinstance(tool, str) and tool:
            attrs["gen_ai.tool.name"] = tool
        version = payload.get("version")
        if isinstance(version, str) and version:
            attrs["pollard.tool.version"] = version
    return attrs


def _ns(moment: datetime) -> int:
    micros = (moment - _EPOCH) // _MICROSECOND
    return int(micros) * 1000


def node_times(node: Any) -> tuple[int, int] | None:
    """``(start_ns, end_ns)`` from the recorded ``created_at`` and ``duration_s``, if recorded.

    A step's ``created_at`` is stamped when it starts executing and ``duration_s`` measures the
    execution, so the span runs from ``created_at`` to ``created_at + duration_s``.
    """
    meta = node.meta if isinstance(node.meta, Mapping) else {}
    created = meta.get("created_at")
    moment = parse_timestamp(created if isinstance(created, str) else None)
    if moment is None:
        return None
    start = _ns(moment)
    duration = meta.get("duration_s")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0:
        duration = 0
    return start, start + round(duration * 1e9)


def _span_kind(kind: str) -> SpanKind:
    return SpanKind.CLIENT if kind == "model_call" else SpanKind.INTERNAL


def _emit(
    tracer: trace.Tracer,
    node: Any,
    parent: SpanContext | None,
    times: tuple[int, int] | None,
) -> SpanContext:
    attrs = node_attributes(node)
    context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent is not None else None
    start, end = times if times is not None else (None, None)
    span = tracer.start_span(
        span_name(node),
        context=context,
        kind=_span_kind(str(attrs["pollard.node.kind"])),
        attributes=attrs,
        start_time=start,
    )
    if "pollard.refusal.reason" in attrs:
        reason = attrs["pollard.refusal.reason"]
        meter = attrs.get("pollard.refusal.meter")
        span.set_status(
            Status(StatusCode.ERROR, f"refused: {reason}" + (f":{meter}" if meter else ""))
        )
    span.end(end_time=end)
    return span.get_span_context()


def export_spans(store: Store, root_id: str, tracer: trace.Tracer) -> int:
    """Export the recorded subtree under ``root_id`` as nested spans.

    Each node becomes one span, parented to its tree parent's span. Step spans keep their
    recorded times; the top span covers the whole subtree (its first start to its last end).

    Args:
        store: The store holding the run.
        root_id: The top of the subtree (usually a run root).
        tracer: A tracer from your configured ``TracerProvider``.

    Returns:
        The number of spans emitted.

    Raises:
        KeyError: ``root_id`` is not in the store.
    """
    nodes = list(store.walk(root_id))
    if not nodes:
        return 0
    times = [node_times(node) for node in nodes]
    top = nodes[0]
    known = [t for t in times if t is not None]
    if known:
        own = times[0]
        start = min(t[0] for t in known) if own is None else min(own[0], *(t[0] for t in known))
        times[0] = (start, max(t[1] for t in known))
    contexts: dict[str, SpanContext] = {}
    for node, span_times in zip(nodes, times, strict=False):
        parent = contexts.get(node.parent) if node is not top and node.parent else None
        contexts[node.id] = _emit(tracer, node, parent, span_times)
    return len(nodes)


def live_span_hook(tracer: trace.Tracer) -> Callable[[Any], None]:
    """Return an ``on_node`` callback that emits one span per newly stored node.

    A node's span is parented to the span of its parent node when that span was emitted by the
    same hook (the last 10,000 are remembered); otherwise it starts a new trace. Every span
    carries ``pollard.parent.id`` either way, so the tree can be rebuilt from attributes.

    Args:
        tracer: A tracer from your configured ``TracerProvider``.

    Returns:
        A thread-safe callable for ``Runtime(on_node=...)``.

    Example:
        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> from pollard import Runtime
        >>> tracer = TracerProvider().get_tracer("demo")
        >>> runtime = Runtime(on_node=live_span_hook(tracer))
    """
    parents: OrderedDict[str, SpanContext] = OrderedDict()
    lock = threading.Lock()

    def on_node(node: Any) -> None:
        with lock:
            parent = parents.get(node.parent) if node.parent else None
        context = _emit(tracer, node, parent, node_times(node))
        with lock:
            parents[node.id] = context
            while len(parents) > _LIVE_PARENTS_MAX:
                parents.popitem(last=False)

    return on_node
