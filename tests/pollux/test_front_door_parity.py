"""Front-door parity: arXiv type errors, pollux 2.0 continuations, capability names."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest

from pollux import (
    APIError,
    Config,
    ConfigurationError,
    Continuation,
    Environment,
    Input,
    RetryPolicy,
    Source,
    SourceError,
    SourceTypeError,
    interact,
)
from pollux.providers.base import Capabilities
from pollux.testing import Emulator


@pytest.mark.parametrize("ref", [2301.07041, None, b"2301.07041"])
def test_from_arxiv_with_a_non_string_is_a_type_error_with_a_hint(ref: object) -> None:
    with pytest.raises(TypeError) as caught:
        Source.from_arxiv(ref)  # type: ignore[arg-type]
    assert isinstance(caught.value, SourceTypeError)
    assert isinstance(caught.value, SourceError)
    assert caught.value.hint


def test_every_capability_of_the_table_can_be_overridden() -> None:
    names = {f.name for f in dataclasses.fields(Capabilities)}
    config = Config(
        provider="openai",
        model="gpt-5-nano",
        use_mock=True,
        capabilities=dict.fromkeys(names, False),
    )
    assert config.capabilities is not None and set(config.capabilities) == names
    with pytest.raises(ConfigurationError) as caught:
        Config(provider="openai", model="m", use_mock=True, capabilities={"telepathy": True})
    assert "streaming" in (caught.value.hint or "")


SEED_LAYOUT = {
    "version": 2,
    "provider": "openai",
    "messages": [{"role": "user", "content": "Name a colour"}],
    "response_id": "resp_stored_by_pollux_2",
    "provider_state": None,
}


def test_the_pollux_2_layout_loads_and_re_serializes_in_this_layout() -> None:
    continuation = Continuation.from_jsonable(SEED_LAYOUT, expected_provider="openai")
    again = Continuation.from_jsonable(continuation.to_jsonable())
    assert again.to_jsonable() == continuation.to_jsonable()
    assert continuation.to_jsonable()["state"]["response_id"] == "resp_stored_by_pollux_2"


@pytest.mark.parametrize(
    "broken",
    [
        {**SEED_LAYOUT, "messages": "hi"},
        {**SEED_LAYOUT, "messages": ["hi"]},
        {**SEED_LAYOUT, "response_id": 7},
        {**SEED_LAYOUT, "provider_state": []},
    ],
)
def test_a_malformed_pollux_2_layout_says_what_is_wrong(broken: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Continuation.from_jsonable(broken)
    assert "continuation: state must be an object" not in str(caught.value)
    assert caught.value.hint


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


async def test_a_pollux_2_openai_continuation_continues_server_side(emu: Emulator) -> None:
    config = Config(
        provider="openai",
        model="gpt-5-nano",
        api_key="sk-test",
        retry=RetryPolicy(max_attempts=1),
        request_timeout_s=5.0,
    )
    continuation = Continuation.from_jsonable(SEED_LAYOUT)
    # The emulator may not know the stored response; the request it got is what counts.
    with contextlib.suppress(APIError):
        await interact(
            Environment(), Input("And another?", continuation=continuation), config=config
        )
    (body,) = [r.json for r in emu.requests if r.route == "openai.responses.create"]
    assert body["previous_response_id"] == "resp_stored_by_pollux_2"


async def test_a_pollux_2_anthropic_continuation_replays_its_text_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Portable 2.0 messages carry content as a string; the Anthropic conversation used to split
    # it into letters and fail with a raw AttributeError.
    stored = {
        "version": 2,
        "provider": "anthropic",
        "messages": [
            {"role": "user", "content": "Name a colour"},
            {"role": "assistant", "content": "Blue"},
        ],
    }
    with Emulator() as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url("anthropic"))
        config = Config(
            provider="anthropic",
            model="claude-haiku-4-5",
            api_key="sk-ant-test",
            retry=RetryPolicy(max_attempts=1),
        )
        continuation = Continuation.from_jsonable(stored)
        out = await interact(
            Environment(), Input("And another?", continuation=continuation), config=config
        )
        (body,) = [r.json for r in emulator.requests if r.route == "anthropic.messages.create"]
    assert out.text == "Emulated reply to: And another?"
    texts = [[block["text"] for block in m["content"]] for m in body["messages"]]
    assert texts == [["Name a colour"], ["Blue"], ["And another?"]]


async def test_a_streaming_override_is_honoured_not_only_accepted() -> None:
    from pollux import stream

    with Emulator() as emulator:
        base = {
            "provider": "local",
            "model": "emulator-model",
            "base_url": emulator.base_url("local"),
        }
        off = Config(**base, capabilities={"streaming": False})  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="streaming"):
            async for _ in stream(Environment(), Input("hi"), config=off):
                pass
        on = Config(**base, capabilities={"streaming": True})  # type: ignore[arg-type]
        events = [e.type async for e in stream(Environment(), Input("hi"), config=on)]
        assert len(emulator.requests_for("local.chat")) == 1  # the refused one sent nothing
    assert events[-1] == "done"
