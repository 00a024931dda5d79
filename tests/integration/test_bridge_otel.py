"""pollux's live spans and pollard's spans (live and exported) use the same GenAI names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pollard import AsyncRuntime
from pollard.adapters.pollux import governed_run
from pollard.otel import export_spans, live_span_hook
from pollux import Config, RetryPolicy
from pollux.testing import Emulator

SHARED = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.response.finish_reasons",
)


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


async def test_pollux_and_pollard_spans_agree_on_every_genai_attribute(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer = trace.get_tracer_provider().get_tracer("test")
    with Emulator() as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
        config = Config(
            provider="anthropic",
            model="claude-sonnet-4-5",
            api_key="offline",
            retry=RetryPolicy(max_attempts=1),
        )
        async with AsyncRuntime(on_node=live_span_hook(tracer)) as rt:
            run = rt.run("otel")
            await governed_run(run, "Q", config=config, instructions="policy " * 1500)
            node = run.cursor
            live = [dict(s.attributes or {}) for s in exporter.get_finished_spans()]
            exporter.clear()
            export_spans(rt.store, run.root_id, tracer)
            exported = [
                s
                for s in exporter.get_finished_spans()
                if (s.attributes or {}).get("pollard.node.id") == node.id
            ]
    # pollux's own span (cost on it) and pollard's live span of the node.
    (own,) = [attrs for attrs in live if "pollux.cost.usd" in attrs]
    pollard_live = [attrs for attrs in live if attrs.get("pollard.node.id") == node.id]
    assert len(pollard_live) == 1 and len(exported) == 1
    for attrs in (pollard_live[0], dict(exported[0].attributes or {})):
        for name in SHARED:
            assert attrs[name] == own[name], name
