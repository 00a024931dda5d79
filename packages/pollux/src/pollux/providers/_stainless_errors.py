"""The exception classification the OpenAI and Anthropic SDKs share (both are Stainless-built).

Both SDKs raise the same family of exceptions (``APITimeoutError``, ``APIConnectionError``,
``APIStatusError``, ``APIResponseValidationError``, ``APIError`` and the SDK's root error), with
the same ``body``/``status_code``/``response`` attributes. :func:`wrap_stainless_error` maps that
family to pollux errors; each provider's ``errors`` module passes what only it says (its status
and in-stream error mapping, its root class name and key variable). The SDKs are never imported:
exceptions are recognised by class name along the MRO.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pollux.errors import APIError, PolluxError
from pollux.providers._errors import network_error, redirect_from

__all__ = ["class_names", "error_body", "response_headers", "status_code", "wrap_stainless_error"]

# The SDKs wrap transport failures of a request they send, but not those raised while a caller
# iterates a stream they returned: there httpx's (or aiohttp's) own exception arrives unwrapped.
# A stall past the read timeout is then a per-attempt timeout, a cut body a network failure.
_TIMEOUT_CLASSES = frozenset(
    {"TimeoutException", "ReadTimeout", "ConnectTimeout", "PoolTimeout", "ServerTimeoutError"}
)
_NETWORK_CLASSES = frozenset(
    {
        "ReadError",
        "WriteError",
        "RemoteProtocolError",
        "ClientOSError",
        "ServerDisconnectedError",
        "ClientPayloadError",
    }
)


def class_names(exc: BaseException) -> set[str]:
    """The names of the exception's classes, along its MRO."""
    return {cls.__name__ for cls in type(exc).__mro__}


def error_body(exc: BaseException) -> Mapping[str, Any]:
    """The ``error`` object of the exception's JSON body (the body itself when unwrapped)."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        return inner if isinstance(inner, Mapping) else body
    return {}


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a status error (None when it carries none)."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def response_headers(exc: BaseException) -> dict[str, str] | None:
    """The response headers of a status error (None when there was no response)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    return dict(headers.items()) if headers is not None else None


def _broken_connection(exc: BaseException) -> str | None:
    """The message of a cut connection under an SDK's ``APIConnectionError``, if that is one."""
    seen: set[int] = set()
    current = exc.__cause__ or exc.__context__
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if class_names(current) & _NETWORK_CLASSES:
            return str(current) or type(current).__name__
        current = current.__cause__ or current.__context__
    return None


def wrap_stainless_error(
    exc: BaseException,
    *,
    provider: str,
    phase: str,
    timeout_s: float,
    root_class: str,
    api_key_env_var: str,
    status_error: Callable[..., APIError],
    stream_error: Callable[..., APIError],
    connect_hint: str | None = None,
) -> PolluxError:
    """Translate one exception raised around a Stainless SDK call into a pollux error.

    Pollux errors pass through unchanged; the caller raises the result ``from exc``.

    Args:
        exc: The exception.
        provider: The provider name the error carries.
        phase: The failed operation.
        timeout_s: The configured request timeout, quoted in the timeout hint.
        root_class: The SDK's root exception class name (``OpenAIError``, ``AnthropicError``):
            raised without a request, it is a client setup failure (most often no API key).
        api_key_env_var: The key variable the client-setup hint names.
        status_error: Maps an ``APIStatusError``; called as ``status_error(exc, phase=phase)``.
        stream_error: Maps an ``APIError`` without a status (reported inside a stream); called
            as ``stream_error(exc, phase=phase)``.
        connect_hint: Replaces the shared hint of a connection failure, when given.

    Returns:
        The pollux error to raise.
    """
    if isinstance(exc, PolluxError):
        return exc
    names = class_names(exc)
    if "APITimeoutError" in names or names & _TIMEOUT_CLASSES or isinstance(exc, TimeoutError):
        return network_error(
            provider=provider,
            phase=phase,
            kind="timeout",
            message="request timed out",
            base_url=None,
            timeout_s=timeout_s,
        )
    if "APIConnectionError" in names:
        broke = _broken_connection(exc)
        if broke is not None:
            # Connected, then cut (a stream cut mid-body): not a failure to connect.
            return network_error(
                provider=provider,
                phase=phase,
                kind="network",
                message=broke,
                base_url=None,
                timeout_s=timeout_s,
            )
        error = network_error(
            provider=provider,
            phase=phase,
            kind="connect",
            message=str(exc),
            base_url=None,
            timeout_s=timeout_s,
        )
        if connect_hint is not None:
            error.hint = connect_hint
        return error
    if names & _NETWORK_CLASSES:
        return network_error(
            provider=provider,
            phase=phase,
            kind="network",
            message=str(exc) or type(exc).__name__,
            base_url=None,
            timeout_s=timeout_s,
        )
    if "APIStatusError" in names:
        redirect = redirect_from(
            provider=provider, phase=phase, status=status_code(exc), headers=response_headers(exc)
        )
        return redirect or status_error(exc, phase=phase)
    if "APIResponseValidationError" in names or isinstance(exc, ValueError):
        # The SDK could not decode what came back (a truncated or garbled body or event).
        return APIError(
            f"{provider} {phase} failed: the response could not be decoded ({exc})",
            hint="The body was cut or garbled on the way (often a proxy); retrying usually helps.",
            retryable=True,
            provider=provider,
            phase=phase,
            error_category="malformed_response",
        )
    if "APIError" in names:
        return stream_error(exc, phase=phase)
    if root_class in names:
        return APIError(
            f"{provider} {phase} failed: {exc}",
            hint=f"Set {api_key_env_var} or pass Config(api_key=...), then retry.",
            retryable=False,
            provider=provider,
            phase=phase,
            error_category="client",
        )
    return APIError(
        f"{provider} {phase} failed unexpectedly: {exc!r}",
        hint="This looks like a pollux bug or an unexpected response; please report it.",
        retryable=False,
        provider=provider,
        phase=phase,
        error_category="unknown",
    )
