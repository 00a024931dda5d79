"""Why the cache missed: the changed part of the prefix, from the environment fingerprints."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pollux import Config, Environment, Input, RetryPolicy, Source, ToolDeclaration, interact
from pollux._engine.cache_miss import PREFIXES, PrefixRegistry
from pollux.testing import Emulator

POLICY = "policy " * 1500
LOOKUP = ToolDeclaration(
    "lookup",
    description="Look a term up.",
    parameters={"type": "object", "properties": {"term": {"type": "string"}}},
)
CLOCK = ToolDeclaration(
    "clock",
    description="The time.",
    parameters={"properties": {"zone": {"type": "string"}}, "type": "object"},
)


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    # The registry is process-wide; each test starts from an empty one.
    registry = PrefixRegistry()
    monkeypatch.setattr(PREFIXES, "_entries", registry._entries)
    monkeypatch.setattr(PREFIXES, "_providers", registry._providers)


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url("anthropic"))
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


def config(provider: str, model: str) -> Config:
    return Config(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        api_key="offline",
        retry=RetryPolicy(max_attempts=1),
    )


async def test_reordered_tools_still_hit_and_changed_instructions_are_named(emu: Emulator) -> None:
    cfg = config("anthropic", "claude-sonnet-4-5")
    first = await interact(
        Environment(instructions=POLICY, tools=(LOOKUP, CLOCK)), Input("Q1"), config=cfg
    )
    assert (first.usage.cache_write_tokens or 0) > 1024
    # The same tools in another order: the same canonical prefix, so a read, not a write.
    reordered = await interact(
        Environment(instructions=POLICY, tools=(CLOCK, LOOKUP)), Input("Q2"), config=cfg
    )
    assert (reordered.usage.cached_tokens or 0) > 1024
    assert "cache_miss" not in reordered.diagnostics.raw
    # One word of the instructions changed: the cache misses and pollux says why.
    edited = await interact(
        Environment(instructions=POLICY + "amended", tools=(LOOKUP, CLOCK)),
        Input("Q3"),
        config=cfg,
    )
    assert not edited.usage.cached_tokens
    miss = edited.diagnostics.raw["cache_miss"]
    assert miss["changed"] == ["instructions"]
    assert "instructions" in miss["message"] and miss["hint"]


async def test_a_changed_source_and_a_changed_tool_schema_are_named(emu: Emulator) -> None:
    cfg = config("openai", "gpt-5-nano")
    doc = Source.from_text("The archive records every voyage of the Argo. " * 400)
    other = Source.from_text("The archive records every voyage of the Nautilus. " * 400)
    env = Environment(sources=(doc,), tools=(LOOKUP,))
    await interact(env, Input("Q1"), config=cfg)  # implicit caching: stored, not yet proven
    hit = await interact(env, Input("Q2"), config=cfg)
    assert (hit.usage.cached_tokens or 0) > 1024  # proven cacheable
    moved = await interact(Environment(sources=(other,), tools=(LOOKUP,)), Input("Q3"), config=cfg)
    assert moved.diagnostics.raw["cache_miss"]["changed"] == ["source[0]"]
    schema = ToolDeclaration(
        "lookup",
        description="Look a term up.",
        parameters={"type": "object", "properties": {"word": {"type": "string"}}},
    )
    reshaped = await interact(Environment(sources=(doc,), tools=(schema,)), Input("Q4"), config=cfg)
    assert reshaped.diagnostics.raw["cache_miss"]["changed"] == ["tools (lookup)"]


async def test_an_unchanged_prefix_that_misses_says_the_entry_is_gone(emu: Emulator) -> None:
    cfg = config("anthropic", "claude-sonnet-4-5")
    env = Environment(instructions=POLICY)
    await interact(env, Input("Q1"), config=cfg)
    emu.advance(400)  # past the 5-minute TTL on the provider; pollux's expectation is wall-clock
    late = await interact(env, Input("Q2"), config=cfg)
    # Written again (the entry expired): a write is no miss to explain.
    assert (late.usage.cache_write_tokens or 0) > 1024
    assert "cache_miss" not in late.diagnostics.raw
