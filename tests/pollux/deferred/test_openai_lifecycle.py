"""The deferred lifecycle with provider="openai", through the official SDK, on the emulator's
Batches and Files APIs and its virtual batch clock.

The tests that take ``target`` run the same behaviour on Azure OpenAI's global batch as well
(``provider="azure_openai"`` on its v1 API and on a dated ``api-version``), the same Batch API
on an Azure resource.

Default emulator stages: validating 1 s, in_progress 10 s, finalizing 1 s, cancelling 1 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest

from pollux import (
    APIError,
    Config,
    ConfigurationError,
    DeferredHandle,
    DeferredNotReadyError,
    RetryPolicy,
    Session,
    Source,
    cancel_deferred,
    collect_deferred,
    defer,
    inspect_deferred,
)
from pollux.testing import Emulator, ErrorResponse, Reply

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.005)


class Verdict(pydantic.BaseModel):
    label: str
    score: int


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url("openai"))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield emulator


@pytest.fixture
def config(emu: Emulator) -> Config:
    return Config(provider="openai", model="gpt-5-nano", retry=FAST_RETRY, request_timeout_s=5.0)


@dataclass(frozen=True)
class Target:
    """A service with the OpenAI Batch API: its emulator wire, Config and job-upload expiry."""

    wire: str
    config: Config
    files_url: str
    source_ttl_s: int


#: (id, api_version): ``openai`` itself, then Azure's v1 API and a dated api-version.
TARGETS = [("openai", None), ("azure-v1", None), ("azure-dated", "2025-04-01-preview")]


@pytest.fixture(params=TARGETS, ids=[n for n, _ in TARGETS])
def target(
    request: pytest.FixtureRequest, emu: Emulator, config: Config, monkeypatch: pytest.MonkeyPatch
) -> Target:
    name, api_version = request.param
    if name == "openai":
        return Target("openai", config, emu.base_url("openai"), 48 * 3600)
    # Set in the environment too, as a user would: module-level lifecycle calls that get only
    # the handle build their Config from it.
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", emu.base_url("azure_openai"))
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "sk-test")
    if api_version is None:
        monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_VERSION", api_version)
    azure = Config(
        provider="azure_openai",
        model="gpt-5-nano",  # the Global-Batch deployment
        retry=FAST_RETRY,
        request_timeout_s=5.0,
    )
    files_url = f"{emu.base_url('azure_openai')}/openai/v1"
    return Target("azure_openai", azure, files_url, 14 * 24 * 3600)


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF-1.4\n% a tiny test document\n%%EOF\n")
    return path


def routes(emu: Emulator, prefix: str = "openai") -> list[str]:
    return [r.route for r in emu.requests if r.route.startswith(prefix)]


def live_files(emu: Emulator, target: Target | None = None) -> dict[str, str]:
    """file id -> purpose, as the emulated Files API lists them."""
    url = target.files_url if target is not None else emu.base_url("openai")
    with openai.OpenAI(base_url=url, api_key="sk-test") as client:
        return {f.id: f.purpose for f in client.files.list().data}


def file_text(emu: Emulator, file_id: str, target: Target | None = None) -> str:
    url = target.files_url if target is not None else emu.base_url("openai")
    with openai.OpenAI(base_url=url, api_key="sk-test") as client:
        return client.files.content(file_id).text


async def test_full_lifecycle_in_prompt_order(emu: Emulator, target: Target) -> None:
    prompts = ["First?", "Second?", "Third?"]
    emu.script(f"{target.wire}.responses", Reply("one"), Reply("two"), Reply("three"))
    handle = await defer(
        prompts,
        sources=[Source.from_text("shared context")],
        instructions="Be brief.",
        config=target.config,
    )
    assert handle.provider == target.config.provider
    assert handle.model == "gpt-5-nano"
    assert handle.request_count == 3
    assert handle.job_id.startswith("batch_")
    assert handle.submitted_at == emu.now()
    state = handle.provider_state
    assert state is not None
    assert state["format"] == 1 and state["backend"] == target.config.provider

    # The input file: one line per prompt, stable ids, the realtime Responses body.
    lines = [
        json.loads(line) for line in file_text(emu, state["input_file_id"], target).splitlines()
    ]
    assert [line["custom_id"] for line in lines] == [
        "pollux-000000",
        "pollux-000001",
        "pollux-000002",
    ]
    assert {line["url"] for line in lines} == {"/v1/responses"}
    assert {line["method"] for line in lines} == {"POST"}
    first = lines[0]["body"]
    assert first["model"] == "gpt-5-nano"
    assert first["instructions"] == "Be brief."
    assert first["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "shared context"},
                {"type": "input_text", "text": "First?"},
            ],
        }
    ]
    assert "stream" not in first
    create = emu.requests_for(f"{target.wire}.batches.create")[0].json
    assert create["endpoint"] == "/v1/responses"
    assert create["completion_window"] == "24h"
    assert create["metadata"] == {
        "pollux_request_count": "3",
        "pollux_has_response_schema": "0",
    }
    assert create["output_expires_after"]["anchor"] == "created_at"

    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.provider_status) == ("queued", "validating")
    assert (snapshot.succeeded, snapshot.failed, snapshot.pending) == (0, 0, 3)
    assert not snapshot.is_terminal
    assert snapshot.expires_at == handle.submitted_at + 24 * 3600

    with pytest.raises(DeferredNotReadyError) as caught:
        await collect_deferred(handle)
    assert caught.value.snapshot.status == "queued"
    assert caught.value.hint

    emu.advance(5)
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.provider_status) == ("running", "in_progress")
    assert snapshot.succeeded == 1 and snapshot.pending == 2
    with pytest.raises(DeferredNotReadyError):
        await collect_deferred(handle)

    emu.advance(6.5)
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.provider_status) == ("running", "finalizing")

    emu.advance(1)
    snapshot = await inspect_deferred(handle)
    assert snapshot.status == "completed" and snapshot.is_terminal
    assert (snapshot.succeeded, snapshot.failed, snapshot.pending) == (3, 0, 0)
    assert snapshot.completed_at == handle.submitted_at + 12

    result = await collect_deferred(handle)
    assert result.status == "ok"
    assert result.answers == ["one", "two", "three"]
    assert result.prompt_indexes == (0, 1, 2)
    assert result.usage.total_tokens > 0
    deferred = result.outputs[1].diagnostics.raw["deferred"]
    assert deferred == {
        "job_id": handle.job_id,
        "request_id": "pollux-000001",
        "status": "succeeded",
        "error": None,
        "provider_status": "200",
        "finish_reason": "stop",
        "submitted_at": handle.submitted_at,
        "completed_at": snapshot.completed_at,
    }
    assert all(o.metrics.completion_status == "clean" for o in result.outputs)
    assert result.outputs[0].structured is None


async def test_partial_failures_from_the_error_file(emu: Emulator, target: Target) -> None:
    emu.script(
        f"{target.wire}.responses",
        Reply("fine"),
        ErrorResponse(400, message="Invalid prompt", code="invalid_prompt"),
        Reply("also fine"),
    )
    handle = await defer(["a?", "b?", "c?"], config=target.config)
    emu.advance(30)
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.provider_status) == ("partial", "completed")
    assert (snapshot.succeeded, snapshot.failed, snapshot.pending) == (2, 1, 0)

    result = await collect_deferred(handle)
    assert result.status == "partial"
    assert result.answers == ["fine", "", "also fine"]
    failed = result.outputs[1]
    assert failed.failed
    assert failed.metrics.completion_status == "error"
    assert failed.metrics.n_calls == 1
    error = failed.diagnostics.error
    assert error is not None
    assert "Invalid prompt" in error["message"]
    assert error["status_code"] == 400 and error["call_idx"] == 1 and error["hint"]
    assert failed.diagnostics.raw["deferred"]["status"] == "failed"
    assert failed.diagnostics.raw["deferred"]["provider_status"] == "400"
    assert result.errors[0] is None and result.errors[2] is None


async def test_all_failed_is_a_failed_job(emu: Emulator, target: Target) -> None:
    emu.script(f"{target.wire}.responses", ErrorResponse(500), ErrorResponse(500))
    handle = await defer(["a?", "b?"], config=target.config)
    emu.advance(30)
    assert (await inspect_deferred(handle)).status == "failed"
    result = await collect_deferred(handle)
    assert result.status == "error"
    assert [o.failed for o in result.outputs] == [True, True]
    error = result.outputs[0].diagnostics.error
    assert error is not None and error["retryable"] is True
    assert error["hint"] == "Submit the prompt again with defer(), or run it with run()."


async def test_cancel_while_running_keeps_what_finished(emu: Emulator, target: Target) -> None:
    handle = await defer(["a?", "b?", "c?"], config=target.config)
    emu.advance(5)  # one of three lines is done
    await cancel_deferred(handle)
    snapshot = await inspect_deferred(handle)
    assert snapshot.status == "cancelling"
    with pytest.raises(DeferredNotReadyError):
        await collect_deferred(handle)
    emu.advance(2)
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.provider_status) == ("partial", "cancelled")
    assert (snapshot.succeeded, snapshot.failed, snapshot.pending) == (1, 2, 0)
    result = await collect_deferred(handle)
    assert result.status == "partial"
    assert result.outputs[0].has_answer
    for output in result.outputs[1:]:
        assert output.failed
        assert output.metrics.n_calls == 0
        assert output.diagnostics.raw["deferred"]["status"] == "cancelled"
        assert output.diagnostics.raw["deferred"]["provider_status"] == "batch_cancelled"
        assert output.diagnostics.error is not None
        assert output.diagnostics.error["error_category"] == "cancelled"


async def test_cancel_before_anything_ran(emu: Emulator, target: Target) -> None:
    handle = await defer(["a?", "b?"], config=target.config)
    await cancel_deferred(handle)
    emu.advance(2)
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.failed) == ("cancelled", 2)
    result = await collect_deferred(handle)
    assert result.status == "error"
    assert [o.diagnostics.raw["deferred"]["status"] for o in result.outputs] == [
        "cancelled",
        "cancelled",
    ]


async def test_cancel_after_completion_is_a_no_op(emu: Emulator, target: Target) -> None:
    handle = await defer("a?", config=target.config)
    emu.advance(30)
    await cancel_deferred(handle)  # the API refuses; pollux sees the job ended and returns
    assert (await inspect_deferred(handle)).status == "completed"
    assert (await collect_deferred(handle)).answers[0]


async def test_expired_job(monkeypatch: pytest.MonkeyPatch) -> None:
    # Processing would take 30 h: the 24 h window ends with 2 of 3 lines done.
    with Emulator(batch_durations={"in_progress": 30 * 3600}) as emu:
        monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        config = Config(provider="openai", model="gpt-5-nano", retry=FAST_RETRY)
        partly = await defer(["a?", "b?", "c?"], config=config)
        emu.advance(25 * 3600)
        snapshot = await inspect_deferred(partly)
        assert (snapshot.status, snapshot.provider_status) == ("partial", "expired")
        assert (snapshot.succeeded, snapshot.failed) == (2, 1)
        assert snapshot.completed_at == snapshot.expires_at
        result = await collect_deferred(partly)
        assert [o.diagnostics.raw["deferred"]["status"] for o in result.outputs] == [
            "succeeded",
            "succeeded",
            "expired",
        ]
        assert result.outputs[2].diagnostics.raw["deferred"]["provider_status"] == "batch_expired"


async def test_expired_before_anything_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test has its own event loop, so the shared Sessions (and their clients) are new.
    with Emulator(batch_durations={"in_progress": 1000 * 3600}) as emu:
        monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url("openai"))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        config = Config(provider="openai", model="gpt-5-nano", retry=FAST_RETRY)
        handle = await defer(["a?", "b?"], config=config)
        emu.advance(25 * 3600)
        snapshot = await inspect_deferred(handle)
        assert (snapshot.status, snapshot.succeeded, snapshot.failed) == ("expired", 0, 2)
        result = await collect_deferred(handle)
        assert result.status == "error"
        assert {o.diagnostics.raw["deferred"]["status"] for o in result.outputs} == {"expired"}


async def test_handle_survives_a_restart(emu: Emulator, target: Target) -> None:
    emu.script(f"{target.wire}.responses", Reply("kept"), Reply("order"))
    async with Session(target.config) as session:
        handle = await session.defer(["x?", "y?"])
    saved = json.dumps(handle.to_dict())
    emu.advance(30)
    restored = DeferredHandle.from_dict(json.loads(saved))
    assert restored == handle
    async with Session(target.config) as fresh:
        assert (await fresh.inspect_deferred(restored)).status == "completed"
        result = await fresh.collect_deferred(restored)
    assert result.answers == ["kept", "order"]
    # Collecting again (another process, say) gives the same answers: result files are kept.
    again = await collect_deferred(DeferredHandle.from_dict(json.loads(saved)))
    assert again.answers == ["kept", "order"]


async def test_uploads_are_owned_and_released_once_terminal(
    emu: Emulator, target: Target, pdf: Path
) -> None:
    handle = await defer(["a?", "b?"], sources=[Source.from_file(pdf)], config=target.config)
    state = handle.provider_state
    assert state is not None
    owned = state["owned_file_ids"]
    assert len(owned) == 2  # the PDF (uploaded once for both prompts) and the JSONL input
    assert {live_files(emu, target)[i] for i in owned} == {"user_data", "batch"}
    upload = next(
        r for r in emu.requests_for(f"{target.wire}.files.create") if b"user_data" in r.body
    )
    assert str(target.source_ttl_s).encode() in upload.body  # outlives the job
    lines = [json.loads(x) for x in file_text(emu, state["input_file_id"], target).splitlines()]
    parts = [line["body"]["input"][0]["content"][0] for line in lines]
    assert parts[0] == parts[1] == {"type": "input_file", "file_id": owned[0]}

    await inspect_deferred(handle)  # still queued: nothing is deleted
    assert set(owned) <= set(live_files(emu, target))
    emu.advance(30)
    await inspect_deferred(handle)
    remaining = live_files(emu, target)
    assert not set(owned) & set(remaining)
    assert set(remaining.values()) == {"batch_output"}  # results stay until their expiry
    deletes = len(emu.requests_for(f"{target.wire}.files.delete"))
    await inspect_deferred(handle)
    await collect_deferred(handle)
    assert len(emu.requests_for(f"{target.wire}.files.delete")) == deletes  # no repeated deletes


async def test_failed_submission_leaves_nothing_behind(
    emu: Emulator, target: Target, pdf: Path
) -> None:
    emu.script(f"{target.wire}.batches.create", ErrorResponse(400, message="no batches today"))
    with pytest.raises(APIError) as caught:
        await defer(["a?"], sources=[Source.from_file(pdf)], config=target.config)
    assert caught.value.phase == "batch_submit"
    assert caught.value.provider == target.config.provider
    assert "no batches today" in str(caught.value)
    assert live_files(emu, target) == {}


async def test_retryable_submit_failure_is_retried(emu: Emulator, target: Target) -> None:
    emu.script(f"{target.wire}.batches.create", ErrorResponse(503))
    handle = await defer(["a?"], config=target.config)
    assert handle.job_id
    # The first attempt's input file was deleted; only the second one is live.
    assert list(live_files(emu, target).values()) == ["batch"]


async def test_structured_output_and_schema_drift(emu: Emulator, target: Target) -> None:
    emu.script(f"{target.wire}.responses", Reply(structured={"label": "good", "score": 3}))
    handle = await defer("Rate it.", output=Verdict, config=target.config)
    assert handle.schema_hash is not None
    body = json.loads(file_text(emu, handle.provider_state["input_file_id"], target))["body"]  # type: ignore[index]
    assert body["text"]["format"]["type"] == "json_schema"
    assert (
        emu.requests_for(f"{target.wire}.batches.create")[0].json["metadata"][
            "pollux_has_response_schema"
        ]
        == "1"
    )
    emu.advance(30)

    plain = await collect_deferred(handle)
    assert plain.outputs[0].structured is None  # no schema at collect time: text only
    assert json.loads(plain.answers[0]) == {"label": "good", "score": 3}

    typed = await collect_deferred(handle, response_schema=Verdict)
    assert typed.structured == [Verdict(label="good", score=3)]

    class Changed(pydantic.BaseModel):
        label: str

    requests_before = len(emu.requests)
    with pytest.raises(ConfigurationError, match="does not match") as caught:
        await collect_deferred(handle, response_schema=Changed)
    assert caught.value.hint
    assert len(emu.requests) == requests_before  # refused before any I/O


async def test_schema_at_collect_without_one_at_submit(emu: Emulator, config: Config) -> None:
    handle = await defer("a?", config=config)
    with pytest.raises(ConfigurationError, match="without output="):
        await collect_deferred(handle, response_schema=Verdict)


def _edited(handle: DeferredHandle, **state: Any) -> DeferredHandle:
    data = handle.to_dict()
    data["provider_state"] = {**data["provider_state"], **state}
    return DeferredHandle.from_dict(data)


async def test_handle_format_drift_is_detected(emu: Emulator, config: Config) -> None:
    handle = await defer("a?", config=config)
    for bad in (_edited(handle, format=99), _edited(handle, backend="gemini")):
        with pytest.raises(ConfigurationError) as caught:
            await inspect_deferred(bad)
        assert caught.value.hint
    stripped = DeferredHandle.from_dict({**handle.to_dict(), "provider_state": None})
    with pytest.raises(ConfigurationError, match="not written by this version"):
        await collect_deferred(stripped)


async def test_lifecycle_needs_the_key_in_this_process(
    emu: Emulator, config: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    handle = await defer("a?", config=config)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.chdir(tmp_path)  # no .env either
    for lifecycle in (inspect_deferred, collect_deferred, cancel_deferred):
        with pytest.raises(ConfigurationError, match="API key") as caught:
            await lifecycle(handle)
        hint = caught.value.hint or ""
        # These calls take no api_key=; the hint names what does work.
        assert "OPENAI_API_KEY" in hint and "Session" in hint
        assert "pass api_key=" not in hint


async def test_session_rejects_a_handle_of_another_provider(emu: Emulator, config: Config) -> None:
    mock_handle = await defer("a?", config=Config(provider="openai", model="m", use_mock=True))
    async with Session(config) as session:
        with pytest.raises(ConfigurationError, match="mock provider"):
            await session.inspect_deferred(mock_handle)
    with pytest.raises(ConfigurationError, match="DeferredHandle"):
        await inspect_deferred({"job_id": "x"})  # type: ignore[arg-type]


async def test_unsupported_options_fail_before_io(emu: Emulator, config: Config) -> None:
    with pytest.raises(ConfigurationError, match="seed"):
        await defer("a?", seed=1, config=config)
    with pytest.raises(ConfigurationError, match="at least one prompt") as caught:
        await defer([], config=config)
    assert caught.value.hint
    with pytest.raises(ConfigurationError, match="YouTube"):
        await defer("a?", sources=[Source.from_youtube("https://youtu.be/x")], config=config)
    assert routes(emu) == []


COLLECTOR = """
import asyncio, json, sys
from pollux import DeferredHandle, collect_deferred, inspect_deferred

async def main():
    handle = DeferredHandle.from_dict(json.loads(open(sys.argv[1]).read()))
    snapshot = await inspect_deferred(handle)
    result = await collect_deferred(handle)
    print(json.dumps([snapshot.status, result.status, result.answers]))

asyncio.run(main())
"""


async def test_collect_in_another_process(emu: Emulator, config: Config, tmp_path: Path) -> None:
    emu.script("openai.responses", Reply("from"), Reply("elsewhere"))
    handle = await defer(["a?", "b?"], config=config)
    job = tmp_path / "job.json"
    job.write_text(json.dumps(handle.to_dict()))
    emu.advance(30)
    # The child inherits OPENAI_BASE_URL and OPENAI_API_KEY: lifecycle calls take only the handle.
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", COLLECTOR, str(job)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["completed", "ok", ["from", "elsewhere"]]


async def test_a_collected_answer_that_fails_its_schema_is_counted(
    emu: Emulator, config: Config
) -> None:
    emu.script(
        "openai.responses",
        Reply(structured={"label": "good", "score": 3}),
        Reply("I would rather not rate it."),
    )
    handle = await defer(["Rate a.", "Rate b."], output=Verdict, config=config)
    emu.advance(30)
    result = await collect_deferred(handle, response_schema=Verdict)
    assert result.status == "partial"
    assert result.structured[0] == Verdict(label="good", score=3)
    error = result.errors[1]
    assert error is not None and error["error_category"] == "structured_output"
    assert result.outputs[1].text == "I would rather not rate it."
