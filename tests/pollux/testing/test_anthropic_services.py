"""The Anthropic wire's prompt cache, Files, Message Batches, faults and request log (SDK)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2 as httpx  # this anthropic SDK generation ships its own httpx fork
import pytest

from pollux.testing import (
    AnthropicReply,
    CutStream,
    DropConnection,
    Emulator,
    ErrorResponse,
    Latency,
    MalformedBody,
    Reply,
    StreamError,
)

MODEL = "claude-sonnet-4-6"
HI = [{"role": "user", "content": "hello there"}]
LONG = " ".join(f"w{i}" for i in range(1200))  # 1200 tokens: above the 1024 minimum
FILES_BETA = ["files-api-2025-04-14"]


def _client(emu: Emulator, **kwargs: Any) -> anthropic.Anthropic:
    options: dict[str, Any] = {"max_retries": 0, **kwargs}
    return anthropic.Anthropic(base_url=emu.base_url("anthropic"), api_key="sk-ant", **options)


def _async_client(emu: Emulator) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=emu.base_url("anthropic"), api_key="sk-ant", max_retries=0
    )


def _error(info: pytest.ExceptionInfo[anthropic.APIStatusError]) -> dict[str, Any]:
    body = info.value.body
    assert isinstance(body, dict)
    error: dict[str, Any] = body["error"]
    return error


# --- prompt caching ------------------------------------------------------------------------------


def _usage(client: anthropic.Anthropic, system: Any, question: str, **kw: Any) -> tuple[int, ...]:
    message = client.messages.create(
        model=MODEL,
        max_tokens=32,
        system=system,
        messages=[{"role": "user", "content": question}],
        **kw,
    )
    usage = message.usage
    assert usage.cache_creation is not None
    return (
        usage.input_tokens,
        usage.cache_creation_input_tokens or 0,
        usage.cache_read_input_tokens or 0,
        usage.cache_creation.ephemeral_5m_input_tokens,
        usage.cache_creation.ephemeral_1h_input_tokens,
    )


def test_a_marked_prefix_is_written_then_read_then_expires(emulator: Emulator) -> None:
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    with _client(emulator) as client:
        assert _usage(client, system, "one") == (1, 1200, 0, 1200, 0)
        assert _usage(client, system, "two") == (1, 0, 1200, 0, 0)
        emulator.advance(299)  # a read refreshes the 5 minute lifetime
        assert _usage(client, system, "three") == (1, 0, 1200, 0, 0)
        emulator.advance(301)
        assert _usage(client, system, "four") == (1, 1200, 0, 1200, 0)
        other = [
            {"type": "text", "text": LONG + " changed", "cache_control": {"type": "ephemeral"}}
        ]
        assert _usage(client, other, "five") == (1, 1201, 0, 1201, 0)


def test_the_one_hour_ttl_outlives_five_minutes(emulator: Emulator) -> None:
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    with _client(emulator) as client:
        assert _usage(client, system, "one") == (1, 1200, 0, 0, 1200)
        emulator.advance(1800)
        assert _usage(client, system, "two") == (1, 0, 1200, 0, 0)
        emulator.advance(3601)
        assert _usage(client, system, "three")[1] == 1200


def test_a_short_prefix_is_not_cached_and_the_minimum_is_settable() -> None:
    system = [{"type": "text", "text": "w " * 50, "cache_control": {"type": "ephemeral"}}]
    with Emulator() as emu, _client(emu) as client:
        assert _usage(client, system, "one") == (51, 0, 0, 0, 0)
        assert _usage(client, system, "one") == (51, 0, 0, 0, 0)
    with Emulator(cache_min_tokens=10) as emu, _client(emu) as client:
        assert _usage(client, system, "one") == (1, 50, 0, 50, 0)
        assert _usage(client, system, "one") == (1, 0, 50, 0, 0)


def test_top_level_cache_control_marks_the_last_block(emulator: Emulator) -> None:
    with _client(emulator) as client:
        first = _usage(client, LONG, "question", cache_control={"type": "ephemeral"})
        again = _usage(client, LONG, "question", cache_control={"type": "ephemeral"})
    assert first == (0, 1201, 0, 1201, 0)
    assert again == (0, 0, 1201, 0, 0)


def test_breakpoint_rules(emulator: Emulator) -> None:
    five = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    mixed = [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "5m"}},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    with _client(emulator) as client:
        with pytest.raises(anthropic.BadRequestError) as too_many:
            _usage(client, five, "x")
        with pytest.raises(anthropic.BadRequestError) as order:
            _usage(client, mixed, "x")
        assert _usage(client, five[:4], "x")[0] == 9  # four breakpoints are fine
    assert (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
        in (_error(too_many)["message"])
    )
    assert "ttl='1h' cache_control block must not come after" in _error(order)["message"]


def test_cache_usage_arrives_in_the_stream(emulator: Emulator) -> None:
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    with _client(emulator) as client:
        _usage(client, system, "warm")
        with client.messages.stream(model=MODEL, max_tokens=32, system=system, messages=HI) as s:
            start = next(iter(s))
            final = s.get_final_message()
    assert start.type == "message_start"
    assert start.message.usage.cache_read_input_tokens == 1200
    assert final.usage.cache_read_input_tokens == 1200 and final.usage.input_tokens == 2


def test_count_tokens_counts_cached_prefixes_without_touching_the_cache(
    emulator: Emulator,
) -> None:
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    with _client(emulator) as client:
        counted = client.messages.count_tokens(model=MODEL, system=system, messages=HI)  # type: ignore[arg-type]
        assert counted.input_tokens == 1202
        assert _usage(client, system, "one")[1] == 1200  # still a write: counting cached nothing


# --- files ---------------------------------------------------------------------------------------


def test_files_upload_get_list_delete(emulator: Emulator) -> None:
    with _client(emulator) as client:
        pdf = client.beta.files.upload(
            file=("report.pdf", b"%PDF-1.4 body", "application/pdf"), betas=FILES_BETA
        )
        text = client.files.upload(file=("notes.txt", b"three little words"))
        assert pdf.mime_type == "application/pdf" and pdf.size_bytes == 13
        assert text.mime_type == "text/plain" and text.downloadable is False
        listed = [f.id for f in client.beta.files.list(betas=FILES_BETA)]
        assert listed == [text.id, pdf.id]  # newest first
        assert (
            client.beta.files.retrieve_metadata(pdf.id, betas=FILES_BETA).filename == "report.pdf"
        )
        deleted = client.beta.files.delete(pdf.id, betas=FILES_BETA)
        assert deleted.id == pdf.id and deleted.type == "file_deleted"
        with pytest.raises(anthropic.NotFoundError) as info:
            client.beta.files.retrieve_metadata(pdf.id, betas=FILES_BETA)
    assert _error(info) == {"type": "not_found_error", "message": f"File not found: {pdf.id}"}
    upload = emulator.requests_for("anthropic.files.upload")[0]
    assert upload.headers["anthropic-beta"] == "files-api-2025-04-14"


def test_file_ids_resolve_in_document_and_image_blocks(emulator: Emulator) -> None:
    with _client(emulator) as client:
        pdf = client.files.upload(file=("a.pdf", b"%PDF-1.4", "application/pdf"))
        png = client.files.upload(file=("a.png", b"\x89PNG....", "image/png"))
        text = client.files.upload(file=("a.txt", b"some plain words"))
        content: list[dict[str, Any]] = [
            {"type": "document", "source": {"type": "file", "file_id": pdf.id}},
            {"type": "image", "source": {"type": "file", "file_id": png.id}},
            {"type": "document", "source": {"type": "file", "file_id": text.id}},
            {"type": "text", "text": "Compare them."},
        ]
        message = client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": content}]
        )
        assert message.content[0].text == "Emulated reply to: Compare them. [1 image, 2 file]"  # type: ignore[union-attr]
        assert message.usage.input_tokens == 100 + 85 + 3 + 3  # pdf, image, 2 texts
        wrong = [{"type": "image", "source": {"type": "file", "file_id": pdf.id}}]
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": wrong}]
            )
        client.files.delete(pdf.id)
        with pytest.raises(anthropic.NotFoundError) as info:
            client.messages.create(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": content}]
            )
    assert _error(info)["type"] == "not_found_error"


def test_files_expire_on_the_virtual_clock(emulator: Emulator) -> None:
    with _client(emulator) as client:
        upload = client.files.upload(file=("a.txt", b"words"), expires_in_seconds=3600)
        assert upload.expires_at is not None
        assert (upload.expires_at - upload.created_at).total_seconds() == 3600
        emulator.advance(3599)
        assert client.files.retrieve_metadata(upload.id).id == upload.id
        emulator.advance(1)
        with pytest.raises(anthropic.NotFoundError):
            client.files.retrieve_metadata(upload.id)
        with pytest.raises(anthropic.BadRequestError):
            client.files.upload(file=("a.txt", b"words"), expires_in_seconds=60)


# --- message batches -----------------------------------------------------------------------------


def _requests(count: int) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"req-{i}",
            "params": {
                "model": MODEL,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": f"question {i}"}],
            },
        }
        for i in range(count)
    ]


def test_a_batch_runs_on_the_virtual_clock(emulator: Emulator) -> None:
    bad = {"custom_id": "bad", "params": {"model": MODEL, "messages": HI}}  # no max_tokens
    emulator.script(
        "anthropic.messages.create",
        Reply("scripted first"),
        ErrorResponse(529),
    )
    with _client(emulator) as client:
        batch = client.messages.batches.create(requests=[*_requests(3), bad])  # type: ignore[list-item]
        assert batch.processing_status == "in_progress"
        assert batch.request_counts.processing == 4 and batch.results_url is None
        emulator.advance(11)
        assert client.messages.batches.retrieve(batch.id).processing_status == "in_progress"
        emulator.advance(1)
        ended = client.messages.batches.retrieve(batch.id)
        results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert ended.processing_status == "ended" and ended.ended_at is not None
    counts = ended.request_counts
    assert (counts.processing, counts.succeeded, counts.errored) == (0, 2, 2)
    assert ended.results_url is not None and ended.results_url.endswith(f"/{batch.id}/results")
    first = results["req-0"]
    assert first.type == "succeeded" and first.message.content[0].text == "scripted first"  # type: ignore[union-attr]
    overloaded = results["req-1"]
    assert overloaded.type == "errored" and overloaded.error.error.type == "overloaded_error"
    assert results["req-2"].type == "succeeded"
    invalid = results["bad"]
    assert invalid.type == "errored"
    assert invalid.error.error.message == "max_tokens: Field required"


async def test_cancel_list_and_delete_a_batch_async(emulator: Emulator) -> None:
    async with _async_client(emulator) as client:
        batch = await client.messages.batches.create(requests=_requests(4))  # type: ignore[arg-type]
        emulator.advance(6)  # halfway: two of four are processed
        canceling = await client.messages.batches.cancel(batch.id)
        assert canceling.processing_status == "canceling"
        assert canceling.cancel_initiated_at is not None
        with pytest.raises(anthropic.BadRequestError):
            await client.messages.batches.delete(batch.id)  # not ended yet
        emulator.advance(1)
        ended = await client.messages.batches.retrieve(batch.id)
        kinds = [r.result.type async for r in await client.messages.batches.results(batch.id)]
        listed = [b.id async for b in client.messages.batches.list()]
        deleted = await client.messages.batches.delete(batch.id)
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (2, 2)
    assert kinds == ["succeeded", "succeeded", "canceled", "canceled"]  # request order
    assert listed == [batch.id]
    assert deleted.type == "message_batch_deleted"


def test_a_batch_past_its_window_expires() -> None:
    durations = {"validating": 0.0, "in_progress": 48 * 3600.0, "finalizing": 0.0}
    with Emulator(batch_durations=durations) as emu, _client(emu) as client:
        batch = client.messages.batches.create(requests=_requests(4))  # type: ignore[arg-type]
        emu.advance(12 * 3600)
        assert client.messages.batches.retrieve(batch.id).processing_status == "in_progress"
        emu.advance(12 * 3600)
        ended = client.messages.batches.retrieve(batch.id)
        kinds = [r.result.type for r in client.messages.batches.results(batch.id)]
    assert ended.processing_status == "ended"
    assert ended.request_counts.expired == 2 and ended.request_counts.succeeded == 2
    assert kinds == ["succeeded", "succeeded", "expired", "expired"]


def test_batch_requests_are_validated_at_creation(emulator: Emulator) -> None:
    with _client(emulator) as client:
        with pytest.raises(anthropic.BadRequestError) as dup:
            client.messages.batches.create(requests=[*_requests(1), *_requests(1)])  # type: ignore[list-item]
        with pytest.raises(anthropic.BadRequestError):
            client.messages.batches.create(requests=[])
        with pytest.raises(anthropic.NotFoundError):
            client.messages.batches.retrieve("msgbatch_missing")
    assert "Duplicate custom_id 'req-0'" in _error(dup)["message"]


# --- faults --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "exception", "kind"),
    [
        (ErrorResponse(400), anthropic.BadRequestError, "invalid_request_error"),
        (ErrorResponse(401), anthropic.AuthenticationError, "authentication_error"),
        (ErrorResponse(403), anthropic.PermissionDeniedError, "permission_error"),
        (ErrorResponse(404), anthropic.NotFoundError, "not_found_error"),
        (ErrorResponse(429, retry_after=3), anthropic.RateLimitError, "rate_limit_error"),
        (ErrorResponse(500), anthropic.InternalServerError, "api_error"),
        (ErrorResponse(503), anthropic.InternalServerError, "api_error"),
        (ErrorResponse(529), anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_status_faults_raise_the_sdk_exceptions(
    emulator: Emulator, fault: ErrorResponse, exception: type[Exception], kind: str
) -> None:
    emulator.script("anthropic.messages.create", fault)
    with _client(emulator) as client, pytest.raises(exception) as info:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    assert isinstance(info.value, anthropic.APIStatusError)
    assert info.value.status_code == fault.status
    assert _error(info)["type"] == kind and _error(info)["message"]  # type: ignore[arg-type]
    if fault.retry_after is not None:
        assert info.value.response.headers["retry-after"] == "3"


def test_the_sdk_retries_429_and_529_when_asked_to(emulator: Emulator) -> None:
    emulator.script(
        "anthropic.messages.create",
        ErrorResponse(429, headers={"retry-after-ms": "5"}),
        ErrorResponse(529, headers={"retry-after-ms": "5"}),
        Reply("finally"),
    )
    with _client(emulator, max_retries=2) as client:
        message = client.messages.create(model=MODEL, max_tokens=8, messages=HI)
    assert message.content[0].text == "finally"  # type: ignore[union-attr]
    assert len(emulator.requests_for("anthropic.messages.create")) == 3


def test_an_overloaded_error_mid_stream_raises(emulator: Emulator) -> None:
    emulator.script("anthropic.messages.create", StreamError(after_events=3))
    with (
        _client(emulator) as client,
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream,
    ):
        stream.get_final_message()
    assert _error(info) == {"type": "overloaded_error", "message": "Overloaded"}


async def test_a_cut_stream_and_a_dropped_connection_surface(emulator: Emulator) -> None:
    emulator.script(
        "anthropic.messages.create", CutStream(after_events=3), DropConnection(), Latency(0.5)
    )
    async with _async_client(emulator) as client:
        with pytest.raises((anthropic.APIConnectionError, httpx.RemoteProtocolError)):
            async with client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream:
                await stream.get_final_message()
        with pytest.raises(anthropic.APIConnectionError):
            await client.messages.create(model=MODEL, max_tokens=8, messages=HI)
        with pytest.raises(anthropic.APITimeoutError):
            await client.messages.create(model=MODEL, max_tokens=8, messages=HI, timeout=0.05)
    emulator.assert_consumed()


def test_malformed_events_and_bodies_fail_to_parse(emulator: Emulator) -> None:
    emulator.script("anthropic.messages.create", MalformedBody(after_events=2), MalformedBody())
    with _client(emulator) as client:
        with (
            pytest.raises(ValueError),
            client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream,
        ):
            stream.get_final_message()
        with pytest.raises(ValueError):
            client.messages.create(model=MODEL, max_tokens=8, messages=HI)


# --- the request log -----------------------------------------------------------------------------


def test_the_request_log_records_every_request(emulator: Emulator) -> None:
    emulator.script("anthropic.messages.create", ErrorResponse(429))
    with _client(emulator) as client:
        with pytest.raises(anthropic.RateLimitError):
            client.messages.create(model=MODEL, max_tokens=8, messages=HI)
        client.messages.create(model=MODEL, max_tokens=8, messages=HI, stream=True).close()
        client.messages.count_tokens(model=MODEL, messages=HI)
        client.files.upload(file=("a.txt", b"x"))
        client.messages.batches.list()
        with pytest.raises(anthropic.NotFoundError):
            client.files.retrieve_metadata("file_nope")
    routes = [r.route for r in emulator.requests]
    assert routes == [
        "anthropic.messages.create",
        "anthropic.messages.create",
        "anthropic.messages.count_tokens",
        "anthropic.files.upload",
        "anthropic.batches.list",
        "anthropic.files.retrieve",
    ]
    first = emulator.requests[0]
    assert first.wire == "anthropic" and first.path == "/anthropic/v1/messages"
    assert first.headers["anthropic-version"] and first.json["messages"] == HI
    assert emulator.requests[1].json["stream"] is True
    assert len(emulator.requests_for("anthropic.messages")) == 3


def test_anthropic_reply_usage_overrides(emulator: Emulator) -> None:
    emulator.script(
        "anthropic.messages.create",
        AnthropicReply(
            "x", input_tokens=7, cached_tokens=50, cache_write_tokens=9, output_tokens=4
        ),
    )
    with _client(emulator) as client:
        usage = client.messages.create(model=MODEL, max_tokens=8, messages=HI).usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (7, 50)
    assert (usage.cache_creation_input_tokens, usage.output_tokens) == (9, 4)


def test_each_model_has_its_own_minimum_cacheable_prefix() -> None:
    # Regression: the emulator once cached any model's prefix from 1024 tokens. Haiku 4.5
    # and Opus 4.5+ cache from 4096 tokens, as the API documents; Sonnet from 1024.
    system = [{"type": "text", "text": "w " * 2000, "cache_control": {"type": "ephemeral"}}]

    def usage(client: anthropic.Anthropic, model: str) -> tuple[int, int]:
        message = client.messages.create(
            model=model,
            max_tokens=32,
            system=system,
            messages=[{"role": "user", "content": "q"}],
        )
        return message.usage.cache_creation_input_tokens or 0, message.usage.input_tokens

    with Emulator() as emu, _client(emu) as client:
        assert usage(client, "claude-haiku-4-5") == (0, 2001)
        assert usage(client, "claude-opus-4-6") == (0, 2001)
        assert usage(client, "claude-sonnet-4-6") == (2000, 1)
