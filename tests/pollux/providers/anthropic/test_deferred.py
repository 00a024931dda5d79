"""The deferred lifecycle with provider="anthropic" on Message Batches, through the official SDK,
against the emulator's Batches and Files APIs and its virtual clock."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest

from pollux import (
    Config,
    ConfigurationError,
    DeferredHandle,
    DeferredNotReadyError,
    RetryPolicy,
    Source,
    cancel_deferred,
    collect_deferred,
    defer,
    inspect_deferred,
)
from pollux.testing import Emulator, ErrorResponse, Reply

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay_s=0.001, max_delay_s=0.005)
MODEL = "claude-haiku-4-5"


class Verdict(pydantic.BaseModel):
    label: str
    score: int


@pytest.fixture
def emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator() as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url("anthropic"))
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        yield emulator


@pytest.fixture
def config(emu: Emulator) -> Config:
    return Config(provider="anthropic", model=MODEL, retry=FAST_RETRY, request_timeout_s=5.0)


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF-1.4\n% a tiny test document\n%%EOF\n")
    return path


async def test_full_lifecycle_in_prompt_order(emu: Emulator, config: Config, pdf: Path) -> None:
    emu.script("anthropic.messages.create", Reply("one"), Reply("two"), Reply("three"))
    handle = await defer(
        ["First?", "Second?", "Third?"],
        sources=[Source.from_file(pdf)],
        instructions="Be brief.",
        config=config,
    )
    assert handle.provider == "anthropic"
    assert handle.request_count == 3
    state = handle.provider_state
    assert state is not None
    (owned,) = state["owned_file_ids"]

    (create,) = emu.requests_for("anthropic.batches.create")
    entries = create.json["requests"]
    assert [e["custom_id"] for e in entries] == ["pollux-000000", "pollux-000001", "pollux-000002"]
    params = entries[0]["params"]
    assert params["model"] == MODEL
    assert params["system"] == [{"type": "text", "text": "Be brief."}]
    assert params["messages"][0]["content"][0]["source"] == {"type": "file", "file_id": owned}
    assert "stream" not in params
    assert "cache_control" not in json.dumps(params)  # no warm-up possible in a batch
    assert "files-api-2025-04-14" in create.headers.get("anthropic-beta", "")

    snapshot = await inspect_deferred(handle)
    assert snapshot.status == "running"
    assert snapshot.pending == 3
    with pytest.raises(DeferredNotReadyError) as not_ready:
        await collect_deferred(handle)
    assert not_ready.value.snapshot.status == "running"
    assert emu.requests_for("anthropic.files.delete") == []

    emu.advance(60)
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.succeeded, snapshot.pending) == ("completed", 3, 0)
    assert snapshot.is_terminal
    assert snapshot.completed_at is not None and snapshot.expires_at is not None
    # The job's upload is deleted once the job ended.
    (delete,) = emu.requests_for("anthropic.files.delete")
    assert delete.path.endswith(owned)

    results = await collect_deferred(handle)
    assert results.status == "ok"
    assert results.answers == ["one", "two", "three"]
    first = results.outputs[0]
    assert first.diagnostics.raw["deferred"]["request_id"] == "pollux-000000"
    assert first.usage.input_tokens > 0
    assert len(emu.requests_for("anthropic.files.delete")) == 1  # not deleted twice


async def test_per_request_errors_and_structured_output(emu: Emulator, config: Config) -> None:
    emu.script(
        "anthropic.messages.create",
        Reply(structured={"label": "a", "score": 1}),
        ErrorResponse(400, message="bad thing"),
    )
    handle = await defer(["one", "two"], config=config, output=Verdict)
    emu.advance(60)
    results = await collect_deferred(handle, response_schema=Verdict)
    assert results.status == "partial"
    good, bad = results.outputs
    assert good.structured == Verdict(label="a", score=1)
    assert bad.metrics.completion_status == "error"
    assert bad.diagnostics.error is not None
    assert "bad thing" in bad.diagnostics.error["message"]
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.succeeded, snapshot.failed) == ("partial", 1, 1)


async def test_cancel_gives_cancelled_requests(emu: Emulator, config: Config) -> None:
    handle = await defer(["a", "b"], config=config)
    await cancel_deferred(handle)
    snapshot = await inspect_deferred(handle)
    assert snapshot.status == "cancelling"
    emu.advance(5)
    snapshot = await inspect_deferred(handle)
    assert snapshot.status == "cancelled"
    results = await collect_deferred(handle)
    assert results.status == "error"
    assert [o.diagnostics.raw["deferred"]["status"] for o in results.outputs] == [
        "cancelled",
        "cancelled",
    ]
    # Cancelling an ended batch leaves it alone.
    await cancel_deferred(handle)


async def test_expired_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    with Emulator(batch_durations={"in_progress": 200_000}) as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url("anthropic"))
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")  # lifecycle calls read it
        cfg = Config(provider="anthropic", model=MODEL, retry=FAST_RETRY)
        handle = await defer(["a"], config=cfg)
        emu.advance(25 * 3600)
        snapshot = await inspect_deferred(handle)
        assert snapshot.status == "expired"
        results = await collect_deferred(handle)
        assert results.outputs[0].diagnostics.raw["deferred"]["status"] == "expired"


async def test_too_many_requests_refused_before_any_io(
    emu: Emulator, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pollux.providers.anthropic import deferred

    monkeypatch.setattr(deferred, "MAX_REQUESTS", 2)
    with pytest.raises(ConfigurationError) as caught:
        await defer(["a", "b", "c"], config=config)
    assert "Split" in (caught.value.hint or "")
    assert emu.requests == []


async def test_collect_in_another_process(emu: Emulator, config: Config, tmp_path: Path) -> None:
    emu.script("anthropic.messages.create", Reply("far away"))
    handle = await defer(["where?"], config=config)
    emu.advance(60)
    saved = tmp_path / "job.json"
    saved.write_text(json.dumps(handle.to_dict()))
    script = (
        "import asyncio, json, sys\n"
        "from pollux import DeferredHandle, collect_deferred\n"
        "h = DeferredHandle.from_dict(json.loads(open(sys.argv[1]).read()))\n"
        "print(json.dumps(asyncio.run(collect_deferred(h)).answers))\n"
    )
    env = {**os.environ, "ANTHROPIC_BASE_URL": emu.base_url("anthropic")}
    env["ANTHROPIC_API_KEY"] = "sk-ant-test"
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script, str(saved)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["far away"]
    restored = DeferredHandle.from_dict(json.loads(saved.read_text()))
    assert restored == handle


async def test_results_out_of_order_come_back_in_prompt_order(
    emu: Emulator, config: Config
) -> None:
    # Anthropic documents that batch results may not follow the request order: pollux matches
    # them back to the prompts by custom_id.
    emu.script("anthropic.messages.create", Reply("one"), Reply("two"), Reply("three"))
    handle = await defer(["First?", "Second?", "Third?"], config=config)
    emu.advance(60)
    assert (await inspect_deferred(handle)).status == "completed"
    (batch,) = emu.wire("anthropic").batches.values()
    batch.lines.reverse()
    assert batch.lines[0]["custom_id"] == "pollux-000002"
    restarted = DeferredHandle.from_dict(json.loads(json.dumps(handle.to_dict())))
    results = await collect_deferred(restarted)
    assert results.answers == ["one", "two", "three"]
    ids = [o.diagnostics.raw["deferred"]["request_id"] for o in results.outputs]
    assert ids == ["pollux-000000", "pollux-000001", "pollux-000002"]
