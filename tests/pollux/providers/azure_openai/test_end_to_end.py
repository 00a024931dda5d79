"""provider="azure_openai" through the official SDK's clients, against the emulator's Azure wire.

Both of Azure's API surfaces (the v1 API, and a dated ``api-version``) and both credentials (a
resource key in ``api-key``, an Entra ID token provider as ``Authorization: Bearer``) run the
same behaviour; the OpenAI request mapping underneath is the ``openai`` provider's, tested there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from pollux import (
    APIError,
    Config,
    ConfigurationError,
    Environment,
    Input,
    RetryPolicy,
    Session,
    Source,
    ToolDeclaration,
    ToolResult,
    check_ready,
    defer,
    run,
    run_many,
    stream,
)
from pollux.testing import Emulator, ErrorResponse, Reply, ToolCall

from ._azure import KEY, VERSION, async_token, azure_config

DEPLOYMENT = "prod-gpt5-mini"
WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


class Weather(pydantic.BaseModel):
    city: str
    temperature_c: float


def azure(emu: Emulator, **fields: Any) -> Config:
    return azure_config(emu, DEPLOYMENT, **fields)


def calls(emu: Emulator, route: str = "azure_openai.responses.create") -> list[Any]:
    return [r for r in emu.requests if r.route == route]


def _expected_auth(config: Config) -> dict[str, str]:
    # A key goes in api-key on a dated api-version, as the bearer credential on the v1 API
    # (Microsoft's documented use of each); a token always as the bearer.
    if config.credentials is None and config.api_version is not None:
        return {"api-key": KEY}
    return {"authorization": f"Bearer {KEY}"}


async def test_run_reaches_the_surface_with_the_credential(emu: Emulator, config: Config) -> None:
    out = await run("Name a colour", config=config, max_tokens=64)
    assert out.text == "Emulated reply to: Name a colour"
    (call,) = calls(emu)
    assert call.json["model"] == DEPLOYMENT  # the deployment name travels as the model
    if config.api_version is None:
        assert call.path == "/azure/openai/v1/responses" and call.query == {}
    else:
        assert call.path == "/azure/openai/responses"
        assert call.query == {"api-version": VERSION}
    sent = {k: v for k, v in call.headers.items() if k in ("api-key", "authorization")}
    assert sent == _expected_auth(config)


async def test_structured_output_tools_and_continuation(emu: Emulator, config: Config) -> None:
    out = await run("Weather in Oslo as JSON", config=config, output=Weather)
    assert isinstance(out.structured, Weather)
    emu.script(
        "azure_openai.responses",
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"}, call_id="call_p")]),
        Reply("Paris is sunny."),
    )
    env = Environment(instructions="Use tools.", tools=[WEATHER])
    async with Session(config) as session:
        first = await session.interact(env, Input("Weather in Paris?"))
        assert first.tool_calls[0].arguments == {"city": "Paris"}
        assert first.continuation is not None
        second = await session.interact(
            env,
            Input(
                continuation=first.continuation,
                tool_results=[ToolResult(call_id="call_p", content='{"sky": "sunny"}')],
            ),
        )
    assert second.text == "Paris is sunny."
    last = calls(emu)[-1].json
    assert last["previous_response_id"] == first.diagnostics.raw["response"]["response_id"]


async def test_stream_and_a_shared_upload(emu: Emulator, config: Config, tmp_path: Path) -> None:
    events = [e async for e in stream(Environment(), Input("Hello there"), config=config)]
    assert events[-1].type == "done" and events[-1].output is not None
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4\n" + b"0" * 2048)
    results = await run_many(["Q1?", "Q2?"], sources=[Source.from_file(pdf)], config=config)
    assert results.status == "ok"
    routes = [r.route for r in emu.requests]
    assert routes.count("azure_openai.files.create") == 1
    assert routes[-1] == "azure_openai.files.delete"
    for request in emu.requests:
        assert {k for k in request.headers if k in ("api-key", "authorization")} == set(
            _expected_auth(config)
        )


async def test_prompt_cache_reads_are_reported(emu: Emulator, config: Config) -> None:
    emu.script("azure_openai.responses", Reply("ok", input_tokens=2000, cached_tokens=1536))
    out = await run("Again", config=config)
    assert out.usage.cached_tokens == 1536


async def test_unsupported_requests_fail_before_any_io(emu: Emulator) -> None:
    config = azure(emu)
    with pytest.raises(ConfigurationError, match="azure_openai does not support seed"):
        await run("x", config=config, seed=3)
    with pytest.raises(ConfigurationError, match="azure_openai does not support seed"):
        await defer(["x"], config=config, seed=3)  # global batch: the same checks, before I/O
    assert emu.requests == []


async def test_a_token_provider_is_asked_for_every_request(emu: Emulator) -> None:
    issued: list[str] = []

    def provider() -> str:
        issued.append(KEY)
        return KEY

    config = azure(emu, credentials=provider)
    out = await run_many(["one", "two", "three"], config=config)
    assert out.status == "ok"
    assert len(issued) == 3  # a refreshed token reaches every request


@pytest.mark.parametrize("version", [None, VERSION], ids=["v1", "dated"])
async def test_a_wrong_key_names_the_azure_settings_and_is_scrubbed(
    emu: Emulator, version: str | None
) -> None:
    wrong = "wrong-azure-key-0123456789"
    with pytest.raises(APIError) as info:
        await run("hi", config=azure(emu, api_key=wrong, api_version=version))
    error = info.value
    assert error.provider == "azure_openai" and error.status_code == 401
    assert str(error).startswith("azure_openai generate failed")
    assert "AZURE_OPENAI_API_KEY" in (error.hint or "") and "base_url" in (error.hint or "")
    assert wrong not in str(error) + (error.hint or "")


async def test_a_refused_token_names_the_entra_settings(emu: Emulator) -> None:
    token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.refused0123456789"
    with pytest.raises(APIError) as info:
        await run("hi", config=azure(emu, credentials=lambda: token))
    hint = info.value.hint or ""
    assert "Entra ID" in hint and "Cognitive Services OpenAI User" in hint
    assert token not in str(info.value) + hint


async def test_a_failing_token_provider_is_an_error_with_a_hint(emu: Emulator) -> None:
    def broken() -> str:
        raise RuntimeError("no credential in this environment")

    with pytest.raises(APIError) as info:
        await run("hi", config=azure(emu, credentials=broken))
    assert "Entra ID token" in str(info.value) and "az login" in (info.value.hint or "")
    assert info.value.retryable is False
    assert emu.requests == []


async def test_an_unknown_deployment_names_config_model(emu: Emulator) -> None:
    with pytest.raises(APIError) as info:
        await run("hi", config=azure(emu, model="no-such-deployment"))
    assert info.value.status_code == 404
    assert "No deployment 'no-such-deployment'" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("version", "status"), [("2025-13", 400), ("latest", 400)], ids=["garbled", "v1-name"]
)
async def test_a_rejected_api_version_names_config_api_version(
    emu: Emulator, version: str, status: int
) -> None:
    with pytest.raises(APIError) as info:
        await run("hi", config=azure(emu, api_version=version))
    assert info.value.status_code == status
    assert "Config(api_version=...)" in (info.value.hint or "")


async def test_check_ready_reads_the_resource(emu: Emulator) -> None:
    ready = await check_ready(azure(emu))
    assert ready.ready and ready.provider == "azure_openai" and not ready.model_verified
    refused = await check_ready(azure(emu, api_key="wrong-azure-key-0123456789"))
    assert not refused.ready and refused.status_code == 401
    assert "AZURE_OPENAI_API_KEY" in refused.message


def test_the_endpoint_version_and_key_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://contoso.openai.azure.com")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_VERSION", VERSION)
    config = Config(provider="azure_openai", model=DEPLOYMENT)
    assert config.base_url == "https://contoso.openai.azure.com"
    assert (config.api_key, config.api_version) == (KEY, VERSION)
    assert KEY not in repr(config)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"model": DEPLOYMENT}, "AZURE_OPENAI_ENDPOINT"),
        ({"model": DEPLOYMENT, "base_url": "https://x.openai.azure.com"}, "AZURE_OPENAI_API_KEY"),
        ({"base_url": "https://x.openai.azure.com", "api_key": KEY}, "deployment"),
        (
            {"model": DEPLOYMENT, "base_url": "https://x.openai.azure.com", "credentials": "tok"},
            "get_bearer_token_provider",
        ),
        (
            {
                "model": DEPLOYMENT,
                "base_url": "https://x.openai.azure.com",
                "api_key": KEY,
                "credentials": async_token,
            },
            "Remove api_key",
        ),
    ],
    ids=["no-endpoint", "no-credential", "no-deployment", "not-a-provider", "key-and-token"],
)
def test_config_names_the_missing_or_conflicting_setting(
    fields: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        Config(provider="azure_openai", **fields)
    assert needle in str(info.value) + (info.value.hint or "")


@pytest.mark.parametrize("name", ["api_version", "credentials"])
def test_azure_settings_are_refused_for_other_providers(name: str) -> None:
    value: Any = (lambda: KEY) if name == "credentials" else VERSION
    with pytest.raises(
        ConfigurationError, match=f"{name} is only valid for provider='azure_openai'"
    ):
        Config(provider="openai", model="gpt-5-nano", api_key=KEY, **{name: value})


async def test_an_error_status_is_retried_as_on_openai(emu: Emulator) -> None:
    emu.script("azure_openai.responses", ErrorResponse(429, retry_after=0))
    retry = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.002)
    out = await run("hi", config=azure(emu, retry=retry))
    assert out.text == "Emulated reply to: hi"
    assert len(calls(emu)) == 2
    assert json.loads(calls(emu)[1].body)["model"] == DEPLOYMENT


def test_the_cli_checks_and_asks_from_the_azure_variables(
    emu: Emulator, tmp_path: Path, cli_env: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from pollux._cli.main import main

    flags = cli_env
    assert main(["check", *flags]) == 0
    ready = capsys.readouterr()
    assert ready.out.startswith("ready: azure_openai"), ready.err
    assert main(["ask", "Who are the twins?", *flags]) == 0
    answer = capsys.readouterr()
    assert answer.out == "Emulated reply to: Who are the twins?\n"
    assert KEY not in ready.out + ready.err + answer.out + answer.err
    (call,) = calls(emu)
    assert call.query == {"api-version": VERSION} and call.headers.get("api-key") == KEY


async def test_provider_options_are_keyed_by_azure_openai(emu: Emulator) -> None:
    options = {"azure_openai": {"prompt_cache_key": "tenant-7"}, "openai": {"service_tier": "x"}}
    await run("hi", config=azure(emu), provider_options=options)
    (call,) = calls(emu)
    assert call.json["prompt_cache_key"] == "tenant-7"
    assert "service_tier" not in call.json  # the openai key is another provider's
