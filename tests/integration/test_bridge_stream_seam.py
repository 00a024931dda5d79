"""`governed_stream` on the call seam: one step per streamed call, replay without a provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import governed_stream
from pollux import Config, Environment, Event, Input, Output, ProviderCall, Source, intercept_calls
from pollux import run as pollux_run
from pollux.testing import Emulator
from tests.integration._answers import answer

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)


class Watcher:
    """An outer interceptor: sees every call that reaches the seam, then calls through."""

    def __init__(self) -> None:
        self.streamed: list[str | None] = []
        self.called: list[str | None] = []

    async def call(self, call: ProviderCall, proceed: Callable[[], Awaitable[Output]]) -> Output:
        self.called.append(call.input.content)
        return await proceed()

    async def stream(
        self, call: ProviderCall, proceed: Callable[[], AsyncIterator[Event]]
    ) -> AsyncIterator[Event]:
        self.streamed.append(call.input.content)
        async for event in proceed():
            yield event


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


async def test_a_governed_stream_passes_the_seam_and_replays_without_uploading(
    tmp_path: Path, emu: Emulator
) -> None:
    config = Config(provider="openai", model="gpt-5-nano", api_key="offline")
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4\n" + b"0" * 2048)
    env = Environment(sources=[Source.from_file(pdf)])
    db = tmp_path / "runs.db"
    watcher = Watcher()
    async with AsyncRuntime(db) as rt:
        run = rt.run("s", budget=Budget(steps=5))
        with intercept_calls(watcher):
            live = [e async for e in governed_stream(run, env, Input("Summarize"), config=config)]
        spent = run.report()["spent"]
    assert watcher.streamed == ["Summarize"]  # the outer interceptor saw the streamed call
    assert spent["steps"] == 1
    routes = [r.route for r in emu.requests]
    assert routes.count("openai.files.create") == 1
    assert routes[-1] == "openai.files.delete"
    emu.clear_requests()
    async with AsyncRuntime(db, mode="replay") as rt:
        replayed = [
            e async for e in governed_stream(rt.run("s"), env, Input("Summarize"), config=config)
        ]
    assert emu.requests == []  # served from the recording: no upload, no provider call
    assert answer(replayed) == answer(live)


async def test_the_consumers_own_calls_between_events_are_not_governed_by_the_stream() -> None:
    watcher = Watcher()
    async with AsyncRuntime() as rt:
        run = rt.run("s")
        with intercept_calls(watcher):
            async for event in governed_stream(run, Environment(), Input("Tell me"), config=MOCK):
                if event.type == "start":
                    aside = await pollux_run("An aside?", config=MOCK)
        steps = [n for n in rt.store.children(run.root_id) if n.kind.value == "model_call"]
    assert aside.text is not None
    assert watcher.called == ["An aside?"]  # reached the seam as the user's own call ...
    assert len(steps) == 1  # ... and was not recorded as a step of the stream
    payload: Any = steps[0].payload
    assert payload["api"] == "stream"
