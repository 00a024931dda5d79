"""Map Anthropic SDK exceptions (and in-stream ``error`` events) to pollux errors, with hints.

The SDK's internal retries are off (``max_retries=0``): every failure reaches this module once per
attempt and the engine's retry loop decides from ``retryable`` and ``error_category``. The SDK's
exception family is classified in :mod:`pollux.providers._stainless_errors` (shared with OpenAI);
status errors go through the shared table in :mod:`pollux.providers._errors`; this module adds
what only Anthropic says: ``529 overloaded_error`` (retryable, like every 5xx), the error
``type`` in the body (``overloaded_error``, ``rate_limit_error``, ``authentication_error``, ...),
and the ``ANTHROPIC_API_KEY`` hint. The SDK is never imported: exceptions are recognised by
class name along the MRO, so this module loads without ``anthropic``.
"""

from __future__ import annotations

from pollux.errors import APIError, PolluxError
from pollux.providers._errors import api_error, body_message
from pollux.providers._stainless_errors import (
    error_body,
    response_headers,
    status_code,
    wrap_stainless_error,
)

__all__ = ["API_KEY_ENV_VAR", "BASE_URL_ENV_VAR", "PROVIDER", "event_error", "wrap_anthropic_error"]

PROVIDER = "anthropic"
API_KEY_ENV_VAR = "ANTHROPIC_API_KEY"
BASE_URL_ENV_VAR = "ANTHROPIC_BASE_URL"

# Error ``type`` values worth retrying when they arrive without a status (inside a stream).
_RETRYABLE_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


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
    return wrap_stainless_error(
        exc,
        provider=PROVIDER,
        phase=phase,
        timeout_s=timeout_s,
        root_class="AnthropicError",
        api_key_env_var=API_KEY_ENV_VAR,
        status_error=_status_error,
        stream_error=_in_stream_error,
        connect_hint=(
            f"Check the network connection to the provider (and {BASE_URL_ENV_VAR}, if set)."
        ),
    )


def _in_stream_error(exc: BaseException, *, phase: str) -> APIError:
    # An ``event: error`` inside a stream: the SDK raises it without an HTTP status.
    body = error_body(exc)
    kind = body.get("type")
    message = body.get("message") or getattr(exc, "message", None) or str(exc)
    return event_error(str(kind) if kind else None, str(message), phase=phase)


def _status_error(exc: BaseException, *, phase: str) -> APIError:
    status = status_code(exc)
    body = error_body(exc)
    message = body_message(getattr(exc, "body", None)) or str(exc)
    if status is not None and status < 400:
        # An ``event: error`` inside a 200 stream: the SDK raises it as a status error.
        kind = body.get("type")
        return event_error(str(kind) if kind else None, message, phase=phase)
    header_map = response_headers(exc)
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
