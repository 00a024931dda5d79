"""Map ``google-genai`` exceptions to pollux errors, each with a hint.

The SDK's own retries are off (``HttpRetryOptions(attempts=1)``), so every failure reaches this
module once per attempt and the engine's retry loop decides from ``retryable``. Status errors go
through the shared table in :mod:`pollux.providers._errors`; this module adds what only Google
says: the ``google.rpc.RetryInfo`` delay (``"retryDelay": "8.3s"``), ``QuotaFailure`` violations
(a per-day quota is not worth retrying today) and the canonical ``status`` string. The SDK is
never imported: exceptions are recognised by class name along the MRO.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pollux.errors import APIError, PolluxError, RateLimitError
from pollux.providers._errors import api_error, network_error, redirect_from

__all__ = [
    "API_KEY_ENV_VAR",
    "API_VERSION_ENV_VAR",
    "BASE_URL_ENV_VAR",
    "PROVIDER",
    "endpoint",
    "error_details",
    "is_not_found",
    "retry_delay_s",
    "wrap_gemini_error",
]

PROVIDER = "gemini"
API_KEY_ENV_VAR = "GEMINI_API_KEY"
#: Where the SDK (and so pollux) sends Gemini calls: a gateway, a proxy or the emulator.
BASE_URL_ENV_VAR = "GOOGLE_GEMINI_BASE_URL"
#: The API version of every path (``v1``, the SDK's default, or ``v1beta``; ``beta`` means
#: ``v1beta``). A gateway may serve only one: LiteLLM's Gemini route serves ``v1beta``.
API_VERSION_ENV_VAR = "GOOGLE_GENAI_API_VERSION"
_DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
_DEFAULT_API_VERSION = "v1"


def endpoint() -> tuple[str, str]:
    """The base URL and API version Gemini calls use, as the SDK resolves them."""
    base = os.environ.get(BASE_URL_ENV_VAR) or _DEFAULT_BASE_URL
    version = os.environ.get(API_VERSION_ENV_VAR) or _DEFAULT_API_VERSION
    return base.rstrip("/"), "v1beta" if version == "beta" else version


def _path_hint(status_code: int) -> str:
    base, version = endpoint()
    verb = "refused the method" if status_code == 405 else "does not know the path"
    return (
        f"The server at {base} {verb} on the {version} API ({base}/{version}/models/...): a "
        f"gateway may serve another version. Set {API_VERSION_ENV_VAR} to the one it serves "
        f"(v1beta for LiteLLM's Gemini route), or point {BASE_URL_ENV_VAR} at the Gemini API."
    )


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
_NETWORK_CLASSES = frozenset(
    {
        "ConnectError",
        "ReadError",
        "WriteError",
        "RemoteProtocolError",
        "ClientConnectorError",
        "ClientOSError",
        "ServerDisconnectedError",
        "ClientPayloadError",
        "ClientConnectionError",
    }
)
_TIMEOUT_CLASSES = frozenset(
    {"TimeoutException", "ReadTimeout", "ConnectTimeout", "PoolTimeout", "ServerTimeoutError"}
)


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _error_object(exc: BaseException) -> Mapping[str, Any]:
    details = getattr(exc, "details", None)
    if isinstance(details, Sequence) and not isinstance(details, (str, bytes)) and details:
        details = details[0]
    if isinstance(details, Mapping):
        inner = details.get("error")
        return inner if isinstance(inner, Mapping) else details
    return {}


def error_details(exc: BaseException) -> list[Mapping[str, Any]]:
    """The ``google.rpc`` detail objects of an SDK error (``[]`` when there are none)."""
    details = _error_object(exc).get("details")
    if not isinstance(details, Sequence) or isinstance(details, (str, bytes)):
        return []
    return [item for item in details if isinstance(item, Mapping)]


def parse_duration(value: Any) -> float | None:
    """Seconds from a protobuf Duration string (``"8.3s"``) or a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, float(value))
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match:
            return float(match.group(1))
    return None


def retry_delay_s(exc: BaseException) -> float | None:
    """The ``RetryInfo.retryDelay`` Google attached to an error, in seconds."""
    for item in error_details(exc):
        if str(item.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = parse_duration(item.get("retryDelay"))
            if delay is not None:
                return delay
    return None


def _quota_ids(exc: BaseException) -> list[str]:
    ids: list[str] = []
    for item in error_details(exc):
        if str(item.get("@type", "")).endswith("google.rpc.QuotaFailure"):
            for violation in item.get("violations") or ():
                if isinstance(violation, Mapping):
                    ids.append(str(violation.get("quotaId") or violation.get("quotaMetric") or ""))
    return [quota for quota in ids if quota]


def _reasons(exc: BaseException) -> set[str]:
    return {
        str(item.get("reason"))
        for item in error_details(exc)
        if str(item.get("@type", "")).endswith("google.rpc.ErrorInfo") and item.get("reason")
    }


def is_not_found(exc: BaseException) -> bool:
    """Whether an SDK error says the named resource (file, cache, batch) does not exist.

    Google answers 403 PERMISSION_DENIED for a file or cache that was deleted or expired (it
    does not confirm whether a name ever existed), 404 NOT_FOUND otherwise.
    """
    code = getattr(exc, "code", None)
    status = getattr(exc, "status", None)
    return code in (403, 404) or status in ("NOT_FOUND", "PERMISSION_DENIED")


def wrap_gemini_error(
    exc: BaseException, *, phase: str = "generate", timeout_s: float = 300.0
) -> PolluxError:
    """Translate one exception raised around a ``google-genai`` call into a pollux error.

    Pollux errors pass through unchanged; the caller raises the result ``from exc``.

    Args:
        exc: The exception.
        phase: The failed operation: ``generate``, ``stream``, ``upload``, ``cache``, ...
        timeout_s: The configured request timeout, quoted in the timeout hint.

    Returns:
        The pollux error to raise.
    """
    if isinstance(exc, PolluxError):
        return exc
    names = _class_names(exc)
    if names & _TIMEOUT_CLASSES or isinstance(exc, TimeoutError):
        return network_error(
            provider=PROVIDER,
            phase=phase,
            kind="timeout",
            message="request timed out",
            base_url=None,
            timeout_s=timeout_s,
        )
    if names & _NETWORK_CLASSES or isinstance(exc, ConnectionError):
        kind = "connect" if {"ConnectError", "ClientConnectorError"} & names else "network"
        return network_error(
            provider=PROVIDER,
            phase=phase,
            kind=kind,
            message=str(exc) or type(exc).__name__,
            base_url=None,
            timeout_s=timeout_s,
        )
    if "APIError" in names and isinstance(getattr(exc, "code", None), int):
        return _status_error(exc, phase=phase)
    if isinstance(exc, ValueError) or "ValidationError" in names:
        return APIError(
            f"gemini {phase} failed: the response could not be decoded ({exc})",
            hint="The body was cut or garbled on the way (often a proxy); retrying usually helps.",
            retryable=True,
            provider=PROVIDER,
            phase=phase,
            error_category="malformed_response",
        )
    return APIError(
        f"gemini {phase} failed unexpectedly: {exc!r}",
        hint="This looks like a pollux bug or an unexpected response; please report it.",
        retryable=False,
        provider=PROVIDER,
        phase=phase,
        error_category="unknown",
    )


def _status_error(exc: BaseException, *, phase: str) -> APIError:
    status_code: int = getattr(exc, "code")  # noqa: B009 - checked by the caller
    body = _error_object(exc)
    message = str(getattr(exc, "message", None) or body.get("message") or exc)
    status = getattr(exc, "status", None) or body.get("status")
    headers: dict[str, str] | None = None
    response_headers = getattr(getattr(exc, "response", None), "headers", None)
    if response_headers is not None:
        try:
            headers = {str(k): str(v) for k, v in response_headers.items()}
        except Exception:  # a replay or mock response with odd headers
            headers = None
    redirect = redirect_from(provider=PROVIDER, phase=phase, status=status_code, headers=headers)
    if redirect is not None:
        return redirect
    delay = retry_delay_s(exc)
    if delay is not None:
        headers = {**(headers or {}), "retry-after": f"{delay:g}"}
    if status_code == 429:
        quotas = _quota_ids(exc)
        daily = [quota for quota in quotas if "PerDay" in quota]
        if daily:
            return RateLimitError(
                f"gemini {phase} failed (status=429): {message}",
                hint=f"The daily quota {daily[0]!r} is spent: wait until it resets, or raise "
                "the limit (billing) at aistudio.google.com.",
                retryable=False,
                status_code=429,
                retry_after_s=delay,
                provider=PROVIDER,
                phase=phase,
                error_category="quota",
            )
    error = api_error(
        provider=PROVIDER,
        phase=phase,
        status_code=status_code,
        message=f"{status}: {message}" if status and status not in message else message,
        headers=headers,
    )
    reasons = _reasons(exc)
    if (status_code == 400 and "api key" in message.lower()) or "API_KEY_INVALID" in reasons:
        # Google reports a bad key as 400 INVALID_ARGUMENT "API key not valid".
        error = APIError(
            str(error),
            hint=f"Check the API key: set {API_KEY_ENV_VAR} (or pass api_key=...) to a valid key.",
            retryable=False,
            status_code=status_code,
            provider=PROVIDER,
            phase=phase,
            error_category="auth_refreshable",
        )
    elif status_code == 429 and error.retry_after_s is None:
        error.hint = (
            "Gemini is rate limiting (a per-minute quota): lower Config.request_concurrency or "
            "raise RetryPolicy.max_attempts / max_elapsed_s."
        )
    elif status_code == 403 and ("file" in message.lower() or "cachedcontent" in message.lower()):
        error.hint = (
            "The uploaded file or context cache this request named is gone (deleted or "
            "expired); pollux uploads or creates it again on the next call."
        )
        error.error_category = "not_found"
    elif status_code == 405 or (
        status_code == 404 and os.environ.get(BASE_URL_ENV_VAR) and "model" not in message.lower()
    ):
        # Behind a gateway, a path of the wrong API version: the request itself is fine.
        error.hint = _path_hint(status_code)
        error.retryable = False
    elif status == "FAILED_PRECONDITION" and "location" in message.lower():
        error.hint = "The Gemini API is not available in this region for this key or model."
    return error
