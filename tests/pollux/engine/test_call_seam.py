"""The call seam: interceptors see each planned provider call and call through, serve or refuse.

Through the public API and, for uploads, through the official OpenAI SDK against the emulator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from pollux import (
    APIError,
    Config,
    ConfigurationError,
    Environment,
    Event,
    Input,
    InternalError,
    Output,
    ProviderCall,
    RetryPolicy,
    Source,
    interact,
    intercept_calls,
    run,
    run_many,
    stream,
)
from pollux.interaction import StreamInterceptor
from pollux.testing import Emulator, ErrorResponse

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)
Proceed = Callable[[], Awaitable[Output]]


class Recorder:
    def __init__(self, serve: dict[int, Output] | None = None) -> None:
        self.calls: list[ProviderCall] = []
        self.serve = serve or {}

    async def call(self, call: ProviderCall, proceed: Proceed) -> Output:
        self.calls.append(call)
        if call.index in self.serve:
            return self.serve[call.index]
        return await proceed()


async def test_interceptor_sees_the_planned_request_and_calls_through() -> None:
    recorder = Recorder()
    with intercept_calls(recorder):
        out = await run("Hello?", config=MOCK, instructions="Be brief.", max_tokens=32)
    assert out.text is not None and "Hello?" in out.text
    (call,) = recorder.calls
    assert (call.provider, call.model, call.use_mock) == ("openai", "gpt-5-nano", True)
    assert call.input.content == "Hello?"
    assert call.environment.instructions == "Be brief."
    assert call.requirements.max_tokens == 32
    assert (call.index, call.count) == (0, 1)


async def test_a_served_output_replaces_the_provider_call() -> None:
    served = Output(text="from the interceptor")
    with intercept_calls(Recorder(serve={1: served})):
        results = await run_many(["A?", "B?", "C?"], config=MOCK)
    assert results.answers[1] == "from the interceptor"
    assert "A?" in results.answers[0] and "C?" in results.answers[2]


async def test_outside_the_block_nothing_is_intercepted() -> None:
    recorder = Recorder()
    with intercept_calls(recorder):
        pass
    await run("Hello?", config=MOCK)
    assert recorder.calls == []


async def test_an_api_error_refuses_one_prompt_and_keeps_the_others() -> None:
    class Refuse:
        async def call(self, call: ProviderCall, proceed: Proceed) -> Output:
            if call.index == 0:
                raise APIError("refused by policy", hint="Ask something else.")
            return await proceed()

    with intercept_calls(Refuse()):
        results = await run_many(["A?", "B?"], config=MOCK)
        with pytest.raises(APIError, match="refused by policy"):
            await run("A?", config=MOCK)
    assert results.status == "partial"
    assert results.outputs[0].metrics.completion_status == "error"
    assert results.answers[1] is not None and "B?" in results.answers[1]


async def test_another_exception_ends_the_whole_call() -> None:
    class Boom:
        async def call(self, call: ProviderCall, proceed: Proceed) -> Output:
            raise RuntimeError("stop everything")

    with intercept_calls(Boom()), pytest.raises(RuntimeError, match="stop everything"):
        await run_many(["A?", "B?"], config=MOCK)


async def test_nested_interceptors_run_outermost_first() -> None:
    order: list[str] = []

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        async def call(self, call: ProviderCall, proceed: Proceed) -> Output:
            order.append(self.name)
            return await proceed()

    with intercept_calls(Named("outer")), intercept_calls(Named("inner")):
        await interact(Environment(), Input("Hi"), config=MOCK)
    assert order == ["outer", "inner"]


async def test_an_interceptor_must_return_an_output() -> None:
    class Wrong:
        async def call(self, call: ProviderCall, proceed: Proceed) -> object:
            return "text"

    with intercept_calls(Wrong()), pytest.raises(InternalError) as caught:  # type: ignore[arg-type]
        await run("A?", config=MOCK)
    assert caught.value.hint


def test_an_object_without_call_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigurationError) as caught, intercept_calls(object()):  # type: ignore[arg-type]
        pass
    assert "call(self, call, proceed)" in (caught.value.hint or "")


# -- uploads happen once, and only when a call goes through ----------------------------------------


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


@pytest.fixture
def openai(emu: Emulator) -> Config:
    return Config(
        provider="openai",
        model="gpt-5-nano",
        api_key="sk-test",
        retry=RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.005),
        request_timeout_s=5.0,
    )


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF-1.4\n" + b"0" * 2048)
    return path


async def test_intercepted_fan_out_uploads_once(emu: Emulator, openai: Config, pdf: Path) -> None:
    recorder = Recorder()
    with intercept_calls(recorder):
        results = await run_many(
            ["Q1?", "Q2?", "Q3?"], sources=[Source.from_file(pdf)], config=openai
        )
    assert results.status == "ok"
    routes = [r.route for r in emu.requests]
    assert routes.count("openai.files.create") == 1
    assert routes.count("openai.responses.create") == 3
    assert routes[-1] == "openai.files.delete"
    assert len(recorder.calls) == 3


async def test_a_fully_served_call_uploads_nothing(
    emu: Emulator, openai: Config, pdf: Path
) -> None:
    serve = {i: Output(text=f"served {i}") for i in range(2)}
    with intercept_calls(Recorder(serve=serve)):
        results = await run_many(["Q1?", "Q2?"], sources=[Source.from_file(pdf)], config=openai)
    assert results.answers == ["served 0", "served 1"]
    assert emu.requests == []


async def test_provider_options_for_another_known_provider_are_ignored(
    emu: Emulator, openai: Config
) -> None:
    out = await run(
        "Hi",
        config=openai,
        provider_options={"openai": {"store": False}, "anthropic": {"top_k": 3}},
    )
    assert out.text is not None
    (body,) = [r.json for r in emu.requests if r.route == "openai.responses.create"]
    assert body["store"] is False and "top_k" not in body
    with pytest.raises(ConfigurationError) as caught:
        await run("Hi", config=openai, provider_options={"nope": {}})
    assert caught.value.hint


# -- streamed calls pass the seam too ------------------------------------------------------------

StreamProceed = Callable[[], AsyncIterator[Event]]


class StreamRecorder(Recorder):
    def __init__(self, timeline: list[Event] | None = None) -> None:
        super().__init__()
        self.timeline = timeline
        self.seen: list[str] = []

    async def stream(self, call: ProviderCall, proceed: StreamProceed) -> AsyncIterator[Event]:
        self.calls.append(call)
        if self.timeline is not None:
            for event in self.timeline:
                yield event
            return
        async for event in proceed():
            self.seen.append(event.type)
            yield event


async def _timeline(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


async def test_a_streamed_call_passes_the_seam_and_done_matches_interact() -> None:
    recorder = StreamRecorder()
    env = Environment(instructions="Be brief.")
    with intercept_calls(recorder):
        timeline = await _timeline(stream(env, Input("Hello?"), config=MOCK, max_tokens=32))
    (call,) = recorder.calls
    assert call.input.content == "Hello?" and call.requirements.max_tokens == 32
    assert (call.index, call.count) == (0, 1)
    assert recorder.seen == [event.type for event in timeline]
    assert timeline[0].type == "start" and timeline[-1].type == "done"
    direct = await interact(env, Input("Hello?"), config=MOCK, max_tokens=32)
    done = timeline[-1].output
    assert done is not None and done.text == direct.text
    assert done.to_jsonable()["usage"] == direct.to_jsonable()["usage"]


async def test_a_served_timeline_makes_no_provider_call(emu: Emulator, openai: Config) -> None:
    served = [
        Event(type="start"),
        Event(type="text_delta", text="rec"),
        Event(type="done", output=Output(text="rec")),
    ]
    with intercept_calls(StreamRecorder(served)):
        timeline = await _timeline(stream(Environment(), Input("Hi"), config=openai))
    assert [e.type for e in timeline] == ["start", "text_delta", "done"]
    assert timeline[-1].output is not None and timeline[-1].output.text == "rec"
    assert emu.requests == []


async def test_a_streamed_call_retries_before_its_first_chunk_under_the_seam(
    emu: Emulator, openai: Config
) -> None:
    emu.script("openai.responses", ErrorResponse(503))
    recorder = StreamRecorder()
    with intercept_calls(recorder):
        timeline = await _timeline(stream(Environment(), Input("Hi"), config=openai))
    done = timeline[-1].output
    assert done is not None and done.diagnostics.raw["attempts"] == 2
    assert [r.route for r in emu.requests].count("openai.responses.create") == 2
    assert recorder.seen[-1] == "done"


async def test_an_interceptor_without_stream_refuses_streamed_calls_with_a_hint() -> None:
    with intercept_calls(Recorder()), pytest.raises(ConfigurationError) as caught:
        await _timeline(stream(Environment(), Input("Hi"), config=MOCK))
    assert "stream(self, call, proceed)" in (caught.value.hint or "")


async def test_a_streamed_refusal_raises_from_the_iterator(emu: Emulator, openai: Config) -> None:
    class Refuse(Recorder):
        async def stream(self, call: ProviderCall, proceed: StreamProceed) -> AsyncIterator[Event]:
            raise APIError("refused by policy", hint="Ask something else.")
            yield Event(type="start")  # pragma: no cover - makes this an async generator

    with intercept_calls(Refuse()), pytest.raises(APIError, match="refused by policy"):
        await _timeline(stream(Environment(), Input("Hi"), config=openai))
    assert emu.requests == []


@pytest.mark.parametrize(
    "timeline",
    [
        [Event(type="start")],
        [Event(type="done", output=Output(text="a")), Event(type="start")],
        [Event(type="done")],
    ],
    ids=["no-done", "event-after-done", "done-without-output"],
)
async def test_an_interceptor_timeline_must_end_in_one_done_with_an_output(
    timeline: list[Event],
) -> None:
    with intercept_calls(StreamRecorder(timeline)), pytest.raises(InternalError) as caught:
        await _timeline(stream(Environment(), Input("Hi"), config=MOCK))
    assert caught.value.hint


def test_stream_interceptor_is_a_typed_protocol() -> None:
    assert isinstance(StreamRecorder(), StreamInterceptor)
    assert not isinstance(Recorder(), StreamInterceptor)
