"""Files and Batches through the official openai SDK, with the virtual clock."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from pollux.testing import Emulator, ErrorResponse, Reply


def _client(emu: Emulator) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=emu.base_url("openai"),
        api_key="sk-test",
        max_retries=0,
        _strict_response_validation=True,
    )


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


def _requests(n: int, url: str = "/v1/responses") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"pollux-{i:06d}",
            "method": "POST",
            "url": url,
            "body": {"model": "gpt-5-nano", "input": f"question {i}"}
            if url == "/v1/responses"
            else {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]},
        }
        for i in range(n)
    ]


def _lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_file_lifecycle(emulator: Emulator, tmp_path: Any) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello file")
    with _client(emulator) as client:
        created = client.files.create(file=path, purpose="user_data")
        assert (created.filename, created.bytes, created.purpose) == ("notes.txt", 10, "user_data")
        assert created.status == "processed"
        assert client.files.retrieve(created.id).id == created.id
        assert client.files.content(created.id).content == b"hello file"
        assert [f.id for f in client.files.list(purpose="user_data")] == [created.id]
        deleted = client.files.delete(created.id)
        assert deleted.deleted is True
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(created.id)
        with pytest.raises(openai.BadRequestError) as info:
            client.files.create(file=("x.txt", b"x"), purpose="nonsense")  # type: ignore[arg-type]
        assert info.value.param == "purpose"


def test_file_expiry_runs_on_the_virtual_clock(emulator: Emulator) -> None:
    with _client(emulator) as client:
        created = client.files.create(
            file=("a.bin", b"\x00\x01"),
            purpose="user_data",
            expires_after={"anchor": "created_at", "seconds": 3600},
        )
        assert created.expires_at == created.created_at + 3600
        emulator.advance(3599)
        assert client.files.retrieve(created.id).id == created.id
        emulator.advance(1)
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(created.id)
        request = emulator.requests_for("openai.files.create")[0]
        assert b'name="expires_after[seconds]"' in request.body


def test_batch_moves_through_every_state_to_completion(emulator: Emulator) -> None:
    with _client(emulator) as client:
        batch_input = client.files.create(file=("in.jsonl", _jsonl(_requests(4))), purpose="batch")
        batch = client.batches.create(
            input_file_id=batch_input.id,
            endpoint="/v1/responses",
            completion_window="24h",
            metadata={"pollux_request_count": "4"},
        )
        assert batch.status == "validating"
        assert batch.expires_at == batch.created_at + 24 * 3600
        emulator.advance(1)
        running = client.batches.retrieve(batch.id)
        assert running.status == "in_progress"
        assert running.request_counts is not None and running.request_counts.total == 4
        emulator.advance(5)
        halfway = client.batches.retrieve(batch.id)
        assert halfway.request_counts is not None and halfway.request_counts.completed == 2
        emulator.advance(5)
        assert client.batches.retrieve(batch.id).status == "finalizing"
        emulator.advance(1)
        done = client.batches.retrieve(batch.id)
        assert done.status == "completed"
        assert done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (4, 0)
        assert done.in_progress_at and done.finalizing_at and done.completed_at
        assert done.metadata == {"pollux_request_count": "4"}
        assert done.error_file_id is None
        lines = _lines(client, done.output_file_id)
        assert [line["custom_id"] for line in lines] == [f"pollux-{i:06d}" for i in range(4)]
        assert all(line["response"]["status_code"] == 200 for line in lines)
        assert lines[2]["response"]["body"]["output"][0]["content"][0]["text"] == (
            "Emulated reply to: question 2"
        )
        assert client.files.retrieve(done.output_file_id or "").purpose == "batch_output"
        assert [b.id for b in client.batches.list()] == [batch.id]


def test_batch_lines_use_scripted_replies_and_errors(emulator: Emulator) -> None:
    emulator.script(
        "openai.responses", Reply("scripted first"), ErrorResponse(429, message="slow down")
    )
    with _client(emulator) as client:
        file = client.files.create(file=("in.jsonl", _jsonl(_requests(3))), purpose="batch")
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/responses", completion_window="24h"
        )
        emulator.advance(12)
        done = client.batches.retrieve(batch.id)
        assert done.status == "completed"
        assert done.request_counts is not None and done.request_counts.failed == 1
        ok = _lines(client, done.output_file_id)
        bad = _lines(client, done.error_file_id)
    assert [line["custom_id"] for line in ok] == ["pollux-000000", "pollux-000002"]
    assert ok[0]["response"]["body"]["output"][0]["content"][0]["text"] == "scripted first"
    assert bad[0]["response"]["status_code"] == 429
    assert bad[0]["response"]["body"]["error"]["message"] == "slow down"


def test_chat_completions_batch(emulator: Emulator) -> None:
    with _client(emulator) as client:
        file = client.files.create(
            file=("in.jsonl", _jsonl(_requests(2, "/v1/chat/completions"))), purpose="batch"
        )
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        emulator.advance(100)
        done = client.batches.retrieve(batch.id)
        lines = _lines(client, done.output_file_id)
    assert done.status == "completed"
    assert lines[1]["response"]["body"]["choices"][0]["message"]["content"] == (
        "Emulated reply to: question 1"
    )


def test_invalid_input_file_fails_validation(emulator: Emulator) -> None:
    bad = _requests(2)
    bad[1]["custom_id"] = bad[0]["custom_id"]
    bad[0]["url"] = "/v1/chat/completions"
    with _client(emulator) as client:
        file = client.files.create(file=("in.jsonl", _jsonl(bad)), purpose="batch")
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/responses", completion_window="24h"
        )
        emulator.advance(1)
        failed = client.batches.retrieve(batch.id)
    assert failed.status == "failed"
    assert failed.failed_at is not None
    assert failed.errors is not None and failed.errors.data is not None
    codes = {(e.code, e.line) for e in failed.errors.data}
    assert codes == {("mismatched_endpoint", 1), ("duplicate_custom_id", 2)}


def test_batch_expires_when_the_window_closes() -> None:
    with (
        Emulator(batch_durations={"in_progress": 48 * 3600}) as emu,
        _client(emu) as client,
    ):
        file = client.files.create(file=("in.jsonl", _jsonl(_requests(4))), purpose="batch")
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/responses", completion_window="24h"
        )
        emu.advance(24 * 3600)
        expired = client.batches.retrieve(batch.id)
        assert expired.status == "expired"
        assert expired.expired_at == expired.expires_at
        done = _lines(client, expired.output_file_id)
        missing = _lines(client, expired.error_file_id)
    assert len(done) + len(missing) == 4
    assert len(done) == 1  # (24h - 1s validating) of 48h processing covers one of four
    assert {line["error"]["code"] for line in missing} == {"batch_expired"}


def test_batch_still_validating_when_the_window_closes_expires() -> None:
    with (
        Emulator(batch_durations={"validating": 30 * 3600}) as emu,
        _client(emu) as client,
    ):
        file = client.files.create(file=("in.jsonl", _jsonl(_requests(3))), purpose="batch")
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/responses", completion_window="24h"
        )
        emu.advance(24 * 3600 - 1)
        assert client.batches.retrieve(batch.id).status == "validating"
        emu.advance(1)
        expired = client.batches.retrieve(batch.id)
        assert expired.status == "expired"
        assert expired.expired_at == expired.expires_at
        assert expired.in_progress_at is None
        missing = _lines(client, expired.error_file_id)
    assert expired.output_file_id is None  # nothing ran, so there is no output file
    assert expired.request_counts is not None
    assert (expired.request_counts.completed, expired.request_counts.failed) == (0, 3)
    assert [line["error"]["code"] for line in missing] == ["batch_expired"] * 3


def test_batch_cancel_goes_through_cancelling(emulator: Emulator) -> None:
    with _client(emulator) as client:
        file = client.files.create(file=("in.jsonl", _jsonl(_requests(10))), purpose="batch")
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/responses", completion_window="24h"
        )
        emulator.advance(1 + 3)  # three tenths of the processing time
        cancelling = client.batches.cancel(batch.id)
        assert cancelling.status == "cancelling"
        assert cancelling.cancelling_at is not None
        emulator.advance(1)
        cancelled = client.batches.retrieve(batch.id)
        assert cancelled.status == "cancelled"
        assert cancelled.request_counts is not None
        assert (cancelled.request_counts.completed, cancelled.request_counts.failed) == (3, 7)
        errors = _lines(client, cancelled.error_file_id)
        assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
        with pytest.raises(openai.BadRequestError):
            client.batches.cancel(batch.id)


def test_batch_create_validation(emulator: Emulator) -> None:
    with _client(emulator) as client:
        user_file = client.files.create(file=("a.txt", b"x"), purpose="user_data")
        with pytest.raises(openai.NotFoundError):
            client.batches.create(
                input_file_id="file-nope", endpoint="/v1/responses", completion_window="24h"
            )
        with pytest.raises(openai.BadRequestError) as info:
            client.batches.create(
                input_file_id=user_file.id, endpoint="/v1/responses", completion_window="24h"
            )
        assert info.value.param == "input_file_id"
        with pytest.raises(openai.BadRequestError) as info:
            client.batches.create(
                input_file_id=user_file.id, endpoint="/v1/embeddings", completion_window="24h"
            )
        assert info.value.param == "endpoint"
        with pytest.raises(openai.NotFoundError):
            client.batches.retrieve("batch_nope")


async def test_async_batch_round_trip(emulator: Emulator) -> None:
    async with openai.AsyncOpenAI(base_url=emulator.base_url("openai"), api_key="k") as client:
        file = await client.files.create(file=("in.jsonl", _jsonl(_requests(2))), purpose="batch")
        batch = await client.batches.create(
            input_file_id=file.id, endpoint="/v1/responses", completion_window="24h"
        )
        emulator.advance(12)
        done = await client.batches.retrieve(batch.id)
        content = await client.files.content(done.output_file_id or "")
    assert done.status == "completed"
    assert len(content.text.splitlines()) == 2
