"""One table from provider failures to pollux errors, shared by every provider.

:func:`api_error` builds an :class:`~pollux.errors.APIError` (or ``RateLimitError`` /
``ContextOverflowError``) from what an HTTP exchange or an SDK exception tells us: status code,
body message, ``Retry-After``. It decides ``retryable`` and ``error_category`` and writes a hint
that says what to do (an auth failure names the environment variable to set).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from pollux.config import API_KEY_ENV_VARS, LOCAL_API_KEY_ENV_VAR, LOCAL_BASE_URL_ENV_VAR
from pollux.errors import APIError, ContextOverflowError, PolluxError, RateLimitError

__all__ = [
    "RETRYABLE_STATUS",
    "STATUS_TABLE",
    "api_error",
    "body_message",
    "is_unknown_model",
    "network_error",
    "parse_retry_after",
    "readiness_message",
    "redirect_error",
    "redirect_from",
    "relabel_error",
    "status_rule",
]

#: The one table from HTTP status to ``(error_category, retryable)``. Statuses not listed fall
#: back by class: any other 5xx is ``("capacity", True)``, any other 4xx
#: ``("invalid_request", False)``. ``docs/pollux/engine.md`` shows this table.
STATUS_TABLE: Mapping[int, tuple[str, bool]] = {
    400: ("invalid_request", False),
    401: ("auth_refreshable", False),
    403: ("auth_refreshable", False),
    404: ("not_found", False),
    408: ("timeout", True),
    409: ("conflict", True),
    413: ("invalid_request", False),
    422: ("invalid_request", False),
    429: ("rate_limit", True),
    500: ("capacity", True),
    501: ("not_implemented", False),
    502: ("capacity", True),
    503: ("capacity", True),
    504: ("capacity", True),
    505: ("not_implemented", False),
    # 529 "overloaded": sent by Anthropic and by gateways in front of overloaded upstreams.
    529: ("capacity", True),
}


def status_rule(status: int | None) -> tuple[str | None, bool]:
    """The ``(error_category, retryable)`` of an HTTP status, from :data:`STATUS_TABLE`."""
    if status is None:
        return None, False
    rule = STATUS_TABLE.get(status)
    if rule is not None:
        return rule
    if 500 <= status < 600:
        return "capacity", True
    if 400 <= status < 500:
        return "invalid_request", False
    return None, False


#: Statuses worth retrying (derived from :data:`STATUS_TABLE`; other 5xx are retried too).
RETRYABLE_STATUS = frozenset(code for code, (_, retry) in STATUS_TABLE.items() if retry)

_OVERFLOW_MARKERS = (
    "context length",
    "context_length",
    "context window",
    "context size",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "exceeds the context",
    "n_ctx",
    "kv cache",
)
# llama.cpp: "request (5000 tokens) exceeds the available context size (4096 tokens)";
# vLLM/OpenAI: "maximum context length is 4096 tokens. However, you requested 5000 tokens".
_TOKENS_RE = (
    re.compile(r"\((\d+) tokens\)[^()]*context size \((\d+) tokens\)"),
    re.compile(r"n_tokens\D{0,5}(\d+)\D+n_ctx\D{0,5}(\d+)"),
)
_CTX_FIRST_RE = re.compile(
    r"maximum context length is (\d+) tokens.*?(?:requested|resulted in) (\d+) tokens", re.S
)


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _go_duration(text: str) -> float | None:
    # OpenAI's x-ratelimit-reset-* spell durations as Go does: "1s", "6m0s", "20ms".
    parts = _GO_DURATION.findall(text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        return None
    return sum(float(number) * _GO_UNITS[unit] for number, unit in parts)


def _rate_limit_reset(lowered: Mapping[str, str]) -> float | None:
    """Seconds until an exhausted rate limit resets, from the providers' own headers.

    OpenAI and OpenRouter send ``x-ratelimit-remaining-{requests,tokens}`` with
    ``x-ratelimit-reset-*`` durations; Anthropic sends ``anthropic-ratelimit-*-remaining`` with
    RFC 3339 ``-reset`` instants. Only an exhausted limit (remaining 0) counts.
    """
    waits: list[float] = []
    for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
        if lowered.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0":
            wait = _go_duration(lowered.get(f"x-ratelimit-reset-{kind}", ""))
            if wait is not None:
                waits.append(wait)
        if lowered.get(f"anthropic-ratelimit-{kind}-remaining", "").strip() == "0":
            raw = lowered.get(f"anthropic-ratelimit-{kind}-reset", "")
            try:
                when = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
            except ValueError:
                continue
            waits.append(when.timestamp() - time.time())
    finite = [w for w in waits if math.isfinite(w)]
    return max(0.0, max(finite)) if finite else None


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait before retrying, from the response headers.

    ``retry-after-ms`` or ``Retry-After`` (delta seconds or an HTTP date) first; without them,
    the reset time of an exhausted rate limit in the providers' ``x-ratelimit-*`` or
    ``anthropic-ratelimit-*`` headers.
    """
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if not raw:
        return _rate_limit_reset(lowered)
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


def body_message(body: Any) -> str:
    """The human message inside an error body (OpenAI-style ``{"error": {"message"}}`` or text)."""
    data = body
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            data = json.loads(text)
        except ValueError:
            sse = _sse_message(text)
            return sse if sse is not None else text.strip()[:500]
    if isinstance(data, Mapping):
        error = data.get("error", data)
        if isinstance(error, Mapping):
            message = error.get("message") or error.get("detail") or error.get("msg")
            metadata = error.get("metadata")
            # OpenRouter nests the upstream provider's error under metadata.raw.
            if isinstance(metadata, Mapping) and metadata.get("raw"):
                upstream = metadata.get("provider_name") or "upstream"
                message = f"{message} ({upstream}: {str(metadata['raw'])[:300]})"
            if message:
                return str(message)
        elif isinstance(error, str):
            return error
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return str(data)[:500] if data else ""


def _sse_message(text: str) -> str | None:
    # Gateways (LiteLLM, for one) answer a failed streamed call with an error status and an
    # event-stream body: ``data: {"error": {...}}\n\ndata: [DONE]``. The server's words are the
    # message inside the first event that parses; the SSE framing is noise.
    if "data:" not in text:
        return None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == "[DONE]":
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            continue
        if isinstance(data, (Mapping, str)):
            message = body_message(data) if isinstance(data, Mapping) else data
            if message:
                return message
    return None


def _overflow_counts(message: str) -> tuple[int | None, int | None]:
    for pattern in _TOKENS_RE:
        match = pattern.search(message)
        if match:
            return int(match.group(1)), int(match.group(2))
    match = _CTX_FIRST_RE.search(message)
    if match:
        return int(match.group(2)), int(match.group(1))
    return None, None


def _category(status: int | None, message: str) -> str | None:
    # The message refines the status (servers that answer 400 or 500 for everything): rate
    # limits, credentials and context overflow are recognised by their words too.
    low = message.lower()
    if status == 429 or "rate limit" in low or "too many requests" in low:
        return "rate_limit"
    if status in (401, 403) or "invalid api key" in low or "incorrect api key" in low:
        return "auth_refreshable"
    if any(marker in low for marker in _OVERFLOW_MARKERS) and status in (None, 400, 413, 500):
        return "context_overflow"
    return status_rule(status)[0]


# "Invalid model name", "model 'x' not found", "The model `x` does not exist", "unknown model".
_UNKNOWN_MODEL_RE = re.compile(
    # Within one sentence: "Budget 0 is invalid. This model ..." names no unknown model.
    r"(invalid|unknown|unsupported|no such|not a valid)[^\w.!?]+(\w+[^\w.!?]+){0,2}model"
    r"|model\b.{0,60}?\b(not found|does not exist|doesn't exist|is not (available|supported|"
    r"served|valid)|not supported)",
    re.I | re.S,
)


def is_unknown_model(status: int | None, message: str) -> bool:
    """True when a 400 or 404 says the server does not know the requested model."""
    return status in (None, 400, 404, 422) and bool(_UNKNOWN_MODEL_RE.search(message))


_MODEL_MISSING_RE = re.compile(
    r"(missing|required|must provide|no)\b[^.]{0,40}\bmodel\b|\bmodel\b[^.]{0,20}\b(is )?required",
    re.IGNORECASE,
)


def _hint(provider: str, category: str | None, status: int | None, message: str) -> str:
    if category == "auth_refreshable":
        env_var = API_KEY_ENV_VARS.get(provider)
        if env_var:
            return f"Check the API key: set {env_var} (or pass api_key=...) to a valid key."
        return (
            f"The server rejected the credentials: set {LOCAL_API_KEY_ENV_VAR} (or pass "
            "Config(api_key=...)) to a key it accepts."
        )
    if category == "rate_limit":
        return (
            "The provider is rate limiting: lower Config.request_concurrency or raise "
            "RetryPolicy.max_attempts / max_elapsed_s."
        )
    if is_unknown_model(status, message) or (
        category == "not_found" and "model" in message.lower()
    ):
        if provider == "local":
            return "The server does not serve this model: check Config.model against GET /models."
        return "Check Config.model: the provider does not know this model."
    if category == "capacity":
        if provider == "local":
            return "The local server failed; check its logs."
        return "The provider is overloaded or failing; retry later or raise RetryPolicy limits."
    if category == "invalid_request" and _MODEL_MISSING_RE.search(message):
        # A server that needs a model name got none (vLLM, a LiteLLM gateway): say where it goes.
        return (
            "This server needs a model name: pass Config(model='...') (the pollux command and "
            "make demo read POLLUX_MODEL)."
        )
    if category == "invalid_request":
        return "The provider rejected the request; read the message for the offending field."
    return "See the provider message above."


def api_error(
    *,
    provider: str,
    phase: str,
    status_code: int | None,
    message: str,
    headers: Mapping[str, str] | None = None,
    retryable: bool | None = None,
) -> APIError:
    """Build the pollux error for one failed provider exchange.

    Args:
        provider: The provider name.
        phase: ``generate``, ``stream``, ``upload``, ``metadata``, ...
        status_code: The HTTP status, when there was one.
        message: The provider's message (see :func:`body_message`).
        headers: Response headers, for ``Retry-After``.
        retryable: Force the retry decision; by default it follows the status code.
    """
    retry_after = parse_retry_after(headers)
    category = _category(status_code, message)
    if retryable is None:
        retryable = status_rule(status_code)[1] or (
            retry_after is not None and category != "context_overflow"
        )
    if category in ("context_overflow", "auth_refreshable"):
        retryable = False
    status_text = f" (status={status_code})" if status_code is not None else ""
    text = f"{provider} {phase} failed{status_text}: {message or 'no message'}"
    common: dict[str, Any] = {
        "retryable": retryable,
        "status_code": status_code,
        "retry_after_s": retry_after,
        "provider": provider,
        "phase": phase,
        "error_category": category,
    }
    if category == "context_overflow":
        n_tokens, n_ctx = _overflow_counts(message)
        counts = f" ({n_tokens} tokens > context {n_ctx})" if n_tokens and n_ctx else ""
        return ContextOverflowError(
            text + counts,
            n_tokens=n_tokens,
            n_ctx=n_ctx,
            hint="Shorten the prompt, history or sources, or use a model (or server setting, "
            "such as a larger --ctx-size) with a bigger context window.",
            **common,
        )
    hint = _hint(provider, category, status_code, message)
    cls = RateLimitError if category == "rate_limit" else APIError
    return cls(text, hint=hint, **common)


def readiness_message(*, provider: str, url: str, status: int, body: Any) -> str:
    """What ``check_ready`` reports when a probe got an HTTP error: the server's words and a fix.

    Uses the same table as call errors, so a 401 names the api_key and a 5xx points at the
    server, instead of one generic sentence for every status.
    """
    message = body_message(body)
    error = api_error(provider=provider, phase="metadata", status_code=status, message=message)
    if error.error_category == "auth_refreshable":
        hint = error.hint or "Pass Config(api_key=...)."
    elif error.error_category == "not_found":
        hint = "Check that base_url ends in /v1 (the OpenAI-compatible root)."
    elif error.error_category == "capacity":
        hint = "The server failed; check its logs."
    else:
        hint = error.hint or "See the server's message."
    words = f": {message}" if message else ""
    return f"{url} answered {status}{words}. {hint}"


def redirect_from(
    *, provider: str, phase: str, status: int | None, headers: Mapping[str, str] | None
) -> APIError | None:
    """The redirect error for a 3xx status (None for any other status).

    An SDK that gets a 3xx (it follows none: the shared httpx client has redirects off) raises
    it as a status error; this names the location instead of a bare "Error code: 307", and
    makes it non-retryable like the Chat Completions path.
    """
    if status is None or not 300 <= status < 400:
        return None
    location = next(
        (str(value) for key, value in (headers or {}).items() if str(key).lower() == "location"),
        None,
    )
    return redirect_error(provider=provider, phase=phase, status=status, location=location)


def redirect_error(*, provider: str, phase: str, status: int, location: str | None) -> APIError:
    """Build the pollux error for a 3xx answer: pollux follows no redirect silently."""
    where = f" to {location}" if location else ""
    return APIError(
        f"{provider} {phase} was redirected (HTTP {status}){where}; pollux does not follow "
        "redirects, since a redirected POST may be resent or turned into a GET",
        hint="Point the base URL at the final address"
        + (f" ({location})" if location else "")
        + ", or fix the proxy or gateway that redirects.",
        retryable=False,
        status_code=status,
        provider=provider,
        phase=phase,
        error_category="invalid_request",
    )


def network_error(
    *, provider: str, phase: str, kind: str, message: str, base_url: str | None, timeout_s: float
) -> APIError:
    """Build the pollux error for a transport failure (no HTTP status)."""
    if kind == "connect":
        if provider == "local":
            hint = (
                f"Is the local server running at {base_url}? Start it, or point "
                f"Config.base_url / {LOCAL_BASE_URL_ENV_VAR} at the right address."
            )
        else:
            hint = "Check the network connection to the provider."
        category = "connect"
    elif kind == "timeout":
        # Say which limit fired: this one bounds a single attempt; the overall deadline
        # (RetryPolicy.max_elapsed_s) has its own error (error_category="deadline").
        message = (
            f"no response within Config.request_timeout_s={timeout_s:g} "
            "(the per-attempt request timeout)"
        )
        hint = (
            f"No response within request_timeout_s={timeout_s:g}; raise "
            "Config.request_timeout_s or check the server."
        )
        category = "timeout"
    else:
        hint = "The connection broke; retrying usually helps (RetryPolicy.max_attempts)."
        category = "network"
    return APIError(
        f"{provider} {phase} failed: {message}",
        hint=hint,
        retryable=True,
        provider=provider,
        phase=phase,
        error_category=category,
    )


def relabel_error(
    error: PolluxError,
    *,
    built_by: str,
    provider: str,
    hint: Callable[[PolluxError], str | None] | None = None,
) -> PolluxError:
    """Put ``provider`` on an error another provider's mapping built, and its own hint.

    For a provider built on another one's code (Vertex AI on Gemini's, Azure OpenAI on
    OpenAI's). The error is changed in place and returned: ``provider`` becomes ``provider``
    where it was ``built_by``, a message that begins with ``built_by``'s name (``gemini generate
    failed``) or names it as ``provider='gemini'`` names ``provider`` instead, and the hint
    becomes ``hint(error)`` (read after the renaming) when that is not None.

    Args:
        error: The error the other provider's mapping built.
        built_by: That provider's name.
        provider: The name to put on the error.
        hint: Returns the provider's own hint for the error, or None to keep the one it has.
    """
    if getattr(error, "provider", None) == built_by:
        error.provider = provider  # type: ignore[attr-defined]
    message = error.message if isinstance(error.message, str) else str(error)
    if message.startswith(f"{built_by} "):
        message = provider + message[len(built_by) :]
    message = message.replace(f"provider='{built_by}'", f"provider='{provider}'")
    if message != error.message:
        error.message = message
        error.args = (message, *error.args[1:])
    if hint is not None:
        text = hint(error)
        if text is not None:
            error.hint = text
    return error
