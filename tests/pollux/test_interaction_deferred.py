from __future__ import annotations

import json

import pytest

from pollux import ConfigurationError, DeferredHandle, DeferredSnapshot


def _handle(**kw: object) -> DeferredHandle:
    base: dict[str, object] = {
        "job_id": "batch_1",
        "provider": "openai",
        "model": "gpt-5-nano",
        "request_count": 2,
        "submitted_at": 1700000000.5,
    }
    base.update(kw)
    return DeferredHandle(**base)  # type: ignore[arg-type]


def test_handle_round_trip() -> None:
    handle = _handle(
        schema_hash="abc", provider_state={"request_ids": ["pollux-000000"], "owned_file_ids": []}
    )
    data = json.loads(json.dumps(handle.to_dict()))
    assert DeferredHandle.from_dict(data) == handle
    assert DeferredHandle.from_dict(_handle().to_dict()) == _handle()
    assert _handle().to_dict()["provider_state"] is None


def test_handle_provider_state_is_copied() -> None:
    state = {"ids": [1]}
    handle = _handle(provider_state=state)
    state["ids"].append(2)
    assert handle.provider_state == {"ids": [1]}
    dumped = handle.to_dict()
    dumped["provider_state"]["ids"].append(3)
    assert handle.provider_state == {"ids": [1]}


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"job_id": "j", "provider": "openai", "model": "m", "request_count": 1},
        {"job_id": "", "provider": "openai", "model": "m", "request_count": 1, "submitted_at": 1},
        {
            "job_id": "j",
            "provider": "openai",
            "model": "m",
            "request_count": "1",
            "submitted_at": 1,
        },
        {
            "job_id": "j",
            "provider": "openai",
            "model": "m",
            "request_count": 1,
            "submitted_at": "now",
        },
        {
            "job_id": "j",
            "provider": "openai",
            "model": "m",
            "request_count": 1,
            "submitted_at": 1,
            "schema_hash": 5,
        },
        {
            "job_id": "j",
            "provider": "openai",
            "model": "m",
            "request_count": 1,
            "submitted_at": 1,
            "provider_state": [1],
        },
        "handle",
    ],
)
def test_handle_from_dict_errors(data: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        DeferredHandle.from_dict(data)  # type: ignore[arg-type]
    assert info.value.hint


@pytest.mark.parametrize(
    "kwargs",
    [
        {"job_id": ""},
        {"request_count": -1},
        {"request_count": True},
        {"submitted_at": float("nan")},
        {"provider_state": {"b": b"x"}},
    ],
)
def test_handle_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        _handle(**kwargs)


def _snapshot(status: str) -> DeferredSnapshot:
    return DeferredSnapshot(
        job_id="j",
        provider="anthropic",
        model="m",
        status=status,  # type: ignore[arg-type]
        provider_status="raw",
        request_count=3,
        succeeded=1,
        failed=1,
        pending=1,
        submitted_at=1.0,
    )


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        ("queued", False),
        ("running", False),
        ("cancelling", False),
        ("completed", True),
        ("partial", True),
        ("failed", True),
        ("cancelled", True),
        ("expired", True),
    ],
)
def test_snapshot_is_terminal(status: str, terminal: bool) -> None:
    assert _snapshot(status).is_terminal is terminal


def test_snapshot_round_trip_and_validation() -> None:
    snap = _snapshot("partial")
    assert DeferredSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap
    assert (snap.completed_at, snap.expires_at) == (None, None)
    with pytest.raises(ConfigurationError):
        _snapshot("done")
    with pytest.raises(ConfigurationError):
        DeferredSnapshot.from_dict({**snap.to_dict(), "succeeded": -1})
