"""Pieces every Gemini route shares: Google's error shape, key spelling, times, paging.

The Gemini API speaks Google's JSON conventions: errors are ``{"error": {"code", "message",
"status", "details"}}`` with canonical status names, durations are ``"3600s"``, timestamps are
RFC 3339 in UTC, int64 counts are strings, and lists page with ``pageSize``/``pageToken``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pollux.testing._emulator._core import _DEFAULT_MESSAGES, ApiError, Call

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
GOOGLE_MESSAGES = {
    400: "Request contains an invalid argument.",
    401: "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential.",
    403: "The caller does not have permission",
    404: "Requested entity was not found.",
    409: "The operation was aborted.",
    429: "Resource has been exhausted (e.g. check quota).",
    499: "The operation was cancelled.",
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    502: "Bad gateway.",
    503: "The model is overloaded. Please try again later.",
    504: "The request timed out. Please try again.",
}
TYPE_PREFIX = "type.googleapis.com/google.rpc."


class GoogleError(ApiError):
    """An :class:`ApiError` with a canonical status name and ``details`` entries."""

    def __init__(
        self,
        status: int,
        message: str,
        google_status: str | None = None,
        *,
        details: Sequence[Mapping[str, Any]] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            status,
            message,
            error_type=google_status or STATUS_NAMES.get(status, "UNKNOWN"),
            headers=headers,
        )
        self.details = [dict(d) for d in details]


def invalid(message: str) -> GoogleError:
    """A 400 ``INVALID_ARGUMENT``."""
    return GoogleError(400, message)


def google_error_body(error: ApiError) -> dict[str, Any]:
    """Render any :class:`ApiError` (a route's or a scripted fault's) as Google does."""
    status_name = error.error_type or ""
    if not status_name.isupper():
        status_name = STATUS_NAMES.get(
            error.status, "INTERNAL" if error.status >= 500 else "FAILED_PRECONDITION"
        )
    message = error.message
    default = _DEFAULT_MESSAGES.get(error.status)
    if (default is not None and message == default[1]) or message in ("", "Error."):
        message = GOOGLE_MESSAGES.get(error.status, message)
    if message.startswith("Invalid URL ("):
        message = "Requested entity was not found."
    details = list(error.details) if isinstance(error, GoogleError) else []
    if error.code and error.code.isupper():
        details.append(
            {
                "@type": TYPE_PREFIX + "ErrorInfo",
                "reason": error.code,
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
        )
    if error.status == 429 and not any("QuotaFailure" in str(d.get("@type")) for d in details):
        details.append(
            {
                "@type": TYPE_PREFIX + "QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/"
                        "generate_content_requests",
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel",
                        "quotaDimensions": {"location": "global"},
                        "quotaValue": "60",
                    }
                ],
            }
        )
    retry_after = error.headers.get("retry-after")
    if retry_after is not None and not any("RetryInfo" in str(d.get("@type")) for d in details):
        details.append({"@type": TYPE_PREFIX + "RetryInfo", "retryDelay": f"{retry_after}s"})
    body: dict[str, Any] = {
        "code": error.status,
        "message": message,
        "status": status_name,
    }
    if details:
        body["details"] = details
    return {"error": body}


# --- keys ------------------------------------------------------------------------------------

# Values under these keys are the caller's data (function arguments, JSON Schemas, labels):
# their keys are kept as sent.
_OPAQUE = frozenset(
    ["args", "response", "parametersJsonSchema", "responseJsonSchema", "labels", "metadata"]
)
_SNAKE = re.compile(r"_([a-z0-9])")


def camel(key: str) -> str:
    """``file_uri`` -> ``fileUri`` (camelCase keys pass unchanged)."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), key) if "_" in key else key


def normalize(value: Any) -> Any:
    """The body with every field name in camelCase, as the API's JSON parser accepts both.

    The proto JSON parser behind the real API takes ``file_uri`` and ``fileUri`` alike, and
    google-genai sometimes sends both spellings in one request.
    """
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = camel(key) if isinstance(key, str) else key
        if name in _OPAQUE:
            out[name] = item
        elif name == "properties" and isinstance(item, dict):
            out[name] = {k: normalize(v) for k, v in item.items()}
        else:
            out[name] = normalize(item)
    return out


def body_of(call: Call) -> dict[str, Any]:
    """The request's JSON object, normalized; a 400 like Google's when it is not one."""
    data = call.request.json
    if data is None and not call.request.body.strip():
        return {}
    if not isinstance(data, dict):
        raise invalid(
            "Invalid JSON payload received. Unexpected token.\n"
            + call.request.body[:40].decode("utf-8", "replace")
        )
    result = normalize(data)
    assert isinstance(result, dict)
    return result


# --- times -----------------------------------------------------------------------------------


def rfc3339(when: float) -> str:
    """``2026-01-01T00:00:00.000000Z``."""
    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(value: Any, field: str) -> float:
    """Seconds since the epoch, or a 400 naming ``field``."""
    if isinstance(value, str):
        text = value.strip().replace("Z", "+00:00")
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=timezone.utc)
            return parsed.timestamp()
    raise invalid(
        f"Invalid value at '{field}' (type.googleapis.com/google.protobuf.Timestamp), \"{value}\""
    )


def parse_duration(value: Any, field: str) -> float:
    """``"3600s"`` (or ``"1.5s"``) as seconds, or a 400 naming ``field``."""
    if isinstance(value, str) and value.endswith("s"):
        try:
            seconds = float(value[:-1])
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return seconds
    raise invalid(
        f"Invalid value at '{field}' (type.googleapis.com/google.protobuf.Duration), \"{value}\""
    )


# --- paging ----------------------------------------------------------------------------------


def page(
    call: Call, items: Sequence[Any], render: Callable[[Any], Any], key: str, default_size: int
) -> dict[str, Any]:
    """One page of ``items`` under ``key``, with ``nextPageToken`` when more remain."""
    query = call.request.query
    try:
        size = int(query.get("pageSize") or query.get("page_size") or default_size)
        start = int(query.get("pageToken") or query.get("page_token") or 0)
    except ValueError as exc:
        raise invalid("Invalid page_size or page_token.") from exc
    size = max(1, min(size, 1000))
    chunk = items[start : start + size]
    out: dict[str, Any] = {key: [render(item) for item in chunk]} if chunk else {}
    if start + size < len(items):
        out["nextPageToken"] = str(start + size)
    return out


def model_name(raw: str) -> str:
    """The bare model id from a path segment or a ``[.../]models/...`` resource name."""
    return raw.rsplit("models/", 1)[-1] if "models/" in raw else raw


__all__ = [
    "GOOGLE_MESSAGES",
    "STATUS_NAMES",
    "GoogleError",
    "body_of",
    "camel",
    "google_error_body",
    "invalid",
    "model_name",
    "normalize",
    "page",
    "parse_duration",
    "parse_rfc3339",
    "rfc3339",
]
