"""google-genai exceptions -> pollux errors: status table, RetryInfo delays, quotas, auth hint."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pollux import APIError, RateLimitError
from pollux.providers.gemini.errors import is_not_found, retry_delay_s, wrap_gemini_error


def sdk_error(status: int, message: str, code_status: str, details: list[Any] | None = None) -> Any:
    from google.genai import errors

    body: dict[str, Any] = {"error": {"code": status, "message": message, "status": code_status}}
    if details is not None:
        body["error"]["details"] = details
    cls = errors.ClientError if status < 500 else errors.ServerError
    return cls(status, body, httpx.Response(status, json=body))


RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "8.5s"}


def test_rate_limit_with_retry_info_is_retryable_after_the_delay() -> None:
    exc = sdk_error(429, "Resource has been exhausted", "RESOURCE_EXHAUSTED", [RETRY_INFO])
    assert retry_delay_s(exc) == 8.5
    error = wrap_gemini_error(exc)
    assert isinstance(error, RateLimitError)
    assert error.retryable and error.retry_after_s == 8.5
    assert error.status_code == 429 and error.provider == "gemini"


def test_daily_quota_is_not_retried() -> None:
    quota = {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}],
    }
    error = wrap_gemini_error(sdk_error(429, "Quota exceeded", "RESOURCE_EXHAUSTED", [quota]))
    assert isinstance(error, RateLimitError)
    assert not error.retryable and error.error_category == "quota"
    assert "daily quota" in (error.hint or "")


def test_bad_api_key_names_the_env_var() -> None:
    error = wrap_gemini_error(
        sdk_error(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT")
    )
    assert isinstance(error, APIError)
    assert not error.retryable and error.error_category == "auth_refreshable"
    assert "GEMINI_API_KEY" in (error.hint or "")


def test_permission_denied_names_the_env_var() -> None:
    error = wrap_gemini_error(
        sdk_error(403, "The caller does not have permission", "PERMISSION_DENIED")
    )
    assert "GEMINI_API_KEY" in (error.hint or "")
    assert is_not_found(sdk_error(403, "gone", "PERMISSION_DENIED"))


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_retryable(status: int) -> None:
    error = wrap_gemini_error(sdk_error(status, "The model is overloaded", "UNAVAILABLE"))
    assert error.retryable and error.error_category == "capacity"


def test_context_overflow() -> None:
    error = wrap_gemini_error(
        sdk_error(
            400,
            "The input token count exceeds the maximum number of tokens allowed (context window)",
            "INVALID_ARGUMENT",
        )
    )
    assert error.error_category in ("context_overflow", "invalid_request")


def test_network_errors() -> None:
    error = wrap_gemini_error(httpx.ConnectError("refused"))
    assert error.retryable and error.error_category == "connect"
    timeout = wrap_gemini_error(httpx.ReadTimeout("slow"), timeout_s=7)
    assert timeout.error_category == "timeout" and "7" in (timeout.hint or "")
