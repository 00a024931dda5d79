"""The Gemini wire's stored objects through google-genai: Files, cachedContents, batches."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from google import genai
from google.genai import errors, types

from pollux.testing import Emulator, ErrorResponse, Reply

FLASH = "gemini-2.5-flash"
BIG = "word " * 1100  # above the 1024-token minimum of a Flash cache


def _client(emu: Emulator) -> genai.Client:
    return genai.Client(
        api_key="test-key", http_options=types.HttpOptions(base_url=emu.base_url("gemini"))
    )


@pytest.fixture
def client(emulator: Emulator) -> Iterator[genai.Client]:
    with _client(emulator) as sdk:
        yield sdk


def _upload(client: genai.Client, data: bytes, mime: str = "application/pdf") -> types.File:
    return client.files.upload(
        file=io.BytesIO(data), config=types.UploadFileConfig(mime_type=mime, display_name="doc")
    )


# --- files -----------------------------------------------------------------------------------


def test_resumable_upload_start_then_finalize(emulator: Emulator, client: genai.Client) -> None:
    uploaded = _upload(client, b"%PDF-1.4 tiny")
    assert uploaded.name and uploaded.name.startswith("files/")
    assert uploaded.state == types.FileState.ACTIVE
    assert uploaded.size_bytes == 13
    assert uploaded.mime_type == "application/pdf"
    assert uploaded.display_name == "doc"
    assert uploaded.uri == f"{emulator.base_url('gemini')}/v1beta/{uploaded.name}"
    start, chunk = emulator.requests_for("gemini.files.upload")
    assert start.headers["x-goog-upload-protocol"] == "resumable"
    assert start.headers["x-goog-upload-command"] == "start"
    # google-genai sends this body in snake_case; the wire reads both spellings.
    assert start.json == {
        "file": {"display_name": "doc", "mime_type": "application/pdf", "size_bytes": 13}
    }
    assert chunk.headers["x-goog-upload-command"] == "upload, finalize"
    assert chunk.body == b"%PDF-1.4 tiny"
    assert "upload_id" in chunk.query


async def test_async_upload_from_a_path_and_use_in_a_prompt(
    emulator: Emulator, tmp_path: Path
) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"some notes")
    async with _client(emulator).aio as sdk:
        uploaded = await sdk.files.upload(file=path)
        assert uploaded.mime_type == "text/plain"
        assert (await sdk.files.get(name=uploaded.name)).state == types.FileState.ACTIVE
        answer = await sdk.models.generate_content(
            model=FLASH,
            contents=[types.Part.from_uri(file_uri=uploaded.uri, mime_type="text/plain"), "sum up"],
        )
        assert answer.text == "Emulated reply to: sum up [1 file]"
        await sdk.files.delete(name=uploaded.name)
        with pytest.raises(errors.ClientError) as info:
            await sdk.files.get(name=uploaded.name)
    assert info.value.code == 403


def test_processing_then_active_on_the_clock_and_by_polls(
    emulator: Emulator, client: genai.Client
) -> None:
    knobs = emulator.wire("gemini")
    knobs.file_processing_seconds = 30
    uploaded = _upload(client, b"video bytes", "video/mp4")
    assert uploaded.state == types.FileState.PROCESSING
    part = types.Part.from_uri(file_uri=uploaded.uri, mime_type="video/mp4")
    with pytest.raises(errors.ClientError) as info:
        client.models.generate_content(model=FLASH, contents=[part, "describe"])
    assert info.value.code == 400
    assert info.value.status == "FAILED_PRECONDITION"
    emulator.advance(30)
    assert client.files.get(name=uploaded.name).state == types.FileState.ACTIVE
    knobs.file_processing_seconds = 0
    knobs.file_processing_polls = 2
    polled = _upload(client, b"more")
    states = [client.files.get(name=polled.name).state for _ in range(3)]
    assert states == [types.FileState.PROCESSING] * 2 + [types.FileState.ACTIVE]


def test_failed_file_reports_its_error(emulator: Emulator, client: genai.Client) -> None:
    uploaded = _upload(client, b"broken")
    emulator.wire("gemini").fail_file(uploaded.name, "Unsupported PDF.")
    failed = client.files.get(name=uploaded.name)
    assert failed.state == types.FileState.FAILED
    assert failed.error.message == "Unsupported PDF."


def test_files_expire_after_48_hours_and_list_pages(
    emulator: Emulator, client: genai.Client
) -> None:
    first = _upload(client, b"one")
    emulator.advance(47 * 3600)
    second = _upload(client, b"two")
    listed = [f.name for f in client.files.list(config=types.ListFilesConfig(page_size=1))]
    assert listed == [second.name, first.name]
    assert emulator.requests_for("gemini.files.list")[-1].query["pageToken"] == "1"
    emulator.advance(3600)
    with pytest.raises(errors.ClientError) as info:
        client.files.get(name=first.name)
    assert info.value.status == "PERMISSION_DENIED"
    part = types.Part.from_uri(file_uri=first.uri, mime_type="application/pdf")
    with pytest.raises(errors.ClientError, match="may not exist"):
        client.models.generate_content(model=FLASH, contents=[part, "x"])
    assert [f.name for f in client.files.list()] == [second.name]


def test_upload_fault_and_uploaded_files_cannot_be_downloaded(
    emulator: Emulator, client: genai.Client
) -> None:
    emulator.script("gemini.files.upload", ErrorResponse(503))
    with pytest.raises(errors.ServerError):
        _upload(client, b"x")

    def fail_chunks(request: object) -> ErrorResponse | None:
        return ErrorResponse(500) if "upload_id" in request.query else None  # type: ignore[attr-defined]

    emulator.on("gemini.files.upload", fail_chunks)
    with pytest.raises(errors.ServerError):
        _upload(client, b"x")  # the chunk's error ends the upload at once, no SDK retry
    assert len(emulator.requests_for("gemini.files.upload")) == 3
    emulator.on("gemini.files.upload", None)
    uploaded = _upload(client, b"x")
    with pytest.raises(errors.ClientError, match="Only generated files"):
        client.files.download(file=uploaded.name)


# --- caches ----------------------------------------------------------------------------------


def _cache(client: genai.Client, **config: object) -> types.CachedContent:
    return client.caches.create(
        model=FLASH,
        config=types.CreateCachedContentConfig(
            contents=[BIG], system_instruction="Be brief.", **config
        ),
    )


def test_cache_create_use_and_cached_token_count(emulator: Emulator, client: genai.Client) -> None:
    cache = _cache(client, ttl="600s", display_name="pollux-abc")
    assert cache.name and cache.name.startswith("cachedContents/")
    assert cache.display_name == "pollux-abc"
    assert cache.model == f"models/{FLASH}"
    assert cache.usage_metadata.total_token_count == 1103
    assert cache.expire_time.timestamp() == emulator.now() + 600
    answer = client.models.generate_content(
        model=FLASH,
        contents="a question",
        config=types.GenerateContentConfig(cached_content=cache.name),
    )
    assert answer.usage_metadata.cached_content_token_count == 1103
    assert answer.usage_metadata.prompt_token_count == 1103 + 2
    assert emulator.last_request.json["cachedContent"] == cache.name
    counted = client.models.count_tokens(model=FLASH, contents="a question")
    assert counted.total_tokens == 2


def test_cache_update_list_delete_and_expiry(emulator: Emulator, client: genai.Client) -> None:
    cache = _cache(client, ttl="60s")
    updated = client.caches.update(
        name=cache.name, config=types.UpdateCachedContentConfig(ttl="3600s")
    )
    assert updated.expire_time.timestamp() == emulator.now() + 3600
    assert emulator.last_request.method == "PATCH"
    assert [c.name for c in client.caches.list()] == [cache.name]
    emulator.advance(3600)
    with pytest.raises(errors.ClientError) as info:
        client.caches.get(name=cache.name)
    assert info.value.code == 403
    assert info.value.message == "CachedContent not found (or permission denied)"
    with pytest.raises(errors.ClientError, match="CachedContent not found"):
        client.models.generate_content(
            model=FLASH, contents="x", config=types.GenerateContentConfig(cached_content=cache.name)
        )
    other = _cache(client)
    client.caches.delete(name=other.name)
    with pytest.raises(errors.ClientError):
        client.caches.delete(name=other.name)
    assert list(client.caches.list()) == []


def test_cache_refusals(emulator: Emulator, client: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as info:
        client.caches.create(
            model=FLASH, config=types.CreateCachedContentConfig(contents=["too small"])
        )
    assert info.value.code == 400
    assert info.value.message == (
        "Cached content is too small. total_token_count=2, min_total_token_count=1024"
    )
    with pytest.raises(errors.ClientError, match="min_total_token_count=4096"):
        client.caches.create(
            model="gemini-2.5-pro", config=types.CreateCachedContentConfig(contents=[BIG])
        )
    cache = _cache(client)
    with pytest.raises(errors.ClientError, match="system_instruction, tools or tool_config"):
        client.models.generate_content(
            model=FLASH,
            contents="x",
            config=types.GenerateContentConfig(cached_content=cache.name, system_instruction="no"),
        )
    with pytest.raises(errors.ClientError, match="has to be the same"):
        client.models.generate_content(
            model="gemini-2.5-flash-lite",
            contents="x",
            config=types.GenerateContentConfig(cached_content=cache.name),
        )
    emulator.wire("gemini").cache_min_tokens = 1
    assert client.caches.create(
        model=FLASH, config=types.CreateCachedContentConfig(contents=["tiny"])
    ).name


async def test_async_cache_round_trip(emulator: Emulator) -> None:
    async with _client(emulator).aio as sdk:
        cache = await sdk.caches.create(
            model=FLASH, config=types.CreateCachedContentConfig(contents=[BIG])
        )
        assert (await sdk.caches.get(name=cache.name)).name == cache.name
        await sdk.caches.delete(name=cache.name)
        with pytest.raises(errors.ClientError):
            await sdk.caches.get(name=cache.name)


# --- batches ---------------------------------------------------------------------------------


def _inline(text: str, key: str) -> types.InlinedRequest:
    return types.InlinedRequest(
        contents=[types.Content(role="user", parts=[types.Part(text=text)])],
        metadata={"key": key},
    )


def test_inline_batch_moves_through_its_states(emulator: Emulator, client: genai.Client) -> None:
    emulator.script("gemini.generate.content", Reply("scripted first"), ErrorResponse(429))
    job = client.batches.create(
        model=FLASH,
        src=[_inline("one", "k1"), _inline("two", "k2"), _inline("three", "k3")],
        config=types.CreateBatchJobConfig(display_name="nightly"),
    )
    assert job.name and job.name.startswith("batches/")
    assert job.state == types.JobState.JOB_STATE_PENDING
    assert job.display_name == "nightly"
    sent = emulator.last_request.json["batch"]["inputConfig"]["requests"]["requests"]
    assert [r["metadata"]["key"] for r in sent] == ["k1", "k2", "k3"]
    emulator.advance(1)
    assert client.batches.get(name=job.name).state == types.JobState.JOB_STATE_RUNNING
    emulator.advance(11)
    done = client.batches.get(name=job.name)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    first, second, third = done.dest.inlined_responses
    assert first.response.text == "scripted first"
    assert first.metadata == {"key": "k1"}
    assert second.error.code == 429
    assert third.response.text == "Emulated reply to: three"
    assert done.end_time is not None
    emulator.assert_consumed()


def test_file_batch_writes_a_downloadable_results_file(
    emulator: Emulator, client: genai.Client
) -> None:
    lines = [
        {"key": "a", "request": {"contents": [{"parts": [{"text": "alpha"}]}]}},
        {"key": "b", "request": {"contents": [{"role": "robot", "parts": [{"text": "x"}]}]}},
    ]
    source = _upload(
        client, "\n".join(json.dumps(line) for line in lines).encode(), "application/jsonl"
    )
    job = client.batches.create(model=FLASH, src=source.name)
    emulator.advance(12)
    done = client.batches.get(name=job.name)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    assert done.dest.file_name
    results = [json.loads(x) for x in client.files.download(file=done.dest.file_name).splitlines()]
    assert [r["key"] for r in results] == ["a", "b"]
    assert results[0]["response"]["candidates"][0]["content"]["parts"][0]["text"] == (
        "Emulated reply to: alpha"
    )
    assert results[1]["error"]["code"] == 400
    assert results[1]["error"]["message"] == "Please use a valid role: user, model."


def test_batch_cancel_expire_fail_list_delete(emulator: Emulator, client: genai.Client) -> None:
    cancelled = client.batches.create(model=FLASH, src=[_inline("x", "k")])
    client.batches.cancel(name=cancelled.name)
    job = client.batches.get(name=cancelled.name)
    assert job.state == types.JobState.JOB_STATE_CANCELLED
    assert job.dest.inlined_responses[0].error.code == 499
    with pytest.raises(errors.ClientError):
        client.batches.cancel(name=cancelled.name)
    bad = _upload(client, b"{not json\n", "application/jsonl")
    failed = client.batches.create(model=FLASH, src=bad.name)
    emulator.wire("gemini").batch_window_seconds = 5
    slow = client.batches.create(model=FLASH, src=[_inline("y", "k")])
    emulator.advance(6)
    assert client.batches.get(name=failed.name).state == types.JobState.JOB_STATE_FAILED
    expired = client.batches.get(name=slow.name)
    assert expired.state == types.JobState.JOB_STATE_EXPIRED
    assert expired.dest.inlined_responses[0].error.code == 504
    names = [b.name for b in client.batches.list()]
    assert names == [slow.name, failed.name, cancelled.name]
    client.batches.delete(name=slow.name)
    with pytest.raises(errors.ClientError) as info:
        client.batches.get(name=slow.name)
    assert info.value.code == 404


async def test_async_batch(emulator: Emulator) -> None:
    async with _client(emulator).aio as sdk:
        job = await sdk.batches.create(model=FLASH, src=[_inline("async", "k")])
        emulator.advance(12)
        done = await sdk.batches.get(name=job.name)
    assert done.state == types.JobState.JOB_STATE_SUCCEEDED
    assert done.dest.inlined_responses[0].response.text == "Emulated reply to: async"


def test_multi_chunk_upload_and_offsets(emulator: Emulator, client: genai.Client) -> None:
    data = bytes(range(256)) * (9 * 4096)  # 9 MiB: two 8 MiB chunks for the SDK
    uploaded = _upload(client, data, "application/octet-stream")
    assert uploaded.size_bytes == len(data)
    assert emulator.wire("gemini").files[uploaded.name[6:]].data == data
    chunks = emulator.requests_for("gemini.files.upload")[1:]
    assert [c.headers["x-goog-upload-command"] for c in chunks] == ["upload", "upload, finalize"]
    assert [c.headers["x-goog-upload-offset"] for c in chunks] == ["0", str(8 * 1024 * 1024)]


def test_cache_update_by_expire_time(emulator: Emulator, client: genai.Client) -> None:
    from datetime import datetime, timezone

    cache = _cache(client)
    when = datetime.fromtimestamp(emulator.now() + 7200, timezone.utc)
    updated = client.caches.update(
        name=cache.name, config=types.UpdateCachedContentConfig(expire_time=when)
    )
    assert updated.expire_time == when
    emulator.advance(7199)
    assert client.caches.get(name=cache.name).name == cache.name
    emulator.advance(1)
    with pytest.raises(errors.ClientError):
        client.caches.get(name=cache.name)


LOOKUP = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="lookup",
            description="Look a city up.",
            parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
        )
    ]
)


def test_cache_holds_tools_and_outlives_its_files(emulator: Emulator, client: genai.Client) -> None:
    doc = _upload(client, b"%PDF-1.4 report")
    cache = client.caches.create(
        model=FLASH,
        config=types.CreateCachedContentConfig(
            contents=[types.Part.from_uri(file_uri=doc.uri, mime_type=doc.mime_type), BIG],
            system_instruction="Use the tools.",
            tools=[LOOKUP],
            ttl=f"{72 * 3600}s",
        ),
    )
    assert emulator.last_request.json["tools"][0]["functionDeclarations"][0]["name"] == "lookup"
    emulator.advance(49 * 3600)  # the file expired; the cache keeps its content
    with pytest.raises(errors.ClientError):
        client.files.get(name=doc.name)
    config = types.GenerateContentConfig(
        cached_content=cache.name,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    called = client.models.generate_content(model=FLASH, contents="lookup Paris", config=config)
    assert [c.name for c in called.function_calls] == ["lookup"]
    assert "tools" not in emulator.last_request.json
    plain = client.models.generate_content(model=FLASH, contents="summarize", config=config)
    assert plain.text == "Emulated reply to: summarize [1 file]"
    assert plain.usage_metadata.cached_content_token_count == cache.usage_metadata.total_token_count


def test_a_job_still_pending_at_the_window_expires() -> None:
    with Emulator(batch_durations={"validating": 50 * 3600}) as emu, _client(emu) as sdk:
        job = sdk.batches.create(model=FLASH, src=[_inline("late", "k")])
        emu.advance(48 * 3600 - 1)
        assert sdk.batches.get(name=job.name).state == types.JobState.JOB_STATE_PENDING
        emu.advance(1)
        expired = sdk.batches.get(name=job.name)
    assert expired.state == types.JobState.JOB_STATE_EXPIRED
    assert expired.dest.inlined_responses[0].error.code == 504
