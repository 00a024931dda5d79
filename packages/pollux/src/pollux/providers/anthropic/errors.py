"""Map Anthropic SDK exceptions (and in-stream ``error`` events) to pollux errors, with hints.

The SDK's internal retries are off (``max_retries=0``): every failure reaches this module once per
attempt and the engine's retry loop decides from ``retryable`` and ``error_category``. Status
errors go through the shared table in :mod:`pollux.providers._errors`; this module adds what only
Anthropic says: ``529 overloaded_error`` (retryable, like every 5xx), the error ``type`` in the
body (``overloaded_error``, ``rate_limit_error``, ``authentication_error``, ...), and the
``ANTHROPIC_API_KEY`` hint. The SDK is never imported: exceptions are recognised by class name
along the MRO, so this module loads without ``anthropic``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pollux.errors import APIError, PolluxError
from pollux.providers._errors import api_error, body_message, network_error

__all__ = ["API_KEY_ENV_VAR", "BASE_URL_ENV_VAR", "PROVIDER", "event_error", "wrap_anthropic_error"]

PROVIDER = "anthropic"
API_KEY_ENV_VAR = "ANTHROPIC_API_KEY"
BASE_URL_ENV_VAR = "ANTHROPIC_BASE_URL"

# Error ``type`` values worth retrying when they arrive without a status (inside a stream).
_RETRYABLE_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _error_body(exc: BaseException) -> Mapping[str, Any]:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        return inner if isinstance(inner, Mapping) else body
    return {}


def wrap_anthropic_error(
    exc: BaseException, *, phase: str = "generate", timeout_s: float = 300.0
) -> PolluxError:
    """Translate one exception raised around an Anthropic SDK call into a pollux error.

    Pollux errors pass through unchanged; the caller raises the result ``from exc``.

    Args:
        exc: The exception.
        phase: The failed operation (``generate``, ``stream``, ``upload``, ``batch_submit``, ...).
        timeout_s: The configured request timeout, quoted in the timeout hint.

    Returns:
        The pollux error to raise.
    """
    if isinstance(exc, PolluxError):
        return exc
    names = _class_names(exc)
    if "APITimeoutError" in names or isinstance(exc, TimeoutError):
        return network_error(
            provider=PROVIDER,
            phase=phase,
            kind="timeout",
            message="request timed out",
            base_url=None,
            timeout_s=timeout_s,
        )
    if "APIConnectionError" in names:
        error = network_error(
            provider=PROVIDER,
            phase=phase,
            kind="connect",
            message=str(exc),
            base_url=None,
            timeout_s=timeout_s,
        )
        error.hint = (
            f"Check the network connection to the provider (and {BASE_URL_ENV_VAR}, if set)."
        )
        return error
    if "APIStatusError" in names:
        return _status_error(exc, phase=phase)
    if "APIResponseValidationError" in names or isinstance(exc, ValueError):
        return APIError(
            f"anthropic {phase} failed: the response could not be decoded ({exc})",
            hint="The body was cut or garbled on the way (often a proxy); retrying usually helps.",
            retryable=True,
            provider=PROVIDER,
            phase=phase,
            error_category="malformed_response",
        )
    if "APIError" in names:
        # An ``event: error`` inside a stream: the SDK raises it without an HTTP status.
        body = _error_body(exc)
        kind = body.get("type")
        message = body.get("message") or getattr(exc, "message", None) or str(exc)
        return event_error(str(kind) if kind else None, str(message), phase=phase)
    if "AnthropicError" in names:
        return APIError(
            f"anthropic {phase} failed: {exc}",
            hint=f"Set {API_KEY_ENV_VAR} or pass Config(api_key=...), then retry.",
            retryable=False,
            provider=PROVIDER,
            phase=phase,
            error_category="client",
        )
    return APIError(
        f"anthropic {phase} failed unexpectedly: {exc!r}",
        hint="This looks like a pollux bug or an unexpected response; please report it.",
        retryable=False,
        provider=PROVIDER,
        phase=phase,
        error_category="unknown",
    )


def _status_error(exc: BaseException, *, phase: str) -> APIError:
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    body = _error_body(exc)
    message = body_message(getattr(exc, "body", None)) or str(exc)
    if status is not None and status < 400:
        # An ``event: error`` inside a 200 stream: the SDK raises it as a status error.
        kind = body.get("type")
        return event_error(str(kind) if kind else None, message, phase=phase)
    headers = getattr(getattr(exc, "response", None), "headers", None)
    header_map = dict(headers.items()) if headers is not None else None
    # 529 (overloaded) and every other 5xx are transient on Anthropic's side.
    retryable = True if status is not None and status >= 500 else None
    error = api_error(
        provider=PROVIDER,
        phase=phase,
        status_code=status,
        message=message,
        headers=header_map,
        retryable=retryable,
    )
    kind = body.get("type")
    if kind == "overloaded_error" or status == 529:
        error.error_category = "capacity"
        error.hint = (
            "Anthropic is overloaded (529); pollux retries it with backoff: raise "
            "RetryPolicy.max_attempts / max_elapsed_s, or lower Config.request_concurrency."
        )
    elif error.error_category == "auth_refreshable":
        error.hint = f"Check the API key: set {API_KEY_ENV_VAR} (or pass api_key=...)."
    return error


def event_error(kind: str | None, message: str, *, phase: str = "stream") -> APIError:
    """The error for an ``error`` event inside a stream (``overloaded_error``, ...)."""
    retryable = kind in _RETRYABLE_TYPES or kind is None
    if kind == "overloaded_error":
        hint = "Anthropic was overloaded mid-stream; the stream is not resumed, call again."
        category = "capacity"
    elif kind == "rate_limit_error":
        hint = "Rate limited mid-stream; lower Config.request_concurrency and call again."
        category = "rate_limit"
    else:
        hint = "The stream failed on Anthropic's side; calling again usually helps."
        category = kind or "stream_error"
    return APIError(
        f"anthropic {phase} failed: {kind or 'error'}: {message}",
        hint=hint,
        retryable=retryable,
        provider=PROVIDER,
        phase=phase,
        error_category=category,
    )
