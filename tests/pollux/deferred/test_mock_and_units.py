"""Deferred delivery on the mock provider's in-memory timeline, the capability gate, and the
pure pieces of the OpenAI backend (status normalization, result lines)."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollux import (
    Config,
    ConfigurationError,
    DeferredHandle,
    DeferredNotReadyError,
    Session,
    Source,
    cancel_deferred,
    collect_deferred,
    defer,
    inspect_deferred,
    run_many,
)
from pollux._engine.deferred import deferred_backend
from pollux.errors import APIError
from pollux.providers._deferred import DeferredBackend, request_ids
from pollux.providers._mock_deferred import _forget_all
from pollux.providers.mock import MockProvider
from pollux.providers.openai.deferred import item_from_line, normalize_status

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)


class Summary(pydantic.BaseModel):
    title: str
    points: list[str]


async def test_mock_timeline_moves_one_step_per_inspection() -> None:
    handle = await defer(["One?", "Two?"], sources=[Source.from_text("ctx")], config=MOCK)
    assert handle.provider == "openai" and handle.model == "gpt-5-nano"
    assert handle.provider_state == {"format": 1, "backend": "mock"}
    with pytest.raises(DeferredNotReadyError) as caught:
        await collect_deferred(handle)
    assert caught.value.snapshot.status == "queued"

    seen = []
    while True:
        snapshot = await inspect_deferred(handle)
        seen.append(snapshot.status)
        if snapshot.is_terminal:
            break
    assert seen == ["queued", "running", "completed"]
    assert (snapshot.succeeded, snapshot.failed, snapshot.pending) == (2, 0, 0)
    assert snapshot.completed_at is not None

    result = await collect_deferred(handle)
    realtime = await run_many(["One?", "Two?"], sources=[Source.from_text("ctx")], config=MOCK)
    assert result.answers == realtime.answers  # the mock's usual deterministic answers
    assert result.status == "ok"
    assert [o.diagnostics.raw["deferred"]["request_id"] for o in result.outputs] == request_ids(2)


async def test_mock_round_trip_and_new_session() -> None:
    async with Session(MOCK) as session:
        handle = await session.defer("Q?")
    restored = DeferredHandle.from_dict(json.loads(json.dumps(handle.to_dict())))
    async with Session(MOCK) as session:
        for _ in range(3):
            await session.inspect_deferred(restored)
        assert (await session.collect_deferred(restored)).answers[0].startswith("Mock answer")


async def test_mock_cancel() -> None:
    handle = await defer(["a?", "b?"], config=MOCK)
    await inspect_deferred(handle)  # queued -> running
    await cancel_deferred(handle)
    assert (await inspect_deferred(handle)).status == "cancelling"
    snapshot = await inspect_deferred(handle)
    assert (snapshot.status, snapshot.failed) == ("cancelled", 2)
    result = await collect_deferred(handle)
    assert result.status == "error" and len(result.outputs) == 2
    assert all(o.diagnostics.raw["deferred"]["status"] == "cancelled" for o in result.outputs)
    await cancel_deferred(handle)  # already ended: nothing happens
    assert (await inspect_deferred(handle)).status == "cancelled"


async def test_mock_structured_output() -> None:
    handle = await defer("Summarize.", output=Summary, config=MOCK)
    for _ in range(3):
        await inspect_deferred(handle)
    result = await collect_deferred(handle, response_schema=Summary)
    assert isinstance(result.structured[0], Summary)
    assert (await collect_deferred(handle)).structured == [None]


async def test_mock_job_from_another_process_is_refused() -> None:
    handle = await defer("a?", config=MOCK)
    _forget_all()  # what a fresh process sees
    with pytest.raises(ConfigurationError, match="Unknown mock deferred job") as caught:
        await inspect_deferred(handle)
    assert "same process" in (caught.value.hint or "")


async def test_deferred_capability_can_be_declared_off() -> None:
    config = Config(
        provider="openai", model="m", use_mock=True, capabilities={"deferred_delivery": False}
    )
    with pytest.raises(ConfigurationError, match="does not support deferred") as caught:
        await defer("a?", config=config)
    assert "provider='openai'" in (caught.value.hint or "")


async def test_providers_without_deferred_raise_before_io() -> None:
    # A local server at a port nobody listens on: any I/O would fail differently.
    config = Config(provider="local", model="m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigurationError, match="local does not support deferred") as caught:
        await defer("a?", config=config)
    assert caught.value.hint
    # Declaring the capability does not help a provider that has no deferred backend.
    declared = Config(
        provider="local",
        model="m",
        base_url="http://127.0.0.1:9/v1",
        capabilities={"deferred_delivery": True},
    )
    with pytest.raises(ConfigurationError, match="does not support deferred"):
        await defer("a?", config=declared)


def test_builtin_backends_implement_the_protocol() -> None:
    provider = MockProvider(MOCK)
    assert isinstance(provider, DeferredBackend)
    assert deferred_backend(provider, MOCK) is provider


# -- OpenAI status normalization ------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "counts", "expected"),
    [
        ("validating", (0, 0), ("queued", 0, 0, 4)),
        ("in_progress", (1, 0), ("running", 1, 0, 3)),
        ("finalizing", (4, 0), ("running", 4, 0, 0)),
        ("cancelling", (1, 0), ("cancelling", 1, 0, 3)),
        ("completed", (4, 0), ("completed", 4, 0, 0)),
        ("completed", (3, 1), ("partial", 3, 1, 0)),
        ("completed", (0, 4), ("failed", 0, 4, 0)),
        ("cancelled", (1, 0), ("partial", 1, 3, 0)),
        ("cancelled", (0, 0), ("cancelled", 0, 4, 0)),
        ("expired", (2, 1), ("partial", 2, 2, 0)),
        ("expired", (0, 0), ("expired", 0, 4, 0)),
        ("failed", (0, 0), ("failed", 0, 4, 0)),
        ("something_new", (0, 0), ("running", 0, 0, 4)),
    ],
)
def test_normalize_status(raw: str, counts: tuple[int, int], expected: tuple[Any, ...]) -> None:
    succeeded, failed = counts
    assert normalize_status(raw, request_count=4, succeeded=succeeded, failed=failed) == expected


@settings(max_examples=60, deadline=None)
@given(
    raw=st.sampled_from(
        [
            "validating",
            "in_progress",
            "finalizing",
            "cancelling",
            "completed",
            "failed",
            "expired",
            "cancelled",
            "other",
        ]
    ),
    total=st.integers(0, 50),
    succeeded=st.integers(0, 60),
    failed=st.integers(0, 60),
)
def test_normalized_counts_always_add_up(raw: str, total: int, succeeded: int, failed: int) -> None:
    status, ok, bad, pending = normalize_status(
        raw, request_count=total, succeeded=succeeded, failed=failed
    )
    assert ok + bad + pending == total
    assert min(ok, bad, pending) >= 0
    terminal = status in ("completed", "partial", "failed", "cancelled", "expired")
    assert terminal == (raw in ("completed", "failed", "expired", "cancelled"))
    if terminal:
        assert pending == 0


def _response_body(text: str) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    }


def test_result_lines() -> None:
    ok = item_from_line(
        {
            "custom_id": "pollux-000000",
            "response": {"status_code": 200, "body": _response_body("hi")},
            "error": None,
        }
    )
    assert (ok.status, ok.provider_status) == ("succeeded", "200")
    assert ok.response is not None and ok.response.text == "hi"

    limited = item_from_line(
        {
            "custom_id": "pollux-000001",
            "response": {"status_code": 429, "body": {"error": {"message": "slow down"}}},
        }
    )
    assert limited.status == "failed" and limited.error is not None
    assert limited.error.status_code == 429 and "slow down" in str(limited.error)

    failed_body = dict(_response_body(""), status="failed", error={"message": "boom"})
    broken = item_from_line(
        {"custom_id": "pollux-000002", "response": {"status_code": 200, "body": failed_body}}
    )
    assert broken.status == "failed" and broken.error is not None
    assert broken.error.phase == "batch_collect"

    for code, status in (("batch_expired", "expired"), ("batch_cancelled", "cancelled")):
        item = item_from_line(
            {
                "custom_id": "pollux-000003",
                "response": None,
                "error": {"code": code, "message": "m"},
            }
        )
        assert (item.status, item.provider_status) == (status, code)
        assert item.error is not None and item.error.error_category == status

    with pytest.raises(APIError, match="custom_id"):
        item_from_line({"response": None})
