"""SDK exceptions -> pollux errors, with retry metadata and a hint."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest

from pollux.errors import APIError, ConfigurationError, ContextOverflowError, RateLimitError
from pollux.providers.openai.errors import wrap_openai_error

_REQUEST = httpx2.Request("POST", "https://api.openai.com/v1/responses")


def _status(
    cls: type[openai.APIStatusError],
    status: int,
    body: dict[str, Any] | None,
    headers: dict[str, str] | None = None,
) -> openai.APIStatusError:
    response = httpx2.Response(status, headers=headers or {}, request=_REQUEST)
    message = (body or {}).get("error", {}).get("message", "error")
    return cls(message, response=response, body=body)


def _body(message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "x", "code": code, "param": param}}


def test_auth_error_names_the_env_var() -> None:
    exc = _status(openai.AuthenticationError, 401, _body("Incorrect API key provided"))
    err = wrap_openai_error(exc, phase="generate")
    assert isinstance(err, APIError)
    assert err.status_code == 401
    assert err.retryable is False
    assert err.provider == "openai"
    assert err.phase == "generate"
    assert "OPENAI_API_KEY" in (err.hint or "")


def test_rate_limit_is_retryable_with_retry_after() -> None:
    exc = _status(
        openai.RateLimitError, 429, _body("Rate limit reached"), headers={"retry-after": "7"}
    )
    err = wrap_openai_error(exc)
    assert isinstance(err, RateLimitError)
    assert err.retryable is True
    assert err.retry_after_s == 7.0
    assert err.error_category == "rate_limit"
    assert err.hint


def test_retry_after_ms_wins() -> None:
    exc = _status(openai.RateLimitError, 429, _body("slow down"), headers={"retry-after-ms": "250"})
    err = wrap_openai_error(exc)
    assert isinstance(err, APIError)
    assert err.retry_after_s == 0.25


def test_insufficient_quota_is_not_retried() -> None:
    exc = _status(
        openai.RateLimitError, 429, _body("You exceeded your quota", "insufficient_quota")
    )
    err = wrap_openai_error(exc)
    assert isinstance(err, RateLimitError)
    assert err.retryable is False
    assert "billing" in (err.hint or "")


def test_context_overflow_by_code_with_token_counts() -> None:
    message = (
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130512 tokens. Please reduce the length of the messages."
    )
    exc = _status(openai.BadRequestError, 400, _body(message, "context_length_exceeded"))
    err = wrap_openai_error(exc)
    assert isinstance(err, ContextOverflowError)
    assert (err.n_tokens, err.n_ctx) == (130512, 128000)
    assert err.retryable is False
    assert err.hint


def test_context_overflow_by_code_without_counts() -> None:
    exc = _status(
        openai.BadRequestError,
        400,
        _body("Your input exceeds the limit of this model.", "context_length_exceeded"),
    )
    err = wrap_openai_error(exc)
    assert isinstance(err, ContextOverflowError)
    assert err.n_tokens is None


def test_bad_request_names_the_parameter() -> None:
    exc = _status(
        openai.BadRequestError,
        400,
        _body("Unsupported parameter: 'temperature'", "unsupported_parameter", "temperature"),
    )
    err = wrap_openai_error(exc)
    assert isinstance(err, APIError)
    assert err.retryable is False
    assert err.status_code == 400
    assert "'temperature'" in (err.hint or "")


def test_unknown_model_404() -> None:
    exc = _status(openai.NotFoundError, 404, _body("The model `gpt-9` does not exist"))
    err = wrap_openai_error(exc)
    assert isinstance(err, APIError)
    assert err.retryable is False
    assert "Config.model" in (err.hint or "")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_retryable(status: int) -> None:
    exc = _status(openai.InternalServerError, status, _body("overloaded"))
    err = wrap_openai_error(exc, phase="stream")
    assert isinstance(err, APIError)
    assert err.retryable is True
    assert err.phase == "stream"


def test_timeout_and_connection_errors() -> None:
    timeout = wrap_openai_error(openai.APITimeoutError(request=_REQUEST), timeout_s=12)
    assert isinstance(timeout, APIError)
    assert timeout.retryable is True
    assert timeout.error_category == "timeout"
    assert "request_timeout_s" in (timeout.hint or "")
    down = wrap_openai_error(openai.APIConnectionError(request=_REQUEST))
    assert isinstance(down, APIError)
    assert down.retryable is True
    assert down.hint


def test_pollux_errors_pass_through_and_others_are_wrapped() -> None:
    original = ConfigurationError("bad", hint="fix")
    assert wrap_openai_error(original) is original
    wrapped = wrap_openai_error(RuntimeError("weird"))
    assert isinstance(wrapped, APIError)
    assert wrapped.retryable is False
    assert wrapped.hint


def test_undecodable_responses_are_retryable() -> None:
    import json

    try:
        json.loads('{"id": "resp_1", "out')
    except ValueError as exc:
        err = wrap_openai_error(exc, phase="generate")
    assert isinstance(err, APIError)
    assert err.retryable is True
    assert err.error_category == "malformed_response"
    assert err.hint


def test_stream_error_without_status() -> None:
    exc = openai.APIError("The server had an error", _REQUEST, body={"code": "server_error"})
    err = wrap_openai_error(exc, phase="stream")
    assert isinstance(err, APIError)
    assert err.retryable is True
    assert err.phase == "stream"
    assert "server had an error" in str(err)
