"""An OpenAI continuation does not resend sources, so changed sources are refused, not dropped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pollux import Config, ConfigurationError, Environment, Input, Session, Source
from pollux.testing import Emulator, Reply


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


@pytest.fixture
def config(emu: Emulator) -> Config:
    return Config(provider="openai", model="gpt-5-nano", api_key="sk-test")


async def test_same_sources_continue_and_changed_sources_are_refused(
    emu: Emulator, config: Config
) -> None:
    emu.script("openai.responses", Reply("First."), Reply("Second."))
    env = Environment(sources=[Source.from_text("Chapter one.")])
    async with Session(config) as session:
        first = await session.interact(env, Input("Summarize."))
        # An equal Environment (same content) continues normally.
        again = Environment(sources=[Source.from_text("Chapter one.")])
        second = await session.interact(again, Input("More?", continuation=first.continuation))
        assert second.text == "Second."
        created = len(emu.requests_for("openai.responses.create"))
        for changed in (
            Environment(sources=[Source.from_text("Chapter two.")]),
            Environment(sources=[Source.from_text("Chapter one."), Source.from_text("Two.")]),
            Environment(),
        ):
            with pytest.raises(ConfigurationError, match="sources changed") as info:
                await session.interact(changed, Input("And now?", continuation=second.continuation))
            assert info.value.hint
    assert len(emu.requests_for("openai.responses.create")) == created


async def test_sources_added_to_a_sourceless_conversation_are_refused(
    emu: Emulator, config: Config
) -> None:
    emu.script("openai.responses", Reply("Hi."))
    async with Session(config) as session:
        first = await session.interact(Environment(), Input("Hello"))
        with pytest.raises(ConfigurationError, match="sources changed"):
            await session.interact(
                Environment(sources=[Source.from_text("New doc.")]),
                Input("Read this.", continuation=first.continuation),
            )
