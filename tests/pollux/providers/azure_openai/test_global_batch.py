"""Deferred delivery on Azure OpenAI's global batch, through the official SDK's clients, against
the emulator's Azure wire (its Files and Batches endpoints on the virtual batch clock).

The lifecycle itself (statuses, partial results, cancellation, restarts, uploads released once
the job ended) runs parametrized with OpenAI's in ``tests/pollux/deferred/
test_openai_lifecycle.py``; here is what Azure adds: both API surfaces and both credentials,
the Global-Batch deployment in every line, Azure's expiries, and hints that name the settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pollux import (
    APIError,
    Config,
    Session,
    defer,
)
from pollux.testing import Emulator, ErrorResponse, Reply

from ._azure import KEY, VERSION, azure_config

DEPLOYMENT = BATCH_DEPLOYMENT = "gpt5-mini-global-batch"
FOURTEEN_DAYS = 14 * 24 * 3600


def azure(emu: Emulator, **fields: Any) -> Config:
    return azure_config(emu, BATCH_DEPLOYMENT, **fields)


def _input_lines(emu: Emulator) -> list[dict[str, Any]]:
    upload = next(
        r
        for r in emu.requests_for("azure_openai.files.create")
        if b'name="purpose"' in r.body
        if b"\r\n\r\nbatch\r\n" in r.body
    )
    body = upload.body.decode()
    start = body.index('{"custom_id"')
    end = body.rindex("}") + 1
    return [json.loads(line) for line in body[start:end].splitlines()]


async def test_a_job_runs_on_the_batch_deployment_over_each_surface(
    emu: Emulator, config: Config
) -> None:
    emu.script("azure_openai.responses", Reply("Castor"), Reply("Pollux"))
    async with Session(config) as session:
        handle = await session.defer(["First twin?", "Second twin?"], instructions="Be brief.")
        assert handle.provider == "azure_openai" and handle.model == BATCH_DEPLOYMENT
        assert (await session.inspect_deferred(handle)).status == "queued"
        emu.advance(30)
        result = await session.collect_deferred(handle)
    assert result.answers == ["Castor", "Pollux"]

    # Every line names the Global-Batch deployment as its model, Azure's Responses batch url.
    lines = _input_lines(emu)
    assert {line["body"]["model"] for line in lines} == {BATCH_DEPLOYMENT}
    assert {line["url"] for line in lines} == {"/v1/responses"}
    (create,) = emu.requests_for("azure_openai.batches.create")
    assert create.json["endpoint"] == "/v1/responses"
    assert create.json["output_expires_after"]["seconds"] >= FOURTEEN_DAYS
    (upload,) = emu.requests_for("azure_openai.files.create")
    assert str(FOURTEEN_DAYS).encode() in upload.body  # Azure's minimum for a batch file
    if config.api_version is None:
        assert create.path == "/azure/openai/v1/batches" and create.query == {}
    else:
        assert create.path == "/azure/openai/batches"
        assert create.query == {"api-version": VERSION}
    # Files, batches and results all carry the surface's credential, never another.
    for request in emu.requests:
        sent = {k for k in request.headers if k in ("api-key", "authorization")}
        assert sent, request.route
    assert KEY not in json.dumps(handle.to_dict())


async def test_a_standard_deployment_fails_the_job_with_a_hint() -> None:
    # The resource holds only a standard deployment: Azure fails the job's validation.
    with Emulator(api_key=KEY, models=("gpt5-mini-standard",)) as emu:
        async with Session(azure(emu)) as session:
            handle = await session.defer(["a?", "b?"])
            emu.advance(30)
            snapshot = await session.inspect_deferred(handle)
            assert (snapshot.status, snapshot.provider_status) == ("failed", "failed")
            result = await session.collect_deferred(handle)
    assert result.status == "error"
    for output in result.outputs:
        error = output.diagnostics.error
        assert error is not None and error["provider"] == "azure_openai"
        assert "Global-Batch" in error["hint"] and repr(BATCH_DEPLOYMENT) in error["hint"]
        assert "Config.model" in error["hint"]


async def test_a_refused_deployment_at_submit_names_it(emu: Emulator) -> None:
    emu.script(
        "azure_openai.batches.create",
        ErrorResponse(404, message="The API deployment for this resource does not exist."),
    )
    with pytest.raises(APIError) as caught:
        await defer(["a?"], config=azure(emu))
    error = caught.value
    assert error.provider == "azure_openai" and error.phase == "batch_submit"
    assert "Global-Batch" in (error.hint or "") and BATCH_DEPLOYMENT in (error.hint or "")
    # The input file uploaded before the refusal is deleted again.
    assert emu.requests[-1].route == "azure_openai.files.delete"


async def test_a_refused_api_version_at_submit_names_it(emu: Emulator) -> None:
    emu.script(
        "azure_openai.batches.create", ErrorResponse(400, message="API version not supported")
    )
    with pytest.raises(APIError) as caught:
        await defer(["a?"], config=azure(emu, api_version="2024-02-01"))
    assert "Config(api_version=...)" in (caught.value.hint or "")
    assert "'2024-02-01'" in (caught.value.hint or "")


async def test_a_line_that_failed_names_azure(emu: Emulator) -> None:
    emu.script(
        "azure_openai.responses",
        Reply("fine"),
        ErrorResponse(400, message="Invalid prompt", code="invalid_prompt"),
    )
    async with Session(azure(emu)) as session:
        handle = await session.defer(["a?", "b?"])
        emu.advance(30)
        result = await session.collect_deferred(handle)
    assert result.status == "partial"
    error = result.outputs[1].diagnostics.error
    assert error is not None and error["provider"] == "azure_openai"
    assert "Invalid prompt" in error["message"]


def test_the_cli_defers_and_collects_from_the_azure_variables(
    emu: Emulator, tmp_path: Path, cli_env: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from pollux._cli.main import main

    (tmp_path / "q.txt").write_text("Who are the twins?\n")
    flags = cli_env
    assert main(["defer", "q.txt", "--handle", "job.json", *flags]) == 0
    emu.advance(30)
    assert main(["collect", "job.json"]) == 0  # the handle names provider and model
    out = capsys.readouterr()
    assert "Emulated reply to: Who are the twins?" in out.out, out.err
    assert KEY not in out.out + out.err + (tmp_path / "job.json").read_text()
