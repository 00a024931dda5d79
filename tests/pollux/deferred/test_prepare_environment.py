"""prepare_environment(): checks before I/O, sources prepared once and reused by later calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pollux import (
    CachePolicy,
    Config,
    ConfigurationError,
    Environment,
    Input,
    RetryPolicy,
    Session,
    Source,
    ToolDeclaration,
    interact,
    prepare_environment,
    run_many,
    stream,
)
from pollux._engine.prepared import MAX_AGE_S, PreparedEnvironments
from pollux.providers.base import PreparedSources
from pollux.testing import Emulator

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.005)


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


@pytest.fixture
def config(emu: Emulator) -> Config:
    return Config(provider="openai", model="gpt-5-nano", api_key="sk-test", retry=FAST_RETRY)


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    path = tmp_path / "paper.pdf"
    path.write_bytes(b"%PDF-1.4\n% tiny\n%%EOF\n")
    return path


def count(emu: Emulator, route: str) -> int:
    return len(emu.requests_for(route))


async def test_uploads_once_for_many_calls(emu: Emulator, config: Config, pdf: Path) -> None:
    async with Session(config) as session:
        env = await session.prepare_environment(
            sources=[Source.from_file(pdf)], instructions="Be brief.", metadata={"team": "r"}
        )
        assert isinstance(env, Environment)
        assert env.instructions == "Be brief." and env.metadata == {"team": "r"}
        assert count(emu, "openai.files.create") == 1

        first = await session.run_many(["Q1?", "Q2?"], environment=env)
        second = await session.run_many(["Q3?"], environment=env)
        single = await session.interact(env, Input("Q4?"))
        events = [event async for event in session.stream(env, Input("Q5?"))]
        assert first.status == second.status == "ok" and single.text
        assert events[-1].type == "done"
        assert count(emu, "openai.files.create") == 1  # never uploaded again
        assert count(emu, "openai.files.delete") == 0  # kept while the Session is open
        uploaded = {
            part["file_id"]
            for request in emu.requests_for("openai.responses.create")
            for item in request.json["input"]
            for part in item["content"]
            if part.get("type") == "input_file"
        }
        assert len(uploaded) == 1

        # The same sources in a new Environment are not the prepared one: per-call uploads.
        await session.run_many(["Q6?"], sources=[Source.from_file(pdf)])
        assert count(emu, "openai.files.create") == 2
        assert count(emu, "openai.files.delete") == 1
    # Closing the Session releases the prepared upload.
    assert count(emu, "openai.files.delete") == 2


async def test_module_level_reuse_in_one_loop(emu: Emulator, config: Config, pdf: Path) -> None:
    env = await prepare_environment(sources=[Source.from_file(pdf)], config=config)
    await run_many(["a?", "b?"], environment=env, config=config)
    await run_many(["c?"], environment=env, config=config)
    await interact(env, Input("d?"), config=config)
    async for _event in stream(env, Input("e?"), config=config):
        pass
    assert count(emu, "openai.files.create") == 1
    assert count(emu, "openai.responses.create") == 5


async def test_cache_policy_is_rejected_before_io(emu: Emulator, config: Config) -> None:
    with pytest.raises(ConfigurationError, match="persistent caches") as caught:
        await prepare_environment(
            sources=[Source.from_text("x")], cache=CachePolicy(ttl_seconds=3600), config=config
        )
    # The hint named Gemini alone; Anthropic takes a CachePolicy too (its prompt-cache TTL).
    assert "'gemini'" in (caught.value.hint or "") and "'anthropic'" in (caught.value.hint or "")
    assert emu.requests == []


async def test_other_preferences_are_kept_on_the_environment(config: Config) -> None:
    env = await prepare_environment(cache="auto", config=config)
    assert env.cache == "auto" and env.sources == ()
    off = await prepare_environment(cache="none", config=config)
    assert off.cache == "none"


async def test_unsupported_sources_fail_before_io(emu: Emulator, config: Config) -> None:
    with pytest.raises(ConfigurationError, match="YouTube"):
        await prepare_environment(
            sources=[Source.from_youtube("https://youtu.be/abc")], config=config
        )
    with pytest.raises(ConfigurationError, match="one Source"):
        await prepare_environment(sources=Source.from_text("x"), config=config)  # type: ignore[arg-type]
    assert emu.requests == []


async def test_mock_tools_and_environment_checks() -> None:
    mock = Config(provider="openai", model="m", use_mock=True)
    tool = ToolDeclaration(name="lookup", parameters={"type": "object", "properties": {}})
    env = await prepare_environment(sources=[Source.from_text("ctx")], tools=[tool], config=mock)
    out = await interact(env, Input("Use the tool."), config=mock)
    assert out.tool_calls and out.tool_calls[0].name == "lookup"
    no_tools = Config(provider="openai", model="m", use_mock=True, capabilities={"uploads": False})
    with pytest.raises(ConfigurationError, match="local file sources"):
        await prepare_environment(
            sources=[Source.from_bytes(b"x", mime_type="application/pdf")], config=no_tools
        )


def test_kept_sources_expire() -> None:
    now = [0.0]
    kept = PreparedEnvironments(clock=lambda: now[0])
    env = Environment(sources=[Source.from_text("x")])
    prepared = PreparedSources(sources=tuple(env.sources))
    kept.keep(env, prepared)
    assert kept.lookup(env) is prepared
    assert kept.lookup(Environment(sources=env.sources)) is None  # identity, not equality
    now[0] = MAX_AGE_S + 1
    assert kept.lookup(env) is None
    assert kept.drain() == [prepared] and len(kept) == 0


async def test_kept_view_delegates_beyond_the_protocol() -> None:
    from pollux._engine.prepared import KeptSourcesProvider
    from pollux.providers.mock import MockProvider

    closed: list[bool] = []

    class Recording(MockProvider):
        async def aclose(self) -> None:
            closed.append(True)

    provider = Recording(Config(provider="openai", model="m", use_mock=True))
    kept = PreparedSources()
    view = KeptSourcesProvider(provider, kept)
    assert view.model == "m"  # not part of the Provider protocol: reached through the view
    assert view.wrapped is provider and view.name == provider.name
    assert await view.prepare_sources(()) is kept
    await view.release_sources(kept)
    await view.aclose()
    assert closed == []  # the view never closes the Session's provider
