"""Issue 14 (pollux half): deadlines that hold, secrets scrubbed, loaders that only raise ours.

The deadline tests never assert a duration: a slow answer is scripted far beyond the overall
deadline but within reach of the per-attempt request timeout, so the *kind* of error proves which
limit fired (``deadline`` when ``max_elapsed_s`` cut the running attempt, ``timeout`` if only
``request_timeout_s`` had).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import pollux
from pollux import (
    APIError,
    Config,
    ConfigurationError,
    DeferredHandle,
    Environment,
    Input,
    Output,
    OutputCollection,
    RetryPolicy,
)
from pollux._scrub import REDACTED, register_secret, scrub
from pollux.testing import Emulator, ErrorResponse, Latency, Reply

# -- the overall deadline bounds the attempt that is running -----------------------------------


def _slow_config(emu: Emulator, *, max_elapsed_s: float | None, timeout_s: float) -> Config:
    return Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        request_timeout_s=timeout_s,
        retry=RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_elapsed_s=max_elapsed_s),
    )


async def test_max_elapsed_cuts_a_running_call(emu: Emulator) -> None:
    # The answer would come after 1.5 s; the request timeout (1.2 s) would fire first if the
    # deadline (0.1 s) did not bound the running attempt.
    emu.script("local", Latency(1.5), Reply("too late"))
    config = _slow_config(emu, max_elapsed_s=0.1, timeout_s=1.2)
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    error = info.value
    assert error.error_category == "deadline"
    assert error.retryable is False
    assert "RetryPolicy.max_elapsed_s=0.1" in str(error)
    assert "overall deadline" in str(error)
    assert (error.provider, error.phase) == ("local", "generate")
    assert "max_elapsed_s" in (error.hint or "")
    assert len(emu.requests_for("local.chat")) == 1  # no retry was started after the deadline


async def test_max_elapsed_cuts_a_stream_that_has_not_started(emu: Emulator) -> None:
    emu.script("local", Latency(1.5), Reply("too late"))
    config = _slow_config(emu, max_elapsed_s=0.1, timeout_s=1.2)
    with pytest.raises(APIError) as info:
        async for _ in pollux.stream(Environment(), Input("Hi"), config=config):
            pass
    assert info.value.error_category == "deadline"
    assert info.value.phase == "stream"
    assert "overall deadline" in str(info.value)


async def test_the_request_timeout_names_itself(emu: Emulator) -> None:
    emu.script("local", Latency(1.5), Reply("too late"))
    config = Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        request_timeout_s=0.1,
        retry=RetryPolicy(max_attempts=1, max_elapsed_s=None),
    )
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert info.value.error_category == "timeout"
    assert "Config.request_timeout_s=0.1" in str(info.value)
    assert "per-attempt" in str(info.value)


async def test_the_request_timeout_still_fires_inside_a_later_deadline(emu: Emulator) -> None:
    # Under a deadline that fires first, a request arms no timer of its own; under a later
    # deadline (5 s) it must: the per-attempt timeout (0.1 s) is what ends the attempt.
    emu.script("local", Latency(1.5), Reply("too late"))
    config = Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        request_timeout_s=0.1,
        retry=RetryPolicy(max_attempts=1, max_elapsed_s=5.0),
    )
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert info.value.error_category == "timeout"
    assert "Config.request_timeout_s=0.1" in str(info.value)


async def test_a_failed_call_within_the_deadline_keeps_its_own_error(emu: Emulator) -> None:
    emu.script("local", ErrorResponse(503), ErrorResponse(503), ErrorResponse(503))
    config = _slow_config(emu, max_elapsed_s=30.0, timeout_s=5.0)
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert info.value.status_code == 503 and info.value.error_category == "capacity"


@pytest.fixture
def openai_emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        yield emulator


async def test_the_deadline_holds_through_the_openai_sdk(openai_emu: Emulator) -> None:
    openai_emu.script("openai.responses", Latency(1.5), Reply("too late"))
    config = Config(
        provider="openai",
        model="gpt-5-nano",
        api_key="sk-test",
        request_timeout_s=1.2,
        retry=RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_elapsed_s=0.1),
    )
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert info.value.error_category == "deadline"
    assert info.value.provider == "openai"


# -- the configured key never appears in what pollux produces -----------------------------------

KEY = "sk-live-0123456789abcdefABCDEF"


async def test_an_echoed_key_is_scrubbed_from_errors_and_json(emu: Emulator) -> None:
    config = Config(
        provider="local",
        model="emulator-model",
        base_url=emu.base_url("local"),
        api_key=KEY,
        retry=RetryPolicy(max_attempts=1),
    )
    echo = f"Incorrect API key provided: {KEY}. You can find your API key in your account."
    emu.script("local", ErrorResponse(401, message=echo))
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert KEY not in str(info.value) and KEY not in (info.value.hint or "")
    assert REDACTED in str(info.value)
    assert "Incorrect API key provided" in str(info.value)  # the server's words stay
    emu.script("local", ErrorResponse(401, message=echo), ErrorResponse(401, message=echo))
    result = await pollux.run_many(["a", "b"], config=config)
    dumped = json.dumps(result.to_jsonable())
    assert result.status == "error"
    assert KEY not in dumped
    assert KEY not in json.dumps(result.outputs[0].to_jsonable())
    restored = OutputCollection.from_jsonable(result.to_jsonable())
    assert KEY not in json.dumps(restored.to_jsonable())
    emu.script("local", ErrorResponse(401, message=echo))
    status = await pollux.check_ready(config)
    assert KEY not in status.message and "api_key" in status.message


async def test_a_key_shaped_like_a_token_is_scrubbed_even_unconfigured(
    emu: Emulator, local_config: Config
) -> None:
    emu.script(
        "local",
        ErrorResponse(400, message="rejected header Authorization: Bearer tok_4f2a9c1e7b3d5f60"),
    )
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=local_config)
    assert "tok_4f2a9c1e7b3d5f60" not in str(info.value)
    assert f"Bearer {REDACTED}" in str(info.value)


def test_the_scrubber_covers_the_usual_shapes() -> None:
    register_secret("my-gateway-master-key")
    cases = {
        "key my-gateway-master-key echoed": "key [REDACTED] echoed",
        "sk-ant-api03-abcdefghijkl": "sk-[REDACTED]",
        "AIzaSyA1234567890abcdefghijklmn": "[REDACTED]",
        "url?key=abcdef123456&x=1": "url?key=[REDACTED]&x=1",
        '{"api_key": "abcdef123456"}': '{"api_key": "[REDACTED]"}',
        "x-api-key: abcdef123456": "x-api-key: [REDACTED]",
    }
    for text, expected in cases.items():
        assert scrub(text) == expected
    # Ordinary words and short values pass unchanged: credentials carry digits.
    register_secret("local")
    for text in (
        "pass api_key=... to the local server",
        "Bearer authentication failed",
        "authorization: missing_header_value",
        "sk-learn-estimators",
    ):
        assert scrub(text) == text


def test_a_structured_failure_message_is_scrubbed() -> None:
    register_secret("sk-echoed-in-an-answer-123")
    from pollux._engine.assemble import structured_facets

    facets = structured_facets(
        "bad value 'sk-echoed-in-an-answer-123'", provider="local", finish_reason="stop"
    )
    assert "sk-echoed-in-an-answer-123" not in json.dumps(facets)


# -- loaders raise documented pollux errors only -------------------------------------------------

HUGE = 10**400


@pytest.mark.parametrize(
    "load",
    [
        lambda: DeferredHandle.from_dict(
            {
                "job_id": "j",
                "provider": "openai",
                "model": "m",
                "request_count": 1,
                "submitted_at": HUGE,
            }
        ),
        lambda: Output.from_jsonable({"metrics": {"duration_s": HUGE}}),
        lambda: OutputCollection.from_jsonable({"outputs": [{"metrics": {"duration_s": -HUGE}}]}),
        lambda: RetryPolicy(max_elapsed_s=HUGE),
        lambda: RetryPolicy(initial_delay_s=HUGE),
        lambda: RetryPolicy(max_delay_s=HUGE),
        lambda: RetryPolicy(backoff_multiplier=HUGE),
        lambda: RetryPolicy(max_elapsed_s=10**5000),  # past Python's int-to-str digit limit
        lambda: Config(provider="openai", model="m", use_mock=True, request_timeout_s=HUGE),
    ],
)
def test_huge_integers_raise_configuration_errors(load: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        load()  # type: ignore[operator]
    assert info.value.hint


def test_huge_integers_parsed_from_json_are_refused_too() -> None:
    text = '{"text": "x", "metrics": {"duration_s": 1' + "0" * 400 + "}}"
    with pytest.raises(ConfigurationError):
        Output.from_jsonable(json.loads(text))


# -- every provider: the deadline holds and an echoed key leaves no trace ------------------------

_SDK_PROVIDERS = {
    "openai": ("gpt-5-nano", "OPENAI_BASE_URL", "openai.responses"),
    "anthropic": ("claude-haiku-4-5", "ANTHROPIC_BASE_URL", "anthropic.messages.create"),
    "gemini": ("gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL", "gemini"),
    "openrouter": ("emulator-model", "OPENROUTER_BASE_URL", "openrouter.chat"),
}


def _provider_config(
    name: str, emu: Emulator, monkeypatch: pytest.MonkeyPatch, **overrides: object
) -> tuple[Config, str]:
    model, env_var, route = _SDK_PROVIDERS[name]
    monkeypatch.setenv(env_var, emu.base_url(name))
    settings: dict[str, object] = {"api_key": KEY, "retry": RetryPolicy(max_attempts=1)}
    settings.update(overrides)
    return Config(provider=name, model=model, **settings), route  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(_SDK_PROVIDERS))
async def test_the_deadline_cuts_a_running_call_and_stream_on_every_provider(
    name: str, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay_s=0.001, max_elapsed_s=0.2)
    config, route = _provider_config(name, emu, monkeypatch, request_timeout_s=3.0, retry=policy)
    if name == "openrouter":
        await pollux.check_ready(config)  # the model catalog is read (and cached) first
    emu.script(route, Latency(3.5), Reply("too late"))
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    assert (info.value.error_category, info.value.provider) == ("deadline", name)
    emu.script(route, Latency(3.5), Reply("too late"))
    with pytest.raises(APIError) as info:
        async for _ in pollux.stream(Environment(), Input("Hi"), config=config):
            pass
    assert (info.value.error_category, info.value.phase) == ("deadline", "stream")


@pytest.mark.parametrize("name", sorted(_SDK_PROVIDERS))
async def test_an_echoed_key_is_not_in_the_printed_traceback(
    name: str, emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's own exception (the pollux error's __cause__) quotes the body too; a traceback
    # printed by logging.exception() or an uncaught error shows it.
    import traceback

    config, route = _provider_config(name, emu, monkeypatch)
    if name == "openrouter":
        await pollux.check_ready(config)
    echo = f"Incorrect API key provided: {KEY}. You can find your API key in your account."
    emu.script(route, ErrorResponse(400, message=echo))
    with pytest.raises(APIError) as info:
        await pollux.run("Hi", config=config)
    printed = "".join(traceback.format_exception(info.value))
    assert "Incorrect API key provided" in printed
    assert KEY not in printed
