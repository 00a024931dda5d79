"""Every fault surfaces in the openai SDK as the exception the real API causes."""

from __future__ import annotations

import json

import openai
import pytest

from pollux.testing import (
    CutStream,
    DropConnection,
    Emulator,
    EmulatorError,
    ErrorResponse,
    Latency,
    MalformedBody,
    Reply,
    StreamError,
)

MESSAGES = [{"role": "user", "content": "hello"}]


def _client(emu: Emulator, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=emu.base_url("local"),
        api_key="sk-test",
        max_retries=0,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_status_faults_map_to_sdk_exceptions(
    emulator: Emulator, status: int, exception: type[openai.APIStatusError]
) -> None:
    emulator.script("local", ErrorResponse(status))
    with _client(emulator) as client, pytest.raises(exception) as info:
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == status
    assert isinstance(info.value.body, dict) and info.value.body["message"]
    assert info.value.type


def test_rate_limit_carries_retry_after_and_code(emulator: Emulator) -> None:
    emulator.script(
        "local.chat.completions", ErrorResponse(429, retry_after=2, message="slow down")
    )
    with _client(emulator) as client, pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.code == "rate_limit_exceeded"
    assert "slow down" in str(info.value)


def test_sdk_retries_honour_the_scripted_sequence(emulator: Emulator) -> None:
    emulator.script(
        "local",
        ErrorResponse(503, headers={"retry-after-ms": "5"}),
        ErrorResponse(429, headers={"retry-after-ms": "5"}),
        Reply("third time lucky"),
    )
    with openai.OpenAI(base_url=emulator.base_url("local"), api_key="k", max_retries=2) as client:
        answer = client.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content == "third time lucky"
    assert len(emulator.requests_for("local.chat.completions")) == 3


def test_wrong_api_key_is_an_authentication_error() -> None:
    with Emulator(api_key="sk-right") as emu:
        with openai.OpenAI(base_url=emu.base_url("local"), api_key="sk-wrong", max_retries=0) as c:
            with pytest.raises(openai.AuthenticationError) as info:
                c.models.list()
            assert info.value.code == "invalid_api_key"
        with openai.OpenAI(base_url=emu.base_url("local"), api_key="sk-right") as c:
            assert c.models.list().data


def test_unknown_route_is_not_found(emulator: Emulator) -> None:
    with _client(emulator) as client, pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="m", input="x")


def test_latency_beyond_the_client_timeout_is_a_timeout(emulator: Emulator) -> None:
    emulator.script("local", Latency(5.0))
    with _client(emulator, timeout=0.2) as client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=MESSAGES)


def test_latency_then_normal_answer(emulator: Emulator) -> None:
    emulator.script("local", Latency(0.01), Reply("late but fine"))
    with _client(emulator) as client:
        answer = client.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content == "late but fine"


def test_latency_answer_is_not_left_for_the_next_request(emulator: Emulator) -> None:
    # The client gives up during the wait; the Reply queued after the Latency belonged to that
    # request and must not answer the next one (it did, so a second scripted Latency never ran).
    emulator.script("local", Latency(1.0), Reply("too late"))
    with _client(emulator, timeout=0.2) as client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with _client(emulator) as client:
        answer = client.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content != "too late"
    emulator.assert_consumed()


def test_dropped_connection_is_a_connection_error(emulator: Emulator) -> None:
    emulator.script("local", DropConnection())
    with _client(emulator) as client, pytest.raises(openai.APIConnectionError) as info:
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert not isinstance(info.value, openai.APITimeoutError)


def test_malformed_body_fails_to_decode(emulator: Emulator) -> None:
    emulator.script("local", MalformedBody())
    with _client(emulator) as client, pytest.raises(json.JSONDecodeError):
        client.chat.completions.create(model="m", messages=MESSAGES)


def test_malformed_stream_event_fails_to_decode(emulator: Emulator) -> None:
    emulator.script("local", MalformedBody(after_events=2))
    with _client(emulator) as client:
        stream = client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
        )
        seen = 0
        with pytest.raises(json.JSONDecodeError):
            for _ in stream:
                seen += 1
    assert seen == 2


def test_cut_stream_is_a_connection_error_mid_iteration(emulator: Emulator) -> None:
    emulator.script("local", CutStream(after_events=2))
    with _client(emulator) as client:
        stream = client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
        )
        seen = 0
        with pytest.raises(openai.APIConnectionError):
            for _ in stream:
                seen += 1
    assert seen == 2


def test_cut_plain_body_is_a_connection_error(emulator: Emulator) -> None:
    emulator.script("local", CutStream())
    with _client(emulator) as client, pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=MESSAGES)


def test_in_band_stream_error_raises_api_error(emulator: Emulator) -> None:
    emulator.script("local", StreamError("upstream exploded", after_events=1))
    with _client(emulator) as client:
        stream = client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
        )
        with pytest.raises(openai.APIError) as info:
            for _ in stream:
                pass
    assert "upstream exploded" in info.value.message


async def test_async_faults_map_the_same_way(emulator: Emulator) -> None:
    emulator.script(
        "local",
        ErrorResponse(429, retry_after=1),
        DropConnection(),
        CutStream(after_events=1),
    )
    async with openai.AsyncOpenAI(
        base_url=emulator.base_url("local"), api_key="k", max_retries=0
    ) as client:
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="m", messages=MESSAGES)
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="m", messages=MESSAGES)
        stream = await client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
        )
        with pytest.raises(openai.APIConnectionError):
            async for _ in stream:
                pass


async def test_async_timeout(emulator: Emulator) -> None:
    emulator.script("local", Latency(5.0))
    async with openai.AsyncOpenAI(
        base_url=emulator.base_url("local"), api_key="k", max_retries=0, timeout=0.2
    ) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="m", messages=MESSAGES)


def test_handler_decides_per_request(emulator: Emulator) -> None:
    def handler(request: object) -> Reply | ErrorResponse | None:
        content = emulator.requests[-1].json["messages"][-1]["content"]
        if content == "fail":
            return ErrorResponse(500)
        if content == "default":
            return None
        return Reply(content.upper())

    emulator.on("local.chat", handler)
    with _client(emulator) as client:
        assert (
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "shout"}]
            )
            .choices[0]
            .message.content
            == "SHOUT"
        )
        assert (
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "default"}]
            )
            .choices[0]
            .message.content
            == "Emulated reply to: default"
        )
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "fail"}]
            )
    emulator.on("local.chat", None)


def test_a_raising_handler_is_a_500_and_reported_at_close() -> None:
    emu = Emulator().start()
    try:

        def broken(request: object) -> None:
            raise RuntimeError("handler bug")

        emu.on("local", broken)
        with _client(emu) as client, pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=MESSAGES)
        assert "handler bug" in emu.errors[0]
    finally:
        with pytest.raises(EmulatorError, match="handler bug"):
            emu.close()


def test_script_validation(emulator: Emulator) -> None:
    with pytest.raises(EmulatorError, match="names no wire"):
        emulator.script("nope", Reply("x"))
    with pytest.raises(TypeError):
        emulator.script("local", "not an item")
    with pytest.raises(ValueError):
        ErrorResponse(200)
    emulator.script("local", Reply("unused"))
    with pytest.raises(AssertionError, match="never used"):
        emulator.assert_consumed()


def test_error_response_with_a_verbatim_body(emulator: Emulator) -> None:
    upstream = {
        "error": {
            "code": 502,
            "message": "Provider returned error",
            "metadata": {"provider_name": "Upstream", "raw": '{"error": "overloaded"}'},
        }
    }
    emulator.script("openrouter", ErrorResponse(502, body=upstream, retry_after=1))
    with (
        openai.OpenAI(base_url=emulator.base_url("openrouter"), api_key="k", max_retries=0) as c,
        pytest.raises(openai.InternalServerError) as info,
    ):
        c.chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.body == upstream["error"]
    assert info.value.response.headers["retry-after"] == "1"
