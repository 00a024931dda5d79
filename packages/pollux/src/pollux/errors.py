"""The pollux error hierarchy.

Every error carries a ``hint`` that says how to fix the problem::

    Exception
    └── PolluxError                  base of every pollux error (message, hint)
        ├── ConfigurationError       bad configuration or input (also a ValueError)
        │   └── ToolCallParseError   a model's tool-call arguments are not a JSON object
        │                            (also an APIError, as in pollux 2.0)
        ├── SourceError              a source could not be validated or loaded
        │   └── SourceTypeError      a source argument of the wrong type (also a TypeError)
        ├── PlanningError            execution planning failed
        ├── InternalError            a pollux bug or broken invariant
        ├── APIError                 a provider call failed (retryable, status_code, ...)
        │   ├── ToolCallParseError   (see above; error_category "tool_call_parse")
        │   ├── RateLimitError       HTTP 429 or an equivalent provider signal
        │   ├── CacheError           a cache operation failed
        │   └── ContextOverflowError the request does not fit the model's context window
        └── DeferredNotReadyError    collect_deferred() on a job that is not terminal yet

``ConfigurationError`` also derives from ``ValueError`` so code written against the plain
``ValueError`` of earlier validation (for example ``RetryPolicy``) keeps working.

Errors pickle and copy faithfully, including ``hint`` and every structured attribute.

Message and hint pass through the secret scrubber (``pollux._scrub``): an API key a server
echoed in its error body never reaches ``str(error)``, ``error.hint`` or a serialized Output.
"""

from __future__ import annotations

from typing import Any

from ._scrub import scrub

__all__ = [
    "APIError",
    "CacheError",
    "ConfigurationError",
    "ContextOverflowError",
    "DeferredNotReadyError",
    "InternalError",
    "PlanningError",
    "PolluxError",
    "RateLimitError",
    "SourceError",
    "SourceTypeError",
    "ToolCallParseError",
]


def _restore_error(
    cls: type[PolluxError], args: tuple[Any, ...], state: dict[str, Any]
) -> PolluxError:
    # Rebuild without calling __init__: subclasses take keyword-only arguments that
    # ``Exception.__reduce__`` would lose.
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class PolluxError(Exception):
    """Base exception for all pollux errors.

    Args:
        message: What went wrong.
        hint: How to fix it.

    Example:
        >>> err = PolluxError("bad thing", hint="do the good thing")
        >>> (str(err), err.hint)
        ('bad thing', 'do the good thing')
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        message = scrub(message) if isinstance(message, str) else message
        super().__init__(message)
        self.message = message
        self.hint = hint

    @property
    def hint(self) -> str | None:
        """How to fix the problem (scrubbed of secrets, like the message)."""
        value: str | None = self.__dict__.get("_hint")
        return value

    @hint.setter
    def hint(self, value: str | None) -> None:
        value = scrub(value) if isinstance(value, str) else value
        self.__dict__["_hint"] = value
        # A printed traceback shows the hint as a note (PEP 678), kept in step with the attribute
        # when a wrapper rewrites it; notes added by others stay.
        notes: list[str] = self.__dict__.setdefault("__notes__", [])
        old = self.__dict__.pop("_hint_note", None)
        if old in notes:
            notes.remove(old)
        if value:
            note = f"hint: {value}"
            notes.insert(0, note)
            self.__dict__["_hint_note"] = note

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_error, (type(self), self.args, dict(self.__dict__)))


class ConfigurationError(PolluxError, ValueError):
    """Configuration validation or resolution failed."""


class SourceError(PolluxError):
    """Source validation or loading failed."""


class SourceTypeError(SourceError, TypeError):
    """A source constructor got an argument of the wrong type (also a ``TypeError``)."""


class PlanningError(PolluxError):
    """Execution planning failed."""


class InternalError(PolluxError):
    """A pollux internal error (bug) or invariant violation."""


class APIError(PolluxError):
    """A provider API call failed.

    Providers attach retry metadata so the engine can retry a bounded number of times
    without matching substrings of messages.

    Args:
        message: What went wrong.
        hint: How to fix it.
        retryable: Whether retrying the same call may succeed (``None`` = unknown).
        status_code: The HTTP status code, when there was one.
        retry_after_s: The delay the provider asked for before a retry, in seconds.
        provider: The provider name (``"openai"``, ``"gemini"``, ...).
        phase: The operation that failed (``"generate"``, ``"stream"``, ``"upload"``,
            ``"cache"``, ``"batch_submit"``, ...).
        call_idx: The index of the failed call within a ``run_many`` fan-out.
        error_category: A coarse category such as ``"rate_limit"``, ``"auth_refreshable"``,
            ``"capacity"`` or ``"context_overflow"``.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        retryable: bool | None = None,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        provider: str | None = None,
        phase: str | None = None,
        call_idx: int | None = None,
        error_category: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.provider = provider
        self.phase = phase
        self.call_idx = call_idx
        self.error_category = error_category


class RateLimitError(APIError):
    """Rate limit exceeded (HTTP 429)."""


class CacheError(APIError):
    """Cache operation failed."""


class ContextOverflowError(APIError):
    """The request does not fit the model's context window.

    Args:
        message: What went wrong.
        n_tokens: The number of tokens the request needed, when the provider said so.
        n_ctx: The model's context size, when the provider said so.
        **kwargs: The :class:`APIError` keyword arguments. ``error_category`` defaults to
            ``"context_overflow"`` and ``retryable`` to ``False``: the same request fails again.
    """

    def __init__(
        self,
        message: str,
        *,
        n_tokens: int | None = None,
        n_ctx: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("error_category", "context_overflow")
        kwargs.setdefault("retryable", False)
        if kwargs.get("hint") is None:
            kwargs["hint"] = (
                "Shorten the prompt or history, use fewer or smaller sources, or pick a model "
                "with a larger context window."
            )
        super().__init__(message, **kwargs)
        self.n_tokens = n_tokens
        self.n_ctx = n_ctx


class ToolCallParseError(APIError, ConfigurationError):
    """A tool call's arguments are not valid JSON, or not a JSON object.

    Raised by :meth:`pollux.ToolCall.arguments_dict` and by providers whose model produced
    malformed tool-call JSON. It is an :class:`APIError` (as in pollux 2.0, so ``except
    APIError`` catches it) with ``error_category="tool_call_parse"`` and ``retryable=False``,
    and also a :class:`ConfigurationError` (a ``ValueError``).

    Args:
        message: What went wrong.
        hint: How to fix it (the JSON parser's message for malformed JSON).
        tool_name: The name of the requested tool.
        tool_call_id: The id of the tool call.
        arguments_text: The raw argument text the model produced.
        provider: The provider name, when a provider reported it.
        phase: The operation that failed, when a provider reported it.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
        arguments_text: str | None = None,
        provider: str | None = None,
        phase: str | None = None,
    ) -> None:
        super().__init__(
            message,
            hint=hint,
            retryable=False,
            provider=provider,
            phase=phase,
            error_category="tool_call_parse",
        )
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id
        self.arguments_text = arguments_text


class DeferredNotReadyError(PolluxError):
    """A deferred job is not yet in a terminal state.

    Args:
        snapshot: The :class:`pollux.DeferredSnapshot` that was observed.
    """

    def __init__(self, snapshot: Any) -> None:
        status = getattr(snapshot, "status", None)
        suffix = f" (status={status!r})" if status is not None else ""
        super().__init__(
            f"Deferred job is not ready to collect{suffix}",
            hint="Check inspect_deferred(handle).is_terminal and collect after the job "
            "reaches a terminal state.",
        )
        self.snapshot = snapshot
