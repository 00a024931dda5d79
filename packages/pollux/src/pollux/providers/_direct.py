"""POST a JSON body pollux already built to an SDK provider's endpoint, through the transport.

The SDK providers' hot calls (OpenAI ``responses.create``, Anthropic ``messages.create``, Gemini
``generateContent``) take this path: the body ``compile`` produced is sent as it is over the
Session's keep-alive pool and the answer is parsed as plain JSON, which the providers' extractors
read directly. The SDK's per-call request and response models cost more client CPU than the
whole call's budget at a 32-wide fan-out (``python -m bench transport``). Base URL and headers
come from the SDK client itself (so ``*_BASE_URL`` variables, API keys and default headers are
honoured as before), and an error status is raised as the SDK's own exception (built by the
SDK from the response), so error mapping and hints stay the SDK path's.

Their streams take it too (:meth:`DirectPost.stream`): the same body with ``stream`` on, the
server-sent events parsed incrementally by the transport's SSE decoder and each event's data
decoded as plain JSON, which the providers' stream mappers read directly. The SDKs build one
pydantic model per event, which costs 6-23x the CPU per chunk of a bare socket reading the same
events (1.4-1.9x on this path; ``python -m bench streaming``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from pollux._transport import ConnectionPool, SSEDecoder, TransportError
from pollux.errors import APIError
from pollux.providers._body_json import BodyEncoder
from pollux.providers._errors import network_error, redirect_error
from pollux.transport import Transport

__all__ = ["DirectPost", "sdk_headers", "stainless_status_error"]

#: Headers the pool sets itself (or that do not apply to a prebuilt body).
_SKIP = frozenset({"content-type", "content-length", "host", "accept", "accept-encoding"})


def sdk_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """The plain string headers of an SDK client's defaults (``Omit`` markers dropped)."""
    return {
        str(key): value
        for key, value in headers.items()
        if isinstance(value, str) and key.lower() not in _SKIP
    }


class DirectPost:
    """One SDK endpoint reached through the transport's pool for its origin.

    Args:
        transport: The Session's transport.
        provider: Provider name for errors.
        base_url: The SDK client's base URL (``https://api.anthropic.com``, ...).
        headers: Default headers (auth, API version).
        timeout_s: ``Config.request_timeout_s``.
        status_error: Builds the SDK's exception for an error answer
            ``(status, headers, body bytes, url)``.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        timeout_s: float,
        status_error: Callable[[int, Mapping[str, str], bytes, str], BaseException],
    ) -> None:
        self._pool: ConnectionPool = transport.pool(base_url.rstrip("/"), headers)
        self._provider = provider
        self._base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._status_error = status_error
        self._encoder = BodyEncoder()

    def _network_error(self, exc: TransportError, phase: str) -> APIError:
        return network_error(
            provider=self._provider,
            phase=phase,
            kind=exc.kind,
            message=str(exc),
            base_url=self._base_url,
            timeout_s=self._timeout_s,
        )

    def _redirect_error(self, status: int, headers: Mapping[str, str], phase: str) -> APIError:
        return redirect_error(
            provider=self._provider, phase=phase, status=status, location=headers.get("location")
        )

    def encode(self, body: Any) -> bytes:
        """The compact JSON bytes of ``body``; a fan-out's shared source text is escaped once."""
        return self._encoder.encode(body)

    async def post(
        self, path: str, body: bytes, *, phase: str, headers: Mapping[str, str] | None = None
    ) -> Any:
        """POST ``body`` to ``path``; return the decoded JSON answer.

        Raises:
            APIError: The connection failed, timed out, or the answer was a redirect.
            Exception: The SDK's status error for a 4xx/5xx answer (map it as on the SDK path).
        """
        try:
            response = await self._pool.request(
                "POST", path, body=body, headers=headers, timeout_s=self._timeout_s
            )
        except TransportError as exc:
            raise self._network_error(exc, phase) from exc
        status = response.status
        if status >= 300:
            if status < 400:
                raise self._redirect_error(status, response.headers, phase)
            raise self._status_error(
                status, response.headers, response.body, f"{self._base_url}{path}"
            )
        try:
            return json.loads(response.body)
        except ValueError as exc:
            # A cut or garbled body is transient, as on the SDK path (which retries it too).
            raise APIError(
                f"{self._provider} {phase} returned a body that is not JSON",
                hint="Retrying usually helps; if it persists, check that the base URL points "
                "at the provider's API (or its gateway).",
                provider=self._provider,
                phase=phase,
                status_code=status,
                retryable=True,
                error_category="network",
            ) from exc

    async def stream(
        self, path: str, body: bytes, *, phase: str, headers: Mapping[str, str] | None = None
    ) -> AsyncGenerator[list[Any], None]:
        """POST ``body`` (which asks for a stream) to ``path``; yield its events' decoded data.

        Events come in batches: every event one socket read completed, in order (one read may
        carry many), each the JSON-decoded ``data`` of one server-sent event (``[DONE]``
        skipped). Each wait (the answer's head, then every read) is bounded by
        ``Config.request_timeout_s``. Leaving early (``aclose``, an error, cancellation) closes
        the connection instead of returning it to the pool.

        Raises:
            APIError: The connection failed, stalled, was cut, or the answer was a redirect.
            ValueError: An event's data is not JSON (map it as the SDK path maps a garbled body).
            Exception: The SDK's status error for a 4xx/5xx answer (map it as on the SDK path).
        """
        try:
            async with self._pool.stream(
                "POST", path, body=body, headers=headers, timeout_s=self._timeout_s
            ) as response:
                status = response.status
                if status >= 300:
                    if status < 400:
                        raise self._redirect_error(status, response.headers, phase)
                    raw = await response.read()
                    raise self._status_error(
                        status, response.headers, raw, f"{self._base_url}{path}"
                    )
                media = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if media and media != "text/event-stream":
                    # A gateway that does not stream this route answers with one plain body.
                    # Read as events it would look like a cut stream and be retried; it is a
                    # well-formed answer in the wrong shape, so say which shape.
                    raw = await response.read()
                    raise plain_body_error(self._provider, media, status, len(raw))
                decoder = SSEDecoder()
                loads = json.loads
                async for block in response.iter_bytes():
                    events = [loads(data) for data in decoder.feed(block) if data != b"[DONE]"]
                    if events:
                        yield events
                events = [loads(data) for data in decoder.flush() if data != b"[DONE]"]
                if events:
                    yield events
        except TransportError as exc:
            raise self._network_error(exc, phase) from exc


def plain_body_error(provider: str, media: str, status: int, size: int) -> APIError:
    """The error for a stream request answered with a plain body (``media``) instead of SSE."""
    return APIError(
        f"{provider} stream request was answered with a plain {media} body ({size} bytes) "
        "instead of server-sent events (text/event-stream)",
        hint="The server or gateway in between does not stream this route: call run() or "
        "interact() instead of stream(), or turn streaming on at the gateway.",
        provider=provider,
        phase="stream",
        status_code=status,
        retryable=False,
        error_category="malformed_response",
    )


def stainless_status_error(client: Any) -> Callable[[int, Mapping[str, str], bytes, str], Any]:
    """The status-error factory of an openai/anthropic (Stainless) SDK client."""

    def build(status: int, headers: Mapping[str, str], body: bytes, url: str) -> Any:
        import httpx

        response = httpx.Response(
            status,
            headers=dict(headers),
            content=body,
            request=httpx.Request("POST", url),
        )
        return client._make_status_error_from_response(response)

    return build
