"""The Gemini job-state table (pure)."""

from __future__ import annotations

import pytest

from pollux.providers.gemini.deferred import normalize_status


@pytest.mark.parametrize(
    ("raw", "succeeded", "failed", "known", "expected"),
    [
        ("JOB_STATE_PENDING", 0, 0, False, ("queued", 0, 0, 3)),
        ("JOB_STATE_QUEUED", 0, 0, False, ("queued", 0, 0, 3)),
        ("JOB_STATE_RUNNING", 0, 0, False, ("running", 0, 0, 3)),
        ("JOB_STATE_PAUSED", 0, 0, False, ("running", 0, 0, 3)),
        ("JOB_STATE_CANCELLING", 0, 0, False, ("cancelling", 0, 0, 3)),
        ("JOB_STATE_SUCCEEDED", 3, 0, True, ("completed", 3, 0, 0)),
        ("JOB_STATE_SUCCEEDED", 2, 1, True, ("partial", 2, 1, 0)),
        ("JOB_STATE_SUCCEEDED", 0, 3, True, ("failed", 0, 3, 0)),
        ("JOB_STATE_PARTIALLY_SUCCEEDED", 1, 2, True, ("partial", 1, 2, 0)),
        ("JOB_STATE_CANCELLED", 1, 0, True, ("partial", 1, 2, 0)),
        ("JOB_STATE_CANCELLED", 0, 0, True, ("cancelled", 0, 3, 0)),
        ("JOB_STATE_EXPIRED", 0, 0, True, ("expired", 0, 3, 0)),
        ("JOB_STATE_FAILED", 0, 0, True, ("failed", 0, 3, 0)),
        ("JOB_STATE_SOMETHING_NEW", 0, 0, False, ("running", 0, 0, 3)),
    ],
)
def test_normalize_status(
    raw: str, succeeded: int, failed: int, known: bool, expected: tuple[str, int, int, int]
) -> None:
    got = normalize_status(raw, request_count=3, succeeded=succeeded, failed=failed, known=known)
    assert got == expected
