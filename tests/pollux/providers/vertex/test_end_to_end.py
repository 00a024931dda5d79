"""provider="vertex" through google-genai (``vertexai=True``), against the emulator's Vertex wire.

Both kinds of credentials run the same behaviour: an injected ``google.auth`` credentials object,
and the Application Default Credentials (an ``authorized_user`` file whose ``token_uri`` is the
emulator's OAuth endpoint, so the refresh runs offline too). The Gemini request mapping
underneath is the ``gemini`` provider's, tested there.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from google.oauth2.credentials import Credentials

from pollux import (
    APIError,
    CachePolicy,
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
    run,
    run_many,
    stream,
)
from pollux.testing import Emulator, ErrorResponse, Reply, ToolCall
from tests._google import without_google

TOKEN = "ya29.vertex-access-token-0123456789"
MODEL = "gemini-2.5-flash"
PROJECT = "acme-prod"
LOCATION = "europe-west4"
SCOPE = f"projects/{PROJECT}/locations/{LOCATION}"
GENERATE = f"/vertex/v1beta1/{SCOPE}/publishers/google/models/{MODEL}:generateContent"
ONCE = RetryPolicy(max_attempts=1, max_elapsed_s=None)
WEATHER = ToolDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
_ENV = (
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
)


class Weather(pydantic.BaseModel):
    city: str
    temperature_c: float


@pytest.fixture(autouse=True)
def _no_google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    without_google(monkeypatch, tmp_path, _ENV)


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(api_key=TOKEN, models=(MODEL,)) as emulator:
        yield emulator


@functools.cache
def _private_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def adc_file(emu: Emulator, tmp_path: Path, project: str | None = PROJECT) -> Path:
    """A service-account ADC file whose ``token_uri`` is the emulator's token endpoint."""
    info: dict[str, Any] = {
        "type": "service_account",
        "client_email": "pollux-test@acme-prod.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "private_key_id": "key-0123456789",
        "private_key": _private_key(),
        "token_uri": emu.base_url("vertex") + "/token",
    }
    if project is not None:
        info["project_id"] = project
    path = tmp_path / "adc.json"
    path.write_text(json.dumps(info))
    return path


def vertex(emu: Emulator, **fields: Any) -> Config:
    options: dict[str, Any] = {
        "provider": "vertex",
        "model": MODEL,
        "project": PROJECT,
        "location": LOCATION,
        "base_url": emu.base_url("vertex"),
        "retry": ONCE,
        "request_timeout_s": 5.0,
    }
    options.update(fields)
    if options.get("credentials") == "adc":
        del options["credentials"]
    else:
        options.setdefault("credentials", Credentials(token=TOKEN))
    return Config(**options)


@pytest.fixture(params=["injected", "adc"])
def config(
    request: pytest.FixtureRequest,
    emu: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Config:
    if request.param == "adc":
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_file(emu, tmp_path)))
        return vertex(emu, credentials="adc")
    return vertex(emu)


def calls(emu: Emulator, route: str = "vertex.generate.content") -> list[Any]:
    return [r for r in emu.requests if r.route == route]


async def test_run_reaches_the_project_location_path_with_a_bearer_token(
    emu: Emulator, config: Config
) -> None:
    out = await run("Name a colour", config=config, temperature=0.5)
    assert out.text == "Emulated reply to: Name a colour"
    (call,) = calls(emu)
    assert call.path == GENERATE
    assert call.headers["authorization"] == f"Bearer {TOKEN}"
    assert call.json["generationConfig"]["temperature"] == 0.5


async def test_structured_output_tools_and_continuation(emu: Emulator, config: Config) -> None:
    out = await run("Weather in Oslo as JSON", config=config, output=Weather)
    assert isinstance(out.structured, Weather)
    emu.script(
        "vertex.generate",
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
                tool_results=[ToolResult(call_id=first.tool_calls[0].id, content='{"sky": 1}')],
            ),
        )
    assert second.text == "Paris is sunny."
    turns = calls(emu)[-1].json["contents"]
    assert [t["role"] for t in turns] == ["user", "model", "user"]


async def test_stream_equals_run(emu: Emulator, config: Config) -> None:
    events = [e async for e in stream(Environment(), Input("Hello there"), config=config)]
    done = events[-1]
    assert done.type == "done" and done.output is not None
    assert done.output.text == "Emulated reply to: Hello there"
    (call,) = calls(emu, "vertex.generate.stream")
    assert call.path.endswith(":streamGenerateContent") and call.query == {"alt": "sse"}


async def test_a_context_cache_lives_under_the_project_and_location(
    emu: Emulator, config: Config
) -> None:
    emu.wire("vertex").cache_min_tokens = 8
    env = Environment(
        instructions="Answer from the handbook.",
        sources=[Source.from_text("The handbook has many rules. " * 400)],
        cache=CachePolicy(ttl_seconds=600),
    )
    async with Session(config) as session:
        first = await session.interact(env, Input("Q1?"))
        second = await session.interact(env, Input("Q2?"))
    assert first.text and second.text
    (create,) = calls(emu, "vertex.caches.create")
    assert create.path == f"/vertex/v1beta1/{SCOPE}/cachedContents"
    assert create.json["model"] == f"{SCOPE}/publishers/google/models/{MODEL}"
    asks = calls(emu)
    assert len(asks) == 2
    assert all(a.json["cachedContent"].startswith(f"{SCOPE}/cachedContents/") for a in asks)
    assert second.usage.cached_tokens and second.usage.cached_tokens > 0


async def test_local_files_go_inline_and_gs_uris_by_reference(
    emu: Emulator, config: Config, tmp_path: Path
) -> None:
    png = tmp_path / "chart.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 4096)
    sources = [
        Source.from_file(png),
        Source.from_uri("gs://acme-data/report.pdf", mime_type="application/pdf"),
    ]
    results = await run_many(["Q1?", "Q2?"], sources=sources, config=config)
    assert results.status == "ok"
    for call in calls(emu):
        parts = call.json["contents"][0]["parts"]
        assert parts[0]["inlineData"]["mimeType"] == "image/png"
        assert parts[1]["fileData"] == {
            "fileUri": "gs://acme-data/report.pdf",
            "mimeType": "application/pdf",
        }
    assert not [r for r in emu.requests if "upload" in r.path or "files" in r.path]


async def test_a_file_too_large_to_inline_is_refused_before_any_io(
    emu: Emulator, tmp_path: Path
) -> None:
    video = tmp_path / "talk.mp4"
    with video.open("wb") as handle:
        handle.truncate(16 * (1 << 20))  # sparse: 16 MiB on paper
    with pytest.raises(ConfigurationError) as info:
        await run("Summarize", sources=[Source.from_file(video)], config=vertex(emu))
    assert "talk.mp4" in str(info.value)
    assert "gs://" in (info.value.hint or "") and "Cloud Storage" in (info.value.hint or "")
    assert emu.requests == []


async def test_a_refused_token_names_the_credentials_and_is_scrubbed(emu: Emulator) -> None:
    wrong = "ya29.revoked-token-0123456789"
    with pytest.raises(APIError) as info:
        await run("hi", config=vertex(emu, credentials=Credentials(token=wrong)))
    error = info.value
    assert error.provider == "vertex" and error.status_code == 401
    assert str(error).startswith("vertex generate failed")
    assert "application-default login" in (error.hint or "")
    assert "Config(credentials=...)" in (error.hint or "")
    assert wrong not in str(error) + (error.hint or "")


async def test_an_echoed_token_is_scrubbed_from_errors(emu: Emulator) -> None:
    emu.script("vertex.generate", ErrorResponse(400, message=f"bad header Bearer {TOKEN}"))
    with pytest.raises(APIError) as info:
        await run("hi", config=vertex(emu))
    assert TOKEN not in str(info.value) and "[REDACTED]" in str(info.value)


async def test_a_denied_project_names_the_iam_role(emu: Emulator) -> None:
    emu.wire("vertex").projects = {"other-project"}
    with pytest.raises(APIError) as info:
        await run("hi", config=vertex(emu))
    assert info.value.status_code == 403
    hint = info.value.hint or ""
    assert "roles/aiplatform.user" in hint and repr(PROJECT) in hint


async def test_a_model_missing_from_the_location_names_config_location(emu: Emulator) -> None:
    with pytest.raises(APIError) as info:
        await run("hi", config=vertex(emu, model="gemini-1.0-ultra"))
    assert info.value.status_code == 404
    hint = info.value.hint or ""
    assert "'gemini-1.0-ultra'" in hint and f"location {LOCATION!r}" in hint
    assert "GOOGLE_CLOUD_LOCATION" in hint


async def test_no_application_default_credentials_is_a_configuration_error(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigurationError) as info:
        await run("hi", config=vertex(emu, credentials="adc"))
    assert "application-default login" in (info.value.hint or "")
    assert emu.requests == []


async def test_the_adc_token_is_refreshed_once_and_reused(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_file(emu, tmp_path)))
    out = await run_many(["one", "two", "three"], config=vertex(emu, credentials="adc"))
    assert out.status == "ok"
    assert emu.wire("vertex").tokens_issued == 1
    assert all(c.headers["authorization"] == f"Bearer {TOKEN}" for c in calls(emu))


async def test_an_expired_injected_token_is_refreshed(emu: Emulator) -> None:
    refreshed: list[str] = []

    class Rotating(Credentials):  # type: ignore[misc]
        def refresh(self, request: Any) -> None:
            refreshed.append("x")
            self.token = TOKEN

    credentials = Rotating(token=None)
    out = await run("hi", config=vertex(emu, credentials=credentials))
    assert out.text and refreshed == ["x"]


async def test_check_ready_probes_the_model_in_the_location(emu: Emulator) -> None:
    ready = await check_ready(vertex(emu))
    assert ready.ready and ready.provider == "vertex" and ready.model_verified
    assert PROJECT in ready.message and LOCATION in ready.message
    missing = await check_ready(vertex(emu, model="gemini-0-nope"))
    assert not missing.ready and missing.status_code == 404
    assert "Config(location=...)" in missing.message


def test_project_location_and_endpoint_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "us-east5")
    monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", "https://gateway.example")
    config = Config(provider="vertex", model=MODEL)
    assert (config.project, config.location, config.base_url) == (
        "env-project",
        "us-east5",
        "https://gateway.example",
    )
    # The Config fields win over the environment.
    config = Config(provider="vertex", model=MODEL, project="p2", location="global")
    assert (config.project, config.location) == ("p2", "global")
    monkeypatch.delenv("GOOGLE_CLOUD_LOCATION")
    assert Config(provider="vertex", model=MODEL).location == "global"


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({}, "model required for provider='vertex'"),
        ({"model": MODEL, "api_key": "AIza-0123456789abcdef"}, "provider='gemini'"),
        ({"model": MODEL, "credentials": lambda: TOKEN}, "google.auth credentials"),
        ({"model": MODEL, "location": "europe-west4/x"}, "location='us-central1'"),
        ({"model": MODEL, "base_url": "gateway.example"}, "GOOGLE_VERTEX_BASE_URL"),
    ],
    ids=["no-model", "api-key", "token-callable", "bad-location", "bad-base-url"],
)
def test_config_names_the_wrong_setting(fields: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Config(provider="vertex", **fields)
    assert needle in str(info.value) + (info.value.hint or "")


@pytest.mark.parametrize("name", ["project", "location"])
def test_vertex_settings_are_refused_for_other_providers(name: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{name} is only valid for provider='vertex'"):
        Config(provider="gemini", model=MODEL, api_key="k" * 20, **{name: "x"})


async def test_an_error_status_is_retried(emu: Emulator) -> None:
    emu.script("vertex.generate", ErrorResponse(429))
    retry = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.002)
    out = await run("hi", config=vertex(emu, retry=retry))
    assert out.text == "Emulated reply to: hi"
    assert len(calls(emu)) == 2


async def test_provider_options_are_keyed_by_vertex(emu: Emulator) -> None:
    options = {"vertex": {"candidate_count": 1}, "gemini": {"presence_penalty": 0.5}}
    await run("hi", config=vertex(emu), provider_options=options)
    (call,) = calls(emu)
    assert call.json["generationConfig"].get("candidateCount") == 1
    assert "presencePenalty" not in call.json["generationConfig"]


def test_the_cli_checks_and_asks_from_the_google_variables(
    emu: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pollux._cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", emu.base_url("vertex"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", LOCATION)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_file(emu, tmp_path)))
    flags = ["--provider", "vertex", "--model", MODEL]
    assert main(["check", *flags]) == 0
    ready = capsys.readouterr()
    assert ready.out.startswith("ready: vertex"), ready.err
    assert main(["ask", "Who are the twins?", *flags]) == 0
    answer = capsys.readouterr()
    assert answer.out == "Emulated reply to: Who are the twins?\n"
    assert TOKEN not in ready.out + ready.err + answer.out + answer.err
    (call,) = calls(emu)
    assert call.path == GENERATE


async def test_a_call_is_priced_as_the_gemini_model_and_traced_as_vertex(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: tracer)
    out = await run("Price me", config=vertex(emu))
    tracer.shutdown()
    # genai-prices has no Vertex AI entry: the same Gemini model's price at Google.
    assert out.metrics.cost_usd is not None and out.metrics.cost_usd > 0
    (span,) = exporter.get_finished_spans()
    assert dict(span.attributes or {})["gen_ai.provider.name"] == "gcp.vertex_ai"


async def test_no_token_reaches_a_log_record_or_json(
    emu: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    emu.script("vertex.generate", ErrorResponse(500, message=f"upstream saw Bearer {TOKEN}"))
    retry = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.002)
    out = await run_many(["one"], config=vertex(emu, retry=retry))
    assert out.status == "ok"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert TOKEN not in logged
    assert TOKEN not in json.dumps(out.outputs[0].diagnostics.raw, default=str)


async def test_a_context_cache_is_refreshed_and_deleted_by_its_environment(emu: Emulator) -> None:
    from pollux.providers.vertex import delete_context_cache, refresh_context_cache

    emu.wire("vertex").cache_min_tokens = 8
    config = vertex(emu)
    env = Environment(
        instructions="Answer from the rules.",
        sources=[Source.from_text("The rule book has many rules. " * 400)],
        cache=CachePolicy(ttl_seconds=600),
    )
    await run("Q?", environment=env, config=config)
    (cache_id,) = emu.wire("vertex").caches
    expires = await refresh_context_cache(env, config=config, ttl_seconds=7200)
    assert expires is not None
    (update,) = calls(emu, "vertex.caches.update")
    assert update.path == f"/vertex/v1beta1/{SCOPE}/cachedContents/{cache_id}"
    assert await delete_context_cache(env, config=config) is True
    assert emu.wire("vertex").caches == {}
    assert await delete_context_cache(env, config=config) is False


def test_the_cli_records_then_replays_without_vertex_or_credentials(
    emu: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pollux._cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.txt").write_text("Who are the twins?\nWhich myth?\n")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", LOCATION)
    monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", emu.base_url("vertex"))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_file(emu, tmp_path)))
    flags = ["many", "q.txt", "--ledger", "runs.db", "--provider", "vertex", "--model", MODEL]
    assert main(flags) == 0
    recorded = capsys.readouterr()
    assert len(calls(emu)) == 2
    # No endpoint, no credentials: the ledger answers.
    monkeypatch.delenv("GOOGLE_VERTEX_BASE_URL")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "gone.json"))
    assert main([*flags, "--replay"]) == 0
    replayed = capsys.readouterr()
    assert len(calls(emu)) == 2
    texts = [json.loads(line)["text"] for line in replayed.out.splitlines()]
    assert texts == [json.loads(line)["text"] for line in recorded.out.splitlines()]
    assert TOKEN not in recorded.out + recorded.err + replayed.out + replayed.err


async def test_the_project_falls_back_to_the_credentials_then_is_named(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = vertex(emu, credentials="adc", project=None)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_file(emu, tmp_path)))
    async with Session(config) as session:
        await session.interact(Environment(), Input("hi"))
    (call,) = calls(emu)
    assert call.path == GENERATE  # the service account's project_id
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_file(emu, tmp_path, None)))
    with pytest.raises(ConfigurationError) as info:
        async with Session(config) as session:
            await session.interact(Environment(), Input("hi"))
    assert "GOOGLE_CLOUD_PROJECT" in (info.value.hint or "")
    assert len(calls(emu)) == 1
