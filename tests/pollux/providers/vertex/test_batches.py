"""defer / inspect / collect / cancel on Vertex AI batch prediction, against the emulator.

The job's JSONL is staged in Cloud Storage under ``Config.staging_uri`` (the emulator's
``"gcs"`` wire, reached through ``STORAGE_EMULATOR_HOST``), the job runs on the virtual clock and
writes its predictions back there. The module-level lifecycle calls take only the handle: the
project and location come from the job's name, the credentials from ADC.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from google.oauth2.credentials import Credentials

from pollux import (
    Config,
    ConfigurationError,
    DeferredHandle,
    DeferredNotReadyError,
    Session,
    collect_deferred,
    defer,
)
from pollux.testing import Emulator, ErrorResponse, Reply
from tests._google import without_google

from .test_end_to_end import MODEL, PROJECT, TOKEN, adc_file

LOCATION = "us-central1"
STAGING = "gs://acme-batch/pollux"
JOBS = f"/vertex/v1beta1/projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs"


@pytest.fixture(autouse=True)
def _google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    without_google(
        monkeypatch,
        tmp_path,
        ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "POLLUX_VERTEX_STAGING_URI"),
    )


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator(api_key=TOKEN, models=(MODEL,)) as emulator:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.base_url("gcs"))
        monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", emulator.base_url("vertex"))
        yield emulator


def vertex(**fields: Any) -> Config:
    options: dict[str, Any] = {
        "provider": "vertex",
        "model": MODEL,
        "project": PROJECT,
        "location": LOCATION,
        "credentials": Credentials(token=TOKEN),
        "staging_uri": STAGING,
    }
    options.update(fields)
    return Config(**options)


def restarted(handle: DeferredHandle) -> DeferredHandle:
    """The handle as a new process reads it back from disk."""
    return DeferredHandle.from_dict(json.loads(json.dumps(handle.to_dict())))


class Item(pydantic.BaseModel):
    name: str


async def test_a_job_is_staged_run_and_collected_in_prompt_order(emu: Emulator) -> None:
    emu.script(
        "vertex.generate.content",
        Reply(text='{"name": "first"}'),
        ErrorResponse(400, message="bad request"),
        Reply(text='{"name": "third"}'),
    )
    async with Session(vertex()) as session:
        handle = await session.defer(["a?", "b?", "c?"], instructions="Be brief.", output=Item)
        assert handle.provider == "vertex" and handle.job_id.startswith(
            JOBS.removeprefix("/vertex/v1beta1/")
        )
        (upload,) = emu.requests_for("gcs.objects.insert")
        lines = [json.loads(line) for line in upload.body.decode().splitlines()]
        assert [line["request"]["labels"]["pollux_key"] for line in lines] == [
            "pollux-000000",
            "pollux-000001",
            "pollux-000002",
        ]
        assert lines[0]["request"]["systemInstruction"]["parts"] == [{"text": "Be brief."}]
        (create,) = emu.requests_for("vertex.batches.create")
        assert create.path == JOBS
        assert create.json["inputConfig"]["gcsSource"]["uris"][0].startswith(STAGING + "/")
        assert create.json["model"] == f"publishers/google/models/{MODEL}"
        snapshot = await session.inspect_deferred(handle)
        assert snapshot.status == "queued" and snapshot.pending == 3
        with pytest.raises(DeferredNotReadyError):
            await session.collect_deferred(handle)
        emu.advance(60)
        result = await session.collect_deferred(restarted(handle), response_schema=Item)
    assert result.status == "partial"
    assert result.outputs[0].structured == Item(name="first")
    assert result.outputs[2].structured == Item(name="third")
    failed = result.outputs[1]
    assert failed.metrics.completion_status == "error"
    assert result.outputs[0].metrics.cost_usd  # priced at the Gemini model's batch rate
    # The staged input is deleted once the job ended; the predictions stay in the bucket.
    objects = list(emu.wire("gcs").objects)
    assert len(objects) == 1 and objects[0].endswith("/predictions.jsonl")


async def test_lifecycle_calls_take_only_the_handle(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    handle = await defer(["one", "two"], config=vertex())
    # Another process: no Config at hand, the credentials from ADC, the project and location
    # from the job's name.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_file(emu, tmp_path)))
    emu.advance(60)
    result = await collect_deferred(restarted(handle))
    assert result.answers == ["Emulated reply to: one", "Emulated reply to: two"]
    assert all(r.path.startswith(JOBS) for r in emu.requests_for("vertex.batches.get"))


async def test_cancel(emu: Emulator) -> None:
    async with Session(vertex()) as session:
        handle = await session.defer(["a", "b"])
        await session.cancel_deferred(handle)
        assert emu.requests_for("vertex.batches.cancel")
        snapshot = await session.inspect_deferred(handle)
        assert snapshot.is_terminal and snapshot.status == "cancelled"
        result = await session.collect_deferred(handle)
    assert [o.metrics.completion_status for o in result.outputs] == ["error", "error"]


async def test_defer_without_a_staging_uri_is_refused_before_any_io(emu: Emulator) -> None:
    with pytest.raises(ConfigurationError) as info:
        await defer(["x"], config=vertex(staging_uri=None))
    assert "staging_uri" in str(info.value)
    assert "POLLUX_VERTEX_STAGING_URI" in (info.value.hint or "")
    assert emu.requests == []


async def test_a_handle_from_another_location_names_the_setting(emu: Emulator) -> None:
    handle = await defer(["x"], config=vertex())
    async with Session(vertex(location="europe-west4")) as session:
        with pytest.raises(ConfigurationError) as info:
            await session.inspect_deferred(handle)
    assert "Config(project=..., location=...)" in (info.value.hint or "")


async def test_a_missing_bucket_names_the_staging_setting(emu: Emulator) -> None:
    emu.script("gcs.objects.insert", ErrorResponse(404, message="The bucket does not exist."))
    with pytest.raises(Exception) as info:
        await defer(["x"], config=vertex())
    assert "staging_uri" in (getattr(info.value, "hint", "") or "")
    assert not emu.requests_for("vertex.batches.create")


def test_staging_uri_is_checked_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigurationError, match="gs://"):
        vertex(staging_uri="s3://bucket/x")
    monkeypatch.setenv("POLLUX_VERTEX_STAGING_URI", "gs://env-bucket/jobs")
    assert vertex(staging_uri=None).staging_uri == "gs://env-bucket/jobs"
