"""Persistent context caches (CachePolicy) on Gemini, through the SDK against the emulator."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pollux import (
    Config,
    ConfigurationError,
    Environment,
    Input,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
    interact,
    prepare_environment,
    run_many,
)
from pollux.interaction.environment import CachePolicy
from pollux.providers.gemini import delete_context_cache, refresh_context_cache
from pollux.providers.gemini.caching import REGISTRY, display_name
from pollux.testing import Emulator, ErrorResponse, Reply, ToolCall

from .conftest import bodies, routes

LONG = Source.from_text("word " * 1500, identifier="long notes")
TOOL = ToolDeclaration(
    name="lookup", parameters={"type": "object", "properties": {"q": {"type": "string"}}}
)


async def test_prepare_environment_creates_one_cache_and_calls_send_it(
    emu: Emulator, config: Config
) -> None:
    env = await prepare_environment(
        sources=[LONG],
        instructions="Answer from the notes.",
        tools=[TOOL],
        cache=CachePolicy(ttl_seconds=600),
        config=config,
    )
    results = await run_many(["Q1?", "Q2?", "Q3?"], environment=env, config=config)
    assert results.status == "ok"
    (create,) = emu.requests_for("gemini.caches.create")
    body = create.json
    assert body["ttl"] == "600s"
    assert body["displayName"].startswith("pollux-")
    assert body["systemInstruction"]["parts"] == [{"text": "Answer from the notes."}]
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "lookup"
    assert body["contents"][0]["parts"][0]["text"].startswith("word word")
    assert emu.requests_for("gemini.count_tokens")  # size checked before the create
    sent = bodies(emu)
    assert len(sent) == 3
    for request in sent:
        assert request["cachedContent"].startswith("cachedContents/")
        assert "systemInstruction" not in request and "tools" not in request
        assert request["contents"] == [
            {"role": "user", "parts": [{"text": request["contents"][0]["parts"][0]["text"]}]}
        ]
    for output in results.outputs:
        assert output.metrics.cache_mode == "persistent"
        assert output.metrics.cache_used and output.metrics.cache_hit
        assert output.usage.cached_tokens and output.usage.cached_tokens > 1000


async def test_lazy_cache_first_call_creates_then_hits(emu: Emulator, config: Config) -> None:
    env = Environment(sources=[LONG], cache=CachePolicy())
    async with Session(config) as session:
        first = await session.interact(env, Input("Q1"))
        second = await session.interact(env, Input("Q2"))
    assert first.metrics.cache_used and not first.metrics.cache_hit  # created by this call
    assert second.metrics.cache_used and second.metrics.cache_hit
    assert len(emu.requests_for("gemini.caches.create")) == 1
    assert emu.requests_for("gemini.caches.create")[0].json["ttl"] == "3600s"


async def test_concurrent_first_calls_create_once(emu: Emulator, config: Config) -> None:
    env = Environment(sources=[LONG], cache=CachePolicy())
    async with Session(config) as session:
        outs = await asyncio.gather(*(session.interact(env, Input(f"Q{i}")) for i in range(4)))
    assert len(emu.requests_for("gemini.caches.create")) == 1
    assert sum(not o.metrics.cache_hit for o in outs) == 1


async def test_found_again_across_processes_by_display_name(emu: Emulator, config: Config) -> None:
    env = Environment(sources=[LONG], instructions="Be brief.", cache=CachePolicy())
    await run_many("Q1", environment=env, config=config)
    REGISTRY._entries.clear()  # a second process knows nothing
    again = Environment(sources=[LONG], instructions="Be brief.", cache=CachePolicy())
    out = (await run_many("Q2", environment=again, config=config)).outputs[0]
    assert len(emu.requests_for("gemini.caches.create")) == 1
    assert emu.requests_for("gemini.caches.list")
    assert out.metrics.cache_hit


async def test_other_instructions_or_keys_get_their_own_cache(
    emu: Emulator, config: Config
) -> None:
    await run_many("Q", environment=Environment(sources=[LONG], cache=CachePolicy()), config=config)
    await run_many(
        "Q",
        environment=Environment(sources=[LONG], instructions="Other.", cache=CachePolicy()),
        config=config,
    )
    names = {r.json["displayName"] for r in emu.requests_for("gemini.caches.create")}
    assert len(names) == 2


async def test_expired_cache_is_recreated(emu: Emulator, config: Config) -> None:
    env = Environment(sources=[LONG], cache=CachePolicy(ttl_seconds=120))
    async with Session(config) as session:
        await session.interact(env, Input("Q1"))
        emu.advance(121)
        # pollux measures expiry on its own clock: move it by as much as the emulator's.
        REGISTRY.clock = lambda: time.time() + 121
        try:
            out = await session.interact(env, Input("Q2"))
        finally:
            REGISTRY.clock = time.time
    assert len(emu.requests_for("gemini.caches.create")) == 2
    assert out.metrics.cache_used and not out.metrics.cache_hit


async def test_deleted_cache_fails_once_then_is_recreated(emu: Emulator, config: Config) -> None:
    env = Environment(sources=[LONG], cache=CachePolicy())
    async with Session(config) as session:
        await session.interact(env, Input("Q1"))
        emu.wire("gemini").caches.clear()
        result = await session.run_many("Q2", environment=env)
        assert result.outputs[0].metrics.completion_status == "error"
        assert "again" in str(result.outputs[0].diagnostics.error)
        out = await session.interact(env, Input("Q3"))
    assert out.metrics.cache_used
    assert len(emu.requests_for("gemini.caches.create")) == 2


async def test_too_small_is_refused_before_create(emu: Emulator, config: Config) -> None:
    with pytest.raises(ConfigurationError) as info:
        await prepare_environment(
            sources=[Source.from_text("tiny")], cache=CachePolicy(), config=config
        )
    assert "below the 1024 tokens" in str(info.value)
    assert "Drop the CachePolicy" in (info.value.hint or "")
    assert not emu.requests_for("gemini.caches.create")


async def test_tool_choice_with_cache_is_refused(emu: Emulator, config: Config) -> None:
    env = Environment(sources=[LONG], tools=[TOOL], cache=CachePolicy())
    with pytest.raises(ConfigurationError, match="tool_choice"):
        await interact(env, Input("Q"), config=config, tool_choice="required")
    assert not emu.requests_for("gemini.caches")


async def test_refresh_and_delete(emu: Emulator, config: Config) -> None:
    env = await prepare_environment(
        sources=[LONG], cache=CachePolicy(ttl_seconds=60), config=config
    )
    expiry = await refresh_context_cache(env, config=config, ttl_seconds=7200)
    assert expiry is not None
    (update,) = emu.requests_for("gemini.caches.update")
    assert update.json["ttl"] == "7200s"
    assert await delete_context_cache(env, config=config) is True
    assert emu.requests_for("gemini.caches.delete")
    assert not emu.wire("gemini").caches
    assert await delete_context_cache(env, config=config) is False
    assert await refresh_context_cache(env, config=config) is None


async def test_uploaded_file_sources_go_into_the_cache(
    emu: Emulator, config: Config, tmp_path: Path
) -> None:
    doc = tmp_path / "paper.pdf"
    doc.write_bytes(b"%PDF-1.4\n" + b"word " * 400_000)
    async with Session(config) as session:
        env = await session.prepare_environment(
            sources=[Source.from_file(doc), LONG], cache=CachePolicy()
        )
        await session.run_many(["a", "b"], environment=env)
        other = Source.from_bytes(b"%PDF-1.4\n" + b"1" * (2 << 20), mime_type="application/pdf")
        await session.run_many("c", sources=[other])  # an upload of its own, not pinned
    create = emu.requests_for("gemini.caches.create")[0].json
    assert "fileData" in create["contents"][0]["parts"][0]
    assert routes(emu).count("gemini.caches.create") == 1
    cached_calls = bodies(emu)[:2]
    assert len(cached_calls) == 2
    assert all("fileData" not in str(body["contents"]) for body in cached_calls)
    # The cache was built on the uploaded PDF: closing the Session deletes only the other file.
    assert len(emu.requests_for("gemini.files.delete")) == 1
    assert len(emu.wire("gemini").files) == 1


def test_display_name_carries_identity() -> None:
    assert display_name("ab" * 32) == "pollux-" + ("ab" * 32)[:40]


async def test_too_small_caught_from_create_when_counting_fails(
    emu: Emulator, config: Config
) -> None:
    emu.script("gemini.count_tokens", ErrorResponse(404, message="not served here"))
    with pytest.raises(ConfigurationError) as info:
        await prepare_environment(
            sources=[Source.from_text("tiny")], cache=CachePolicy(), config=config
        )
    assert "below the 1024 tokens" in str(info.value)
    assert len(emu.requests_for("gemini.caches.create")) == 1  # Google refused it, free


async def test_stream_and_tool_loop_over_a_cached_environment(
    emu: Emulator, config: Config
) -> None:
    env = Environment(sources=[LONG], tools=[TOOL], cache=CachePolicy())
    emu.script(
        "gemini.generate",
        Reply(tool_calls=[ToolCall("lookup", {"q": "x"})]),
        Reply(text="done"),
    )
    async with Session(config) as session:
        events = [e async for e in session.stream(env, Input("look it up"))]
        first = events[-1].output
        assert first is not None and first.tool_calls
        assert first.metrics.cache_mode == "persistent" and first.metrics.cache_used
        second = await session.interact(
            env,
            Input(
                continuation=first.continuation,
                tool_results=[ToolResult(call_id=first.tool_calls[0].id, content="42")],
            ),
        )
    assert second.text == "done" and second.metrics.cache_hit
    one, two = bodies(emu)
    assert one["cachedContent"] == two["cachedContent"]
    assert [c["role"] for c in two["contents"]] == ["user", "model", "user"]
    assert "tools" not in two and "systemInstruction" not in two


async def test_create_refresh_and_delete_are_reported_on_the_provider_clock(
    emu: Emulator, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pollux.interaction import CacheEvent, observe_caches
    from pollux.providers.gemini import known_context_cache

    monkeypatch.setattr(REGISTRY, "clock", emu.now)  # pollux's clock is the provider's here
    seen: list[CacheEvent] = []

    async def observer(event: CacheEvent) -> None:  # async observers are awaited
        seen.append(event)

    env = Environment(sources=[LONG], cache=CachePolicy(ttl_seconds=600))
    t0 = emu.now()
    assert known_context_cache(env, config=config) is None
    with observe_caches(observer):
        await interact(env, Input("Q1"), config=config)
        await interact(env, Input("Q2"), config=config)  # a hit: no event
        assert known_context_cache(env, config=config) == t0 + 600
        emu.advance(100)
        await refresh_context_cache(env, config=config, ttl_seconds=3600)
        emu.advance(50)
        assert await delete_context_cache(env, config=config) is True
    await refresh_context_cache(env, config=config)  # outside the block: nothing is reported
    created, refreshed, deleted = seen
    assert (created.kind, created.at, created.expires_at) == ("created", t0, t0 + 600)
    assert created.ttl_seconds == 600 and created.tokens == 1500 and created.model == config.model
    assert (refreshed.kind, refreshed.at) == ("refreshed", t0 + 100)
    assert (refreshed.previous_expires_at, refreshed.expires_at) == (t0 + 600, t0 + 3700)
    assert (deleted.kind, deleted.at, deleted.expires_at) == ("deleted", t0 + 150, t0 + 3700)
    assert {e.name for e in seen} == {created.name} and deleted.tokens == 1500
    assert len(seen) == 3
    REGISTRY._entries.clear()  # virtual-clock entries mean nothing on the real clock


def test_observe_caches_refuses_what_it_cannot_call() -> None:
    from pollux.interaction import observe_caches

    with pytest.raises(ConfigurationError) as info, observe_caches(42):  # type: ignore[arg-type]
        pass
    assert "CacheEvent" in (info.value.hint or "")
