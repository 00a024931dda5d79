"""Faults: scripted failures, each reproducing what a real API or network does to a client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Fault:
    """Base class of every scripted failure. Queue one with ``Emulator.script``."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ErrorResponse(Fault):
    """Answer with an HTTP error status and the wire format's JSON error body.

    The official SDKs map the status to their exception classes (400 BadRequestError, 401
    AuthenticationError, 404 NotFoundError, 429 RateLimitError, 5xx InternalServerError, ...).

    Args:
        status: The HTTP status code (400-599).
        message: The error message; a realistic default per status when omitted.
        error_type: The error ``type`` field; a realistic default per status when omitted.
        code: The error ``code`` field.
        param: The error ``param`` field.
        retry_after: Seconds sent in a ``Retry-After`` header (typical for 429 and 503).
        headers: Extra response headers.
        body: A JSON body sent verbatim instead of the wire's error body (for provider-specific
            shapes, such as OpenRouter's upstream errors with ``metadata.raw``). A ``str`` or
            ``bytes`` body is sent as is, as ``text/event-stream`` when it starts with
            ``data:`` (a gateway's streamed error) and ``text/plain`` otherwise; a
            ``content-type`` in ``headers`` overrides that.

    Example:
        >>> ErrorResponse(429, retry_after=2)
        ErrorResponse(status=429, message=None, error_type=None, code=None, param=None, \
retry_after=2, headers={}, body=None)
    """

    status: int
    message: str | None = None
    error_type: str | None = None
    code: str | None = None
    param: str | None = None
    retry_after: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"ErrorResponse status must be 400-599, got {self.status!r}")


@dataclass(frozen=True, slots=True)
class RawResponse(Fault):
    """Answer with exactly this status, body and content type: what a gateway really sent.

    For answers no well-behaved API gives, such as a gateway that answers a streamed request
    with one plain JSON body (``application/json``, no events).

    Args:
        body: A JSON value (sent as JSON), or ``str``/``bytes`` sent as is.
        status: The HTTP status (default 200).
        content_type: The ``content-type`` header (default ``application/json``).
        headers: Extra response headers.

    Example:
        >>> RawResponse({"id": "msg_1"}).status
        200
    """

    body: Any
    status: int = 200
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 599:
            raise ValueError(f"RawResponse status must be 100-599, got {self.status!r}")


@dataclass(frozen=True, slots=True)
class Latency(Fault):
    """Wait ``seconds``, then answer the same request normally.

    Unlike other items, a queued ``Latency`` does not use up a request: after the wait, the next
    queued item (or the handler, or the default model) answers it, so
    ``script(sel, Latency(1), Reply("slow"))`` is one slow reply. A client timeout shorter than
    the wait surfaces as the SDK's timeout error.
    """

    seconds: float

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError(f"Latency must be >= 0 seconds, got {self.seconds!r}")


@dataclass(frozen=True, slots=True)
class DropConnection(Fault):
    """Close the connection after reading the request, without sending any response."""


@dataclass(frozen=True, slots=True)
class MalformedBody(Fault):
    """Answer 200 with a body that claims to be JSON (or SSE with JSON data) but does not parse.

    Args:
        after_events: For a streamed answer, how many good events precede the broken one.
    """

    after_events: int = 0


@dataclass(frozen=True, slots=True)
class CutStream(Fault):
    """Send part of the answer, then drop the connection without finishing the body.

    Args:
        after_events: For a streamed answer, the number of events sent before the cut. For a
            plain answer, half of the body is sent.
        clean: End a streamed body properly after those events instead of dropping the
            connection (a proxy or server that closes the stream early but politely), so the
            client sees a well-formed stream that simply stops.
    """

    after_events: int = 2
    clean: bool = False


@dataclass(frozen=True, slots=True)
class StreamError(Fault):
    """Send an in-band error event in the middle of a stream.

    Providers report failures this way once the 200 status is already on the wire.

    Args:
        message: The error message.
        after_events: Events sent before the error event.
        code: The error code.
    """

    message: str = "The server had an error while processing your request."
    after_events: int = 2
    code: str = "server_error"
