"""OpenTelemetry: recorded trees as GenAI spans with real times and no content."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pollard import MemoryStore, Runtime
from pollard.otel import export_spans, live_span_hook

from ._trees import SECRET_PROMPT, SECRET_RESULT, SECRET_TOKEN, build_sample


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def _ns(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _by_node(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {str(span.attributes["pollard.node.id"]): span for span in spans}  # type: ignore[index]


def _no_content(spans: tuple[ReadableSpan, ...]) -> None:
    for span in spans:
        text = repr(dict(span.attributes or {})) + span.name + repr(span.status.description)
        for secret in (SECRET_PROMPT, SECRET_RESULT, SECRET_TOKEN, "quarterly"):
            assert secret not in text


def test_export_rebuilds_the_tree_with_genai_attributes(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = MemoryStore()
    sample = build_sample(store)
    count = export_spans(store, sample.root, provider.get_tracer("test"))
    spans = exporter.get_finished_spans()
    assert count == len(spans) == 8
    by = _by_node(spans)

    model = by[sample.model]
    assert model.name == "chat openai/gpt-5.5"
    assert model.kind is SpanKind.CLIENT
    attrs = dict(model.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "openai/gpt-5.5"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.response.model"] == "gpt-5.5-2026"
    assert attrs["gen_ai.usage.input_tokens"] == 40
    assert attrs["gen_ai.usage.output_tokens"] == 20
    assert attrs["pollard.charge.tokens"] == 60
    assert attrs["pollard.charge.usd"] == pytest.approx(0.0031)
    assert attrs["pollard.parent.id"] == sample.root

    tool = by[sample.tool]
    assert tool.name == "execute_tool send"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"  # type: ignore[index]
    assert tool.attributes["gen_ai.tool.name"] == "send"  # type: ignore[index]
    assert tool.attributes["pollard.node.redacted"] is True  # type: ignore[index]

    refusal = by[sample.refusal]
    assert refusal.name == "pollard refusal"
    assert refusal.status.status_code is StatusCode.ERROR
    assert refusal.attributes["pollard.refusal.reason"] == "budget"  # type: ignore[index]
    assert refusal.attributes["pollard.refusal.meter"] == "tokens"  # type: ignore[index]
    assert by[sample.pruned].attributes["pollard.node.pruned"] is True  # type: ignore[index]
    assert by[sample.left].attributes["pollard.avoided.tokens"] == 75  # type: ignore[index]

    # Nesting follows the tree: one trace, each span's parent is its node's parent span.
    assert len({span.context.trace_id for span in spans}) == 1
    for node_id, span in by.items():
        parent_id = store.get(node_id).parent
        if parent_id is None:
            assert span.parent is None
        else:
            assert span.parent is not None
            assert span.parent.span_id == by[parent_id].context.span_id
    _no_content(spans)


def test_spans_carry_the_recorded_start_and_end_times(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = MemoryStore()
    sample = build_sample(store)
    export_spans(store, sample.root, provider.get_tracer("test"))
    by = _by_node(exporter.get_finished_spans())
    model = by[sample.model]
    assert model.start_time == _ns("2026-01-02T03:04:06.000000Z")
    assert model.end_time == model.start_time + 1_500_000_000
    refusal = by[sample.refusal]
    assert refusal.start_time == refusal.end_time == _ns("2026-01-02T03:04:11.000000Z")
    # The root span covers the whole run: from its own start to the last step's end.
    root = by[sample.root]
    assert root.start_time == _ns("2026-01-02T03:04:05.000000Z")
    assert root.end_time == _ns("2026-01-02T03:04:11.000000Z")


def test_the_live_hook_emits_one_span_per_new_node(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    runtime = Runtime(on_node=live_span_hook(provider.get_tracer("live")))
    with runtime.run("live") as run:
        run.model_call(
            {
                "model": "anthropic/claude-x",
                "messages": [{"role": "user", "content": SECRET_PROMPT}],
            },
            fn=lambda _p: {"text": SECRET_RESULT, "usage": {"input_tokens": 3, "output_tokens": 4}},
        )
        run.note({"status": "done"})
    runtime.close()
    spans = exporter.get_finished_spans()
    names = [span.name for span in spans]
    assert names == ["pollard root", "chat anthropic/claude-x", "pollard note"]
    root, model, note = spans
    assert model.parent is not None and model.parent.span_id == root.context.span_id
    assert note.parent is not None and note.parent.span_id == model.context.span_id
    assert model.attributes["gen_ai.provider.name"] == "anthropic"  # type: ignore[index]
    assert model.attributes["gen_ai.usage.output_tokens"] == 4  # type: ignore[index]
    assert model.attributes["pollard.charge.tokens"] == 7  # type: ignore[index]
    assert model.end_time is not None and model.start_time is not None
    assert model.end_time >= model.start_time
    recorded = run.store.get(str(model.attributes["pollard.node.id"]))  # type: ignore[index]
    assert model.start_time == _ns(recorded.meta["created_at"])
    _no_content(spans)


def test_a_missing_extra_names_the_install_command() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import pollard.otel\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 'pip install "pollard[otel]"' in done.stdout
