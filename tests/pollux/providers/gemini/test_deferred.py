"""defer / inspect_deferred / collect_deferred / cancel_deferred on the Gemini Batch API,
through the SDK against the emulator (virtual clock), asserting on the request log."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from pollux import (
    Config,
    DeferredHandle,
    DeferredNotReadyError,
    Session,
    Source,
    cancel_deferred,
    collect_deferred,
    defer,
    inspect_deferred,
)
from pollux.providers.gemini import deferred as gemini_deferred
from pollux.testing import Emulator, ErrorResponse, Reply

from .conftest import routes


def restarted(handle: DeferredHandle) -> DeferredHandle:
    """The handle as a new process reads it back from disk."""
    return DeferredHandle.from_dict(json.loads(json.dumps(handle.to_dict())))


async def test_inline_job_lifecycle_in_prompt_order(emu: Emulator, config: Config) -> None:
    emu.script(
        "gemini.generate.content", Reply(text="first"), Reply(text="second"), Reply(text="third")
    )
    handle = await defer(["a?", "b?", "c?"], instructions="Be brief.", config=config)
    assert handle.provider == "gemini" and handle.request_count == 3
    (create,) = emu.requests_for("gemini.batches.create")
    requests = create.json["batch"]["inputConfig"]["requests"]["requests"]
    assert [r["metadata"]["key"] for r in requests] == [
        "pollux-000000",
        "pollux-000001",
        "pollux-000002",
    ]
    assert requests[0]["request"]["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    snapshot = await inspect_deferred(restarted(handle))
    assert snapshot.status == "queued" and snapshot.pending == 3
    with pytest.raises(DeferredNotReadyError):
        await collect_deferred(restarted(handle))
    emu.advance(30)
    snapshot = await inspect_deferred(restarted(handle))
    assert snapshot.status == "completed" and snapshot.succeeded == 3 and snapshot.pending == 0
    result = await collect_deferred(restarted(handle))
    assert result.answers == ["first", "second", "third"]
    assert result.outputs[0].diagnostics.raw["deferred"]["request_id"] == "pollux-000000"


async def test_per_request_failure_is_a_failed_output(emu: Emulator, config: Config) -> None:
    emu.script(
        "gemini.generate.content", Reply(text="ok"), ErrorResponse(400, message="bad request")
    )
    handle = await defer(["a", "b"], config=config)
    emu.advance(30)
    snapshot = await inspect_deferred(handle)
    assert snapshot.status == "partial" and snapshot.succeeded == 1 and snapshot.failed == 1
    result = await collect_deferred(handle)
    assert result.status == "partial"
    assert result.outputs[0].text == "ok"
    assert result.outputs[1].metrics.completion_status == "error"


class Item(pydantic.BaseModel):
    name: str


async def test_large_job_goes_through_an_uploaded_jsonl_file(
    emu: Emulator, config: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(gemini_deferred, "INLINE_MAX_BYTES", 10)
    doc = tmp_path / "paper.pdf"
    doc.write_bytes(b"%PDF-1.4\n" + b"0" * (2 << 20))
    handle = await defer(
        ["one", "two"], sources=[Source.from_file(doc)], output=Item, config=config
    )
    uploads = [r for r in emu.requests_for("gemini.files.upload") if "upload_id" not in r.query]
    assert len(uploads) == 2  # the PDF, then the JSONL
    assert handle.provider_state is not None
    (create,) = emu.requests_for("gemini.batches.create")
    assert create.json["batch"]["inputConfig"]["fileName"].startswith("files/")
    emu.advance(30)
    result = await collect_deferred(restarted(handle), response_schema=Item)
    assert result.status == "ok"
    assert all(isinstance(item, Item) for item in result.structured)
    # Owned files (the PDF and the JSONL) were deleted once the job ended.
    deleted = {r.path.rsplit("/", 1)[-1] for r in emu.requests_for("gemini.files.delete")}
    assert len(deleted) == 2
    assert deleted.isdisjoint(emu.wire("gemini").files)
    await inspect_deferred(restarted(handle))
    assert routes(emu).count("gemini.files.delete") == 2  # not deleted twice


async def test_cancel(emu: Emulator, config: Config) -> None:
    handle = await defer(["a", "b"], config=config)
    await cancel_deferred(handle)
    assert emu.requests_for("gemini.batches.cancel")
    snapshot = await inspect_deferred(handle)
    assert snapshot.is_terminal and snapshot.status == "cancelled"
    result = await collect_deferred(handle)
    assert len(result.outputs) == 2
    assert all(o.metrics.completion_status == "error" for o in result.outputs)


def test_rest_request_keeps_user_keys() -> None:
    compiled = {
        "model": "m",
        "contents": [
            {
                "role": "user",
                "parts": [{"function_response": {"name": "f", "response": {"temp_c": 1}}}],
            }
        ],
        "config": {
            "system_instruction": "x",
            "max_output_tokens": 5,
            "response_json_schema": {
                "type": "object",
                "properties": {"zip_code": {"type": "string"}},
            },
            "tool_config": {"function_calling_config": {"mode": "ANY"}},
        },
    }
    rest = gemini_deferred.rest_request(compiled)
    assert rest["systemInstruction"] == {"parts": [{"text": "x"}]}
    assert rest["generationConfig"]["maxOutputTokens"] == 5
    assert "zip_code" in rest["generationConfig"]["responseJsonSchema"]["properties"]
    assert rest["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert rest["contents"][0]["parts"][0]["functionResponse"]["response"] == {"temp_c": 1}


async def test_requests_an_expired_job_never_ran_are_expired_not_failed(
    emu: Emulator, config: Config
) -> None:
    # Google answers the requests an expired job never ran with a per-request 504
    # DEADLINE_EXCEEDED: they expired with the job (as on Anthropic), nothing about them failed.
    emu.wire("gemini").batch_window_seconds = 5
    handle = await defer(["a", "b"], config=config)
    emu.advance(6)
    snapshot = await inspect_deferred(restarted(handle))
    assert snapshot.status == "expired" and snapshot.succeeded == 0
    result = await collect_deferred(restarted(handle))
    items = [o.diagnostics.raw["deferred"] for o in result.outputs]
    assert [item["status"] for item in items] == ["expired", "expired"]
    assert all(o.metrics.completion_status == "error" for o in result.outputs)
    assert "defer()" in items[0]["error"]["hint"]


async def test_inline_results_out_of_order_come_back_in_prompt_order(
    emu: Emulator, config: Config
) -> None:
    # Results are matched to prompts by metadata.key, not by position.
    emu.script("gemini.generate.content", Reply(text="one"), Reply(text="two"), Reply(text="3"))
    handle = await defer(["a", "b", "c"], config=config)
    emu.advance(30)
    assert (await inspect_deferred(handle)).status == "completed"
    (job,) = emu.wire("gemini").batches.values()
    job.results.reverse()
    assert job.results[0]["metadata"]["key"] == "pollux-000002"
    async with Session(config) as fresh:  # nothing remembered from the inspect above
        result = await fresh.collect_deferred(restarted(handle))
    assert result.answers == ["one", "two", "3"]
