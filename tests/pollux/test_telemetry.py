"""pollux's own OpenTelemetry spans: GenAI semantic conventions, no content unless opted in.

The spans go to the SDK's in-memory exporter. pollux reads the global tracer provider through
``opentelemetry.trace.get_tracer_provider()``; the tests hand it their provider there (setting
the real global is once per process and would leak spans into every later test).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pollux import Config, Environment, Input, RetryPolicy, interact, run, run_many, stream
from pollux.errors import APIError
from pollux.testing import Emulator, ErrorResponse

MODEL = "claude-sonnet-4-5"
POLICY = "policy " * 1500  # above the model's cache minimum: the first call writes, then reads


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


@pytest.fixture
def anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, Config]]:
    with Emulator() as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
        yield (
            emu,
            Config(
                provider="anthropic",
                model=MODEL,
                api_key="offline",
                retry=RetryPolicy(max_attempts=1),
            ),
        )


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


async def test_every_call_is_a_genai_client_span_with_usage_cache_and_cost(
    spans: InMemorySpanExporter, anthropic: tuple[Emulator, Config]
) -> None:
    _, config = anthropic
    await run("Who were the twins?", config=config, instructions=POLICY, max_tokens=200)
    await run("Why a constellation?", config=config, instructions=POLICY, max_tokens=200)
    written, read = finished(spans)
    assert written.name == f"chat {MODEL}" and written.kind is SpanKind.CLIENT
    attrs = dict(written.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == MODEL
    assert attrs["gen_ai.request.max_tokens"] == 200
    assert attrs["gen_ai.usage.input_tokens"] > 1024
    assert attrs["gen_ai.usage.output_tokens"] > 0
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] > 1024
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert isinstance(attrs["gen_ai.response.id"], str)
    assert attrs["pollux.cost.usd"] > 0
    read_attrs = dict(read.attributes or {})
    assert read_attrs["gen_ai.usage.cache_read.input_tokens"] > 1024
    assert read_attrs["pollux.cache.hit_ratio"] > 0.9
    assert read_attrs["pollux.cache.savings_usd"] > 0
    # No content unless opted in.
    everything = json.dumps(
        {k: str(v) for s in (written, read) for k, v in (s.attributes or {}).items()}
    )
    assert "twins" not in everything and "policy policy" not in everything
    assert not any(k.startswith("gen_ai.input") for k in attrs)


async def test_a_fan_out_is_one_span_per_call(
    spans: InMemorySpanExporter, anthropic: tuple[Emulator, Config]
) -> None:
    _, config = anthropic
    await run_many(["a", "b", "c"], config=config)
    assert [s.name for s in finished(spans)] == [f"chat {MODEL}"] * 3


async def test_a_stream_records_time_to_first_token_as_an_event(
    spans: InMemorySpanExporter, anthropic: tuple[Emulator, Config]
) -> None:
    _, config = anthropic
    events = [e async for e in stream(Environment(), Input("Tell me"), config=config)]
    assert events[-1].type == "done"
    (span,) = finished(spans)
    assert dict(span.attributes or {})["pollux.stream"] is True
    (first,) = [e for e in span.events if e.name == "pollux.first_token"]
    assert dict(first.attributes or {})["pollux.time_to_first_token_s"] >= 0
    assert dict(span.attributes or {})["gen_ai.usage.output_tokens"] > 0


async def test_a_failed_call_is_an_error_span(
    spans: InMemorySpanExporter, anthropic: tuple[Emulator, Config]
) -> None:
    emu, config = anthropic
    emu.script("anthropic", ErrorResponse(400))
    with pytest.raises(APIError):
        await interact(Environment(), Input("x"), config=config)
    (span,) = finished(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"]


async def test_content_goes_on_the_span_only_when_opted_in(
    spans: InMemorySpanExporter,
    anthropic: tuple[Emulator, Config],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, config = anthropic
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    out = await run("Who were the twins?", config=config, instructions="Be brief.")
    attrs = dict(finished(spans)[0].attributes or {})
    assert json.loads(str(attrs["gen_ai.input.messages"]))[0]["parts"][0]["content"] == (
        "Who were the twins?"
    )
    assert json.loads(str(attrs["gen_ai.system_instructions"]))[0]["content"] == "Be brief."
    assert json.loads(str(attrs["gen_ai.output.messages"]))[0]["parts"][0]["content"] == out.text


async def test_no_provider_set_means_no_spans(anthropic: tuple[Emulator, Config]) -> None:
    # The process default is the API's proxy provider: pollux emits nothing through it.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    from pollux import _telemetry

    assert _telemetry._tracer() is None


def test_opentelemetry_is_optional_and_never_imported_by_import_pollux() -> None:
    code = (
        "import sys, asyncio\n"
        "import pollux\n"
        "assert not any(m.startswith('opentelemetry') for m in sys.modules), 'imported'\n"
        "sys.modules['opentelemetry'] = None  # as if not installed\n"
        "sys.modules['opentelemetry.trace'] = None\n"
        "cfg = pollux.Config(provider='openai', model='gpt-5-nano', use_mock=True)\n"
        "print(asyncio.run(pollux.run('hi', config=cfg)).text[:7])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


async def test_each_collected_deferred_answer_is_a_span_from_submit_to_completion(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pollux import collect_deferred, defer
    from pollux.errors import DeferredNotReadyError
    from pollux.testing import Reply

    with Emulator() as emu:
        monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
        monkeypatch.setenv("OPENAI_API_KEY", "offline")
        config = Config(
            provider="openai", model="gpt-5.4", api_key="offline", retry=RetryPolicy(max_attempts=1)
        )
        emu.script(
            "openai.responses", Reply("one", input_tokens=40), ErrorResponse(400, message="no")
        )
        handle = await defer(["Q1", "Q2"], config=config, max_tokens=64)
        with pytest.raises(DeferredNotReadyError):
            await collect_deferred(handle)
        assert finished(spans) == []  # nothing collected, nothing recorded
        emu.advance(120)
        answers = await collect_deferred(handle)
    ok, failed = sorted(finished(spans), key=lambda s: s.attributes["pollux.deferred.request_id"])
    assert answers.outputs[0].text == "one"
    for span in (ok, failed):
        assert span.name == "chat gpt-5.4" and span.kind is SpanKind.CLIENT
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert span.attributes["gen_ai.request.model"] == "gpt-5.4"
        assert span.attributes["pollux.deferred.job_id"] == handle.job_id
        assert span.start_time == int(handle.submitted_at * 1e9)  # submitted ...
        assert span.end_time > span.start_time  # ... to completed, on the provider's clock
    assert ok.attributes["gen_ai.usage.input_tokens"] == 40
    assert ok.attributes["pollux.cost.usd"] == answers.outputs[0].metrics.cost_usd
    assert ok.status.status_code is not StatusCode.ERROR
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"]
    assert "Q1" not in json.dumps(dict(ok.attributes))  # no content without the opt-in
