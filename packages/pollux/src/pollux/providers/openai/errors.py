"""Map OpenAI SDK exceptions to pollux errors, each with a hint.

The SDK's internal retries are off (``max_retries=0``), so every failure reaches this module
once per attempt; the engine's retry loop decides from ``retryable`` and ``error_category``.
The SDK's exception family is classified in :mod:`pollux.providers._stainless_errors` (shared
with Anthropic) and status errors go through the shared table in :mod:`pollux.providers._errors`;
this module adds what only OpenAI says: the error ``code`` (``context_length_exceeded``,
``insufficient_quota``) and the offending ``param``. The SDK is never imported: exceptions are
recognised by class name along the MRO, so this module loads without ``openai``.
"""

from __future__ import annotations

from pollux.errors import APIError, ContextOverflowError, PolluxError, RateLimitError
from pollux.providers._errors import api_error, body_message, is_unknown_model
from pollux.providers._stainless_errors import (
    error_body,
    response_headers,
    status_code,
    wrap_stainless_error,
)

PROVIDER = "openai"
API_KEY_ENV_VAR = "OPENAI_API_KEY"

_OVERFLOW_CODES = frozenset({"context_length_exceeded"})


def wrap_openai_error(
    exc: BaseException, *, phase: str = "generate", timeout_s: float = 300.0
) -> PolluxError:
    """Translate one exception raised around an OpenAI SDK call into a pollux error.

    Pollux errors pass through unchanged; the caller raises the result ``from exc``.

    Args:
        exc: The exception.
        phase: The failed operation: ``generate``, ``stream``, ``upload`` or ``delete``.
        timeout_s: The configured request timeout, quoted in the timeout hint.

    Returns:
        The pollux error to raise.
    """
    return wrap_stainless_error(
        exc,
        provider=PROVIDER,
        phase=phase,
        timeout_s=timeout_s,
        root_class="OpenAIError",
        api_key_env_var=API_KEY_ENV_VAR,
        status_error=_status_error,
        stream_error=_in_stream_error,
    )


def _in_stream_error(exc: BaseException, *, phase: str) -> APIError:
    # An error the API reported inside a stream, without an HTTP status.
    code = error_body(exc).get("code")
    return stream_error(
        str(getattr(exc, "message", exc)),
        code=str(code) if code is not None else None,
        phase=phase,
    )


def _status_error(exc: BaseException, *, phase: str) -> APIError:
    status = status_code(exc)
    body = error_body(exc)
    message = body_message(getattr(exc, "body", None)) or str(exc)
    code = body.get("code") or getattr(exc, "code", None)
    param = body.get("param")
    header_map = response_headers(exc)
    if code in _OVERFLOW_CODES:
        error = api_error(
            provider=PROVIDER,
            phase=phase,
            status_code=status,
            message=message,
            headers=header_map,
            retryable=False,
        )
        if isinstance(error, ContextOverflowError):
            return error
        return ContextOverflowError(
            str(error),
            hint="Shorten the prompt or history, use fewer or smaller sources, or pick a model "
            "with a larger context window.",
            status_code=status,
            provider=PROVIDER,
            phase=phase,
        )
    if status == 429 and code == "insufficient_quota":
        return RateLimitError(
            f"openai {phase} failed (status=429): {message}",
            hint="The account is out of quota: check billing and limits at platform.openai.com.",
            retryable=False,
            status_code=status,
            provider=PROVIDER,
            phase=phase,
            error_category="quota",
        )
    error = api_error(
        provider=PROVIDER, phase=phase, status_code=status, message=message, headers=header_map
    )
    if (
        error.error_category == "invalid_request"
        and isinstance(param, str)
        and param
        and not is_unknown_model(status, message)  # keep the shared "check Config.model" hint
    ):
        error.hint = f"OpenAI rejected the parameter {param!r}; fix it or remove it."
    return error


def stream_error(message: str, *, code: str | None = None, phase: str = "stream") -> APIError:
    """The error raised when a stream reports ``error`` or a response ends ``failed``."""
    if code in _OVERFLOW_CODES:
        return ContextOverflowError(
            f"openai response failed: {message}",
            provider=PROVIDER,
            phase=phase,
        )
    retryable = code in {"server_error", "rate_limit_exceeded", None}
    return APIError(
        f"openai response failed: {message}",
        hint="The response failed on OpenAI's side; retrying usually helps.",
        retryable=retryable,
        provider=PROVIDER,
        phase=phase,
        error_category=code or "response_failed",
    )


__all__ = ["API_KEY_ENV_VAR", "PROVIDER", "stream_error", "wrap_openai_error"]
