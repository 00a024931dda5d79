"""The Anthropic wire through the official anthropic SDK (sync and async), unmodified."""

from __future__ import annotations

import anthropic
import pytest

from pollux.testing import Emulator

MODEL = "claude-sonnet-4-6"
HI = [{"role": "user", "content": "hello there"}]


def _client(emu: Emulator, **kwargs: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=emu.base_url("anthropic"), api_key="sk-ant-test", max_retries=0, **kwargs
    )


def _async_client(emu: Emulator) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=emu.base_url("anthropic"), api_key="sk-ant-test", max_retries=0
    )


def test_plain_message(emulator: Emulator) -> None:
    with _client(emulator) as client:
        message = client.messages.create(model=MODEL, max_tokens=64, messages=HI)
    assert message.content[0].type == "text"
    assert message.content[0].text == "Emulated reply to: hello there"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 2
    assert message.usage.output_tokens == 6
    assert message.usage.cache_read_input_tokens == 0
    request = emulator.last_request
    assert request.route == "anthropic.messages.create"
    assert request.json["max_tokens"] == 64


async def test_async_stream_final_message_matches_plain(emulator: Emulator) -> None:
    async with _async_client(emulator) as client:
        plain = await client.messages.create(model=MODEL, max_tokens=64, messages=HI)
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_message()
    assert final.content[0].text == plain.content[0].text  # type: ignore[union-attr]
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


def test_count_tokens(emulator: Emulator) -> None:
    with _client(emulator) as client:
        counted = client.messages.count_tokens(model=MODEL, system="Be brief.", messages=HI)
    assert counted.input_tokens == 5
    assert emulator.last_request.route == "anthropic.messages.count_tokens"


def test_missing_key_is_an_authentication_error(emulator: Emulator) -> None:
    with _client(emulator) as client, pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(
            model=MODEL, max_tokens=8, messages=HI, extra_headers={"Authorization": anthropic.omit}
        )
    assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
