"""The module-level functions' shared Sessions: eviction, event loops, and misuse."""

from __future__ import annotations

import asyncio
import threading

import pytest

import pollux
from pollux import (
    Config,
    ConfigurationError,
    Environment,
    Input,
    Session,
    Source,
    ToolDeclaration,
    _api,
)
from pollux.testing import Emulator, Latency

from .conftest import FAST_RETRY


def _mock(index: int) -> Config:
    return Config(provider="openai", model=f"gpt-5-nano-{index}", use_mock=True)


async def test_a_busy_shared_session_is_not_evicted() -> None:
    state = _api._loop_sessions(_mock(0))
    busy = state.acquire(_mock(0))
    others = [state.acquire(_mock(i)) for i in range(1, _api._MAX_SHARED + 4)]
    for session in others:
        state.release(session)
    # Over the cap, the least recently used *idle* sessions went; the busy one stayed open.
    assert not busy.closed and _mock(0) in state.sessions
    assert len(state.sessions) == _api._MAX_SHARED
    state.release(busy)
    # Idle now, and still the least recently used: the next new config evicts and closes it.
    state.release(state.acquire(_mock(99)))
    await asyncio.sleep(0)
    assert _mock(0) not in state.sessions
    assert busy.closed


async def test_more_configs_than_the_cap_in_flight_at_once(emu: Emulator) -> None:
    # One config per tenant (distinct api keys), all calls in flight together: eviction must
    # not close a Session under a running call.
    emu.script("local", *[Latency(0.2)] * (_api._MAX_SHARED + 4))
    configs = [
        Config(
            provider="local",
            model="emulator-model",
            base_url=emu.base_url("local"),
            api_key=f"tenant-{i}",
            retry=FAST_RETRY,
        )
        for i in range(_api._MAX_SHARED + 4)
    ]
    first = [asyncio.ensure_future(pollux.run("hi", config=c)) for c in configs[:-4]]
    await asyncio.sleep(0.05)
    later = [asyncio.ensure_future(pollux.run("hi", config=c)) for c in configs[-4:]]
    outputs = await asyncio.gather(*first, *later)
    assert all(output.text for output in outputs)


def test_a_loop_closed_without_shutdown_is_not_retained() -> None:
    for index in range(3):
        loop = asyncio.new_event_loop()
        try:
            out = loop.run_until_complete(pollux.run("hi", config=_mock(index)))
            assert out.text
        finally:
            loop.close()

    async def later() -> None:
        await pollux.run("hi", config=_mock(9))
        assert not [loop for loop in _api._BY_LOOP if loop.is_closed()]

    asyncio.run(later())
    assert not [loop for loop in list(_api._BY_LOOP) if loop.is_closed()]


def test_a_session_belongs_to_its_event_loop() -> None:
    session = Session(_mock(0))
    assert asyncio.run(session.interact(Environment(), Input("hi"))).text
    with pytest.raises(ConfigurationError, match="another event loop") as info:
        asyncio.run(session.interact(Environment(), Input("again")))
    assert info.value.hint
    asyncio.run(session.aclose())
    assert session.closed


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sources": Source.from_text("x")}, "got one Source"),
        (
            {"tools": ToolDeclaration(name="t", parameters={"type": "object"})},
            "got one ToolDeclaration",
        ),
        ({"prompts": {"b?", "a?"}}, "ordered sequence"),
        ({"prompts": {"a?": 1}}, "ordered sequence"),
        ({"prompts": 5}, "a string or a list of strings, got int"),
    ],
)
async def test_misshapen_arguments_are_configuration_errors(
    kwargs: dict[str, object], match: str
) -> None:
    arguments: dict[str, object] = {"prompts": ["a?"], **kwargs}
    with pytest.raises(ConfigurationError, match=match) as info:
        await pollux.run_many(config=_mock(0), **arguments)  # type: ignore[arg-type]
    assert info.value.hint


async def test_a_number_as_prompts_is_refused_by_every_front_door(mock_config: Config) -> None:
    for front_door in (pollux.run_many, pollux.defer):
        with pytest.raises(ConfigurationError, match="got int") as info:
            await front_door(5, config=mock_config)  # type: ignore[operator]
        assert info.value.hint


@pytest.mark.parametrize("prompt", [["a?", "b?"], ("a?",), 5])
async def test_run_takes_one_string_prompt(mock_config: Config, prompt: object) -> None:
    # A list used to run (and bill) every prompt and return only the first answer.
    with pytest.raises(ConfigurationError, match="run\\(\\) takes one prompt") as info:
        await pollux.run(prompt, config=mock_config)  # type: ignore[arg-type]
    assert "run_many" in (info.value.hint or "")


async def test_prompts_may_be_any_ordered_iterable(mock_config: Config) -> None:
    prompts = (p for p in ["one?", "two?"])
    result = await pollux.run_many(prompts, config=mock_config)  # type: ignore[arg-type]
    assert result.answers[0].endswith("one?") and result.answers[1].endswith("two?")


def test_threads_each_running_their_own_loops() -> None:
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for _ in range(5):
                assert asyncio.run(pollux.run("hi", config=_mock(index))).text
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert not [loop for loop in list(_api._BY_LOOP) if loop.is_closed()]
