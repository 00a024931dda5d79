from __future__ import annotations

import copy
import pickle

import pytest

import pollux
from pollux.errors import (
    APIError,
    CacheError,
    ConfigurationError,
    ContextOverflowError,
    DeferredNotReadyError,
    InternalError,
    PlanningError,
    PolluxError,
    RateLimitError,
    SourceError,
    ToolCallParseError,
)
from pollux.interaction import DeferredSnapshot

HIERARCHY = {
    ConfigurationError: PolluxError,
    SourceError: PolluxError,
    PlanningError: PolluxError,
    InternalError: PolluxError,
    APIError: PolluxError,
    RateLimitError: APIError,
    CacheError: APIError,
    ContextOverflowError: APIError,
    ToolCallParseError: ConfigurationError,
    DeferredNotReadyError: PolluxError,
}


@pytest.mark.parametrize(("cls", "base"), list(HIERARCHY.items()))
def test_hierarchy(cls: type[Exception], base: type[Exception]) -> None:
    assert issubclass(cls, base)
    assert getattr(pollux, cls.__name__) is cls


def test_hierarchy_is_drawn_in_the_module_docstring() -> None:
    doc = pollux.errors.__doc__ or ""
    for cls in HIERARCHY:
        assert cls.__name__ in doc


def test_message_and_hint() -> None:
    err = SourceError("missing file", hint="check the path")
    assert str(err) == "missing file"
    assert err.message == "missing file"
    assert err.hint == "check the path"
    assert PolluxError("x").hint is None


def test_configuration_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="bad"):
        raise ConfigurationError("bad", hint="fix")


def test_api_error_attributes() -> None:
    err = RateLimitError(
        "slow down",
        hint="wait",
        retryable=True,
        status_code=429,
        retry_after_s=2.5,
        provider="openai",
        phase="generate",
        call_idx=3,
        error_category="rate_limit",
    )
    assert (err.retryable, err.status_code, err.retry_after_s) == (True, 429, 2.5)
    assert (err.provider, err.phase, err.call_idx, err.error_category) == (
        "openai",
        "generate",
        3,
        "rate_limit",
    )
    plain = APIError("boom")
    assert plain.retryable is None and plain.status_code is None and plain.call_idx is None


def test_context_overflow_defaults() -> None:
    err = ContextOverflowError("too long", n_tokens=9000, n_ctx=8192, provider="local")
    assert err.error_category == "context_overflow"
    assert err.retryable is False
    assert (err.n_tokens, err.n_ctx, err.provider) == (9000, 8192, "local")
    assert err.hint and "context" in err.hint


def test_tool_call_parse_error_fields() -> None:
    err = ToolCallParseError("bad", hint="h", tool_name="t", tool_call_id="c", arguments_text="{")
    assert (err.tool_name, err.tool_call_id, err.arguments_text) == ("t", "c", "{")


def _snapshot() -> DeferredSnapshot:
    return DeferredSnapshot(
        job_id="j",
        provider="openai",
        model="m",
        status="running",
        provider_status="in_progress",
        request_count=2,
        succeeded=0,
        failed=0,
        pending=2,
        submitted_at=1.0,
    )


def test_deferred_not_ready_carries_snapshot() -> None:
    snap = _snapshot()
    err = DeferredNotReadyError(snap)
    assert err.snapshot is snap
    assert "running" in str(err)
    assert err.hint


@pytest.mark.parametrize(
    "err",
    [
        PolluxError("a", hint="b"),
        ConfigurationError("a", hint="b"),
        APIError("a", hint="b", retryable=True, status_code=503, provider="gemini", call_idx=1),
        RateLimitError("a", retry_after_s=1.5),
        ContextOverflowError("a", n_tokens=5, n_ctx=4),
        ToolCallParseError("a", hint="b", tool_name="t", tool_call_id="c", arguments_text="x"),
        DeferredNotReadyError(_snapshot()),
    ],
)
def test_errors_pickle_and_copy_faithfully(err: PolluxError) -> None:
    for clone in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(clone) is type(err)
        assert str(clone) == str(err)
        assert vars(clone) == vars(err)
