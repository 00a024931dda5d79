"""Anthropic's error bodies, authentication and the header checks every route shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pollux.testing._emulator._core import _DEFAULT_MESSAGES, WRONG_KEY_MESSAGE, ApiError, Call
from pollux.testing._emulator.wires._common import bearer_key

__all__ = [
    "ERROR_TYPES",
    "api_key",
    "error_body",
    "invalid",
    "not_found",
    "require_headers",
]

ERROR_TYPES = frozenset(
    [
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "timeout_error",
        "api_error",
        "overloaded_error",
        "conflict_error",
    ]
)
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_MESSAGES = {
    400: "Invalid request.",
    401: "invalid x-api-key",
    402: "Your credit balance is too low to access the Anthropic API.",
    403: "Your API key does not have permission to use the specified resource.",
    404: "The requested resource could not be found.",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of request tokens has exceeded your per-minute rate limit.",
    500: "Internal server error",
    503: "Service unavailable",
    504: "Request timed out",
    529: "Overloaded",
}


def error_type_for(error: ApiError) -> str:
    """The Anthropic error ``type`` for ``error``: its own when it is one, else by status.

    A fault without an ``error_type`` arrives with the core's OpenAI-style default for its
    status (``invalid_request_error`` for a 404, say); that counts as unset.
    """
    by_status = _TYPE_BY_STATUS.get(
        error.status, "api_error" if error.status >= 500 else "invalid_request_error"
    )
    core_default = _DEFAULT_MESSAGES.get(error.status, ("", ""))[0]
    fallback = "server_error" if error.status >= 500 else "invalid_request_error"
    if error.error_type in ERROR_TYPES and error.error_type not in (core_default, fallback):
        return str(error.error_type)
    return by_status


def error_body(error: ApiError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``, as the Anthropic API sends."""
    message = error.message
    generic = _DEFAULT_MESSAGES.get(error.status, (None, "Error."))[1]
    if message in (generic, "Error.", WRONG_KEY_MESSAGE):
        # A fault without its own message (or the core's OpenAI-worded wrong-key answer): say it
        # the way Anthropic does. A message the test scripted is sent as it is.
        message = _MESSAGES.get(error.status, message)
    return {"type": "error", "error": {"type": error_type_for(error), "message": message}}


def api_key(headers: Mapping[str, str]) -> str | None:
    """The key from ``x-api-key``, or from ``Authorization: Bearer`` (what SDK 2.x sends)."""
    return headers.get("x-api-key") or bearer_key(headers)


def invalid(message: str) -> ApiError:
    """A 400 ``invalid_request_error``."""
    return ApiError(400, message, error_type="invalid_request_error")


def not_found(message: str) -> ApiError:
    """A 404 ``not_found_error``."""
    return ApiError(404, message, error_type="not_found_error")


def require_headers(call: Call) -> None:
    """A key and ``anthropic-version`` must be present, as the real API requires."""
    headers = call.request.headers
    if not api_key(headers):
        raise ApiError(401, "x-api-key header is required", error_type="authentication_error")
    if not headers.get("anthropic-version"):
        raise invalid("anthropic-version: header is required")
