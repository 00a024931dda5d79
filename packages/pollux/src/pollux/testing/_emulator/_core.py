"""Dispatch: routing, the request log, scripted items and faults, and the wire plug-in types.

A wire format is a :class:`WireSpec`: a mount path, routes, and how that provider spells an error.
Wire modules live in ``pollux.testing._emulator.wires`` and are discovered there, so a new wire
format is one new module that touches no other.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ._clock import VirtualClock
from ._faults import (
    CutStream,
    DropConnection,
    ErrorResponse,
    Fault,
    Latency,
    MalformedBody,
    RawResponse,
    StreamError,
)
from ._http import Drop, HTTPRequest, Outcome, Response, StreamResponse, json_response
from ._log import RecordedRequest, RequestLog
from ._model import PrefixCache
from ._script import Reply, Scripts


class ApiError(Exception):
    """Raised by a route handler: answered with the wire format's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.code = code
        self.param = param
        self.headers = dict(headers or {})


Handler = Callable[["Call"], Outcome]
ErrorBody = Callable[[ApiError], Any]


@dataclass(frozen=True, slots=True)
class Route:
    """One endpoint: ``path`` is relative to the wire's mount and may hold ``{name}`` parameters.

    ``{name}`` matches one path segment, ``{name:path}`` the rest of the path.
    """

    method: str
    path: str
    name: str
    handler: Handler
    generates: bool = False


@dataclass(frozen=True, slots=True)
class WireSpec:
    """A wire format served under ``mount`` (``"/openai"``), with ``base_url`` at ``base_path``.

    Attributes:
        name: The name ``Emulator.base_url`` takes.
        mount: The first path segment(s) this wire owns.
        base_path: What an SDK's ``base_url`` should point at.
        routes: The endpoints.
        error_body: Renders an :class:`ApiError` as this provider's JSON error body.
        api_key: Extracts the API key from request headers (for ``Emulator(api_key=...)``).
        new_state: Builds the wire's per-emulator state (stored objects), or ``None``.
        authorize: Replaces the ``api_key`` comparison when set: given the route, the request
            and ``Emulator(api_key=...)``, returns the error to answer with, or ``None``
            (for providers that take the key elsewhere, or refuse a missing key their own way).
        finish: Adjusts every outcome of this wire's routes, scripted faults included (for
            headers a provider's client needs on every answer of a route).
    """

    name: str
    mount: str
    base_path: str
    routes: tuple[Route, ...]
    error_body: ErrorBody
    api_key: Callable[[Mapping[str, str]], str | None]
    new_state: Callable[[Core], Any] | None = None
    authorize: Callable[[Route, HTTPRequest, str | None], ApiError | None] | None = None
    finish: Callable[[Route, HTTPRequest, Outcome], Outcome] | None = None


@dataclass(slots=True)
class Call:
    """What a route handler receives."""

    core: Core
    wire: WireSpec
    route: Route
    request: RecordedRequest
    params: dict[str, str]
    reply: Reply | None
    state: Any

    def body(self) -> dict[str, Any]:
        """The JSON object body, or a 400 error like the real APIs give."""
        data = self.request.json
        if not isinstance(data, dict):
            raise ApiError(
                400,
                "We could not parse the JSON body of your request. (HINT: This likely means you "
                "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
                "but what was sent was not valid JSON.)",
                error_type="invalid_request_error",
            )
        return data


_DEFAULT_MESSAGES = {
    400: ("invalid_request_error", "The request was invalid."),
    401: ("invalid_request_error", "Incorrect API key provided."),
    403: ("permission_denied", "You are not allowed to perform this request."),
    404: ("invalid_request_error", "The requested resource was not found."),
    409: ("invalid_request_error", "The request conflicts with the current state."),
    422: ("invalid_request_error", "The request could not be processed."),
    429: ("requests", "Rate limit reached. Please try again later."),
    500: (
        "server_error",
        "The server had an error while processing your request. Sorry about that!",
    ),
    502: ("server_error", "Bad gateway."),
    503: ("server_error", "The engine is currently overloaded, please try again later."),
    504: ("server_error", "The server timed out while processing your request."),
}
_DEFAULT_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


#: The 401 message of a request whose key is not ``Emulator(api_key=...)`` (OpenAI's wording).
WRONG_KEY_MESSAGE = (
    "Incorrect API key provided. You can find your API key in your account settings."
)


def fault_error(fault: ErrorResponse) -> ApiError:
    """The :class:`ApiError` an :class:`ErrorResponse` fault answers with."""
    kind, message = _DEFAULT_MESSAGES.get(
        fault.status, ("server_error" if fault.status >= 500 else "invalid_request_error", "Error.")
    )
    headers = dict(fault.headers)
    if fault.retry_after is not None:
        value = fault.retry_after
        headers["retry-after"] = str(int(value)) if float(value).is_integer() else str(value)
    return ApiError(
        fault.status,
        fault.message or message,
        error_type=fault.error_type or kind,
        code=fault.code if fault.code is not None else _DEFAULT_CODES.get(fault.status),
        param=fault.param,
        headers=headers,
    )


def _compile(path: str) -> tuple[str | None, re.Pattern[str] | None]:
    if "{" not in path:
        return path, None
    # ``{name}`` is one path segment; ``{name:path}`` the rest of the path, slashes included
    # (a Cloud Storage object name arrives percent-decoded).
    escaped = re.escape(path).replace(r"\{", "{").replace(r"\}", "}")
    pattern = re.sub(r"\{(\w+):path\}", r"(?P<\1>.+)", escaped)
    pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern)
    return None, re.compile(pattern + "$")


class _Router:
    def __init__(self, wires: list[WireSpec]) -> None:
        self.by_mount: dict[str, WireSpec] = {}
        self._static: dict[tuple[str, str, str], Route] = {}
        self._patterns: dict[str, list[tuple[str, re.Pattern[str], Route]]] = {}
        for wire in wires:
            if wire.mount in self.by_mount:
                raise ValueError(f"two wire formats claim the mount {wire.mount!r}")
            self.by_mount[wire.mount] = wire
            for route in wire.routes:
                static, pattern = _compile(route.path)
                if static is not None:
                    self._static[(wire.mount, route.method, static)] = route
                else:
                    assert pattern is not None
                    self._patterns.setdefault(wire.mount, []).append((route.method, pattern, route))

    def match(self, method: str, path: str) -> tuple[WireSpec | None, Route | None, dict[str, str]]:
        slash = path.find("/", 1)
        mount, rest = (path, "/") if slash < 0 else (path[:slash], path[slash:])
        wire = self.by_mount.get(mount)
        if wire is None:
            return None, None, {}
        route = self._static.get((mount, method, rest.rstrip("/") or "/"))
        if route is not None:
            return wire, route, {}
        for route_method, pattern, candidate in self._patterns.get(mount, ()):
            if route_method == method:
                found = pattern.match(rest)
                if found:
                    return wire, candidate, found.groupdict()
        return wire, None, {}


@dataclass(slots=True)
class Settings:
    """Emulator-wide behaviour, adjustable while it runs."""

    latency: float = 0.0
    stream_delay: float = 0.0
    api_key: str | None = None
    models: tuple[str, ...] = ()
    # model (or deployment) name -> the model a response names (Emulator(models={...}))
    served: dict[str, str] = field(default_factory=dict)
    record: bool = True
    batch_durations: dict[str, float] = field(
        default_factory=lambda: {
            "validating": 1.0,
            "in_progress": 10.0,
            "finalizing": 1.0,
            "cancelling": 1.0,
        }
    )


class Core:
    """The emulator's state and request dispatcher (runs on the server's event loop)."""

    def __init__(
        self, wires: list[WireSpec], clock: VirtualClock, settings: Settings, cache: PrefixCache
    ) -> None:
        self.wires = {w.name: w for w in wires}
        self.router = _Router(wires)
        self.clock = clock
        self.settings = settings
        self.cache = cache
        self.log = RequestLog()
        self.scripts = Scripts()
        self.errors: list[str] = []
        self._ids = itertools.count(1)
        self.state: dict[str, Any] = {
            w.name: w.new_state(self) if w.new_state else None for w in wires
        }
        # Rate limits per wire name (``Emulator(quotas=...)``): ``_quota.QuotaMeter`` values.
        self.quotas: dict[str, Any] = {}

    def new_id(self, prefix: str) -> str:
        """A unique, deterministic id such as ``resp_000000000001``."""
        return f"{prefix}{next(self._ids):012x}"

    def error_response(self, wire: WireSpec | None, error: ApiError) -> Response:
        """Render ``error`` as ``wire`` spells it (OpenAI style when unrouted)."""
        body = (
            wire.error_body(error)
            if wire is not None
            else {
                "error": {
                    "message": error.message,
                    "type": error.error_type,
                    "param": error.param,
                    "code": error.code,
                }
            }
        )
        return json_response(body, error.status, dict(error.headers))

    async def handle(self, http: HTTPRequest) -> Outcome:
        """Answer one HTTP request; an unexpected failure is a 500, kept in ``errors``."""
        try:
            outcome = await self._handle(http)
            if not isinstance(outcome, Drop):
                outcome.headers.setdefault("x-request-id", f"req_{next(self._ids):012x}")
            return outcome
        except Exception:
            self.errors.append(traceback.format_exc())
            return self.error_response(
                None,
                ApiError(
                    500, "The emulator failed; see Emulator.errors.", error_type="server_error"
                ),
            )

    async def _handle(self, http: HTTPRequest) -> Outcome:
        wire, route, params = self.router.match(http.method, http.path)
        outcome = await self._dispatch(http, wire, route, params)
        if wire is not None and route is not None and wire.finish is not None:
            outcome = wire.finish(route, http, outcome)
        return outcome

    async def _dispatch(
        self,
        http: HTTPRequest,
        wire: WireSpec | None,
        route: Route | None,
        params: dict[str, str],
    ) -> Outcome:
        parsed: Any = None
        if http.body and "json" in http.headers.get("content-type", ""):
            try:
                parsed = json.loads(http.body)
            except ValueError:
                parsed = None
        route_name = f"{wire.name}.{route.name}" if wire is not None and route is not None else ""
        record = RecordedRequest(
            http.method,
            http.path,
            http.query,
            http.headers,
            http.body,
            parsed,
            wire.name if wire is not None else "",
            route_name,
            self.clock.now(),
        )
        if self.settings.record:
            self.log.append(record)
        if wire is None or route is None:
            return self.error_response(
                wire,
                ApiError(
                    404,
                    f"Invalid URL ({http.method} {http.path})",
                    error_type="invalid_request_error",
                ),
            )
        expected = self.settings.api_key
        if wire.authorize is not None:
            refused = wire.authorize(route, http, expected)
            if refused is not None:
                return self.error_response(wire, refused)
        elif (
            expected is not None
            and not wire.name.startswith("_")
            and wire.api_key(http.headers) != expected
        ):
            return self.error_response(
                wire,
                ApiError(
                    401,
                    WRONG_KEY_MESSAGE,
                    error_type="invalid_request_error",
                    code="invalid_api_key",
                ),
            )
        meter = self.quotas.get(wire.name) if route.generates else None
        quota_entry = None
        if meter is not None:
            from ._quota import rate_limit_error, request_tokens

            quota_entry, refused = meter.admit(request_tokens(http.body, parsed))
            if refused is not None:
                return self.error_response(wire, rate_limit_error(wire.name, refused))
        if self.settings.latency > 0:
            await asyncio.sleep(self.settings.latency)
        item = self.scripts.take(route_name, route.generates)
        delay = 0.0
        while isinstance(item, Latency):
            # Latency modifies the request: it waits, then the next queued item (or the handler,
            # or the default model) answers the same request. That item is taken now, before
            # the wait: a client that gives up during the wait must not leave it queued for
            # whichever request comes next.
            delay += item.seconds
            item = self.scripts.take(route_name, route.generates)
        if delay:
            await asyncio.sleep(delay)
        if item is None:
            handler = self.scripts.handler_for(route_name)
            if handler is not None:
                try:
                    item = handler(record)
                except Exception:
                    self.errors.append(traceback.format_exc())
                    return self.error_response(
                        wire,
                        ApiError(
                            500,
                            "The emulator handler raised; see Emulator.errors.",
                            error_type="server_error",
                        ),
                    )
        if isinstance(item, Latency):  # returned by a handler
            await asyncio.sleep(item.seconds)
            item = None
        if isinstance(item, ErrorResponse):
            if isinstance(item.body, (str, bytes)):
                # Sent verbatim: gateways answer a failed streamed call with an error status
                # and an event-stream body ("data: {...}\n\ndata: [DONE]").
                raw = item.body.encode() if isinstance(item.body, str) else item.body
                headers = dict(fault_error(item).headers)
                kind = headers.pop("content-type", None) or (
                    "text/event-stream" if raw.lstrip().startswith(b"data:") else "text/plain"
                )
                return Response(item.status, raw, kind, headers)
            if item.body is not None:
                return json_response(item.body, item.status, dict(fault_error(item).headers))
            return self.error_response(wire, fault_error(item))
        if isinstance(item, DropConnection):
            return Drop()
        if isinstance(item, RawResponse):
            raw = (
                item.body
                if isinstance(item.body, bytes)
                else item.body.encode()
                if isinstance(item.body, str)
                else json.dumps(item.body).encode()
            )
            return Response(item.status, raw, item.content_type, dict(item.headers))
        reply = item if isinstance(item, Reply) else None
        call = Call(self, wire, route, record, params, reply, self.state[wire.name])
        try:
            outcome = route.handler(call)
        except ApiError as exc:
            return self.error_response(wire, exc)
        except Exception:
            self.errors.append(traceback.format_exc())
            return self.error_response(
                wire,
                ApiError(
                    500,
                    "The emulator failed on this request; see Emulator.errors.",
                    error_type="server_error",
                ),
            )
        if meter is not None and quota_entry is not None and isinstance(outcome, Response):
            from ._quota import reported_tokens

            used = reported_tokens(outcome.body) if outcome.status == 200 else 0
            if used is not None:
                meter.settle(quota_entry, used)
        if isinstance(outcome, StreamResponse) and self.settings.stream_delay and not outcome.delay:
            outcome.delay = self.settings.stream_delay
        if isinstance(item, Fault):
            outcome = self._apply(item, outcome, wire)
        return outcome

    def _apply(self, fault: Fault, outcome: Outcome, wire: WireSpec) -> Outcome:
        if isinstance(outcome, Drop):
            return outcome
        if isinstance(fault, CutStream):
            if isinstance(outcome, StreamResponse):
                if fault.clean:
                    return replace(outcome, events=list(outcome.events[: fault.after_events]))
                return replace(outcome, cut_after=min(fault.after_events, len(outcome.events)))
            return replace(outcome, cut_at=len(outcome.body) // 2)
        if isinstance(fault, MalformedBody):
            if isinstance(outcome, StreamResponse):
                events = list(outcome.events)
                index = min(fault.after_events, len(events))
                events.insert(index, outcome.malformed_event or b'data: {"malformed": \n\n')
                return replace(outcome, events=events)
            return Response(
                200, outcome.body[: max(1, len(outcome.body) // 2)] or b"{", "application/json"
            )
        if isinstance(fault, StreamError):
            if isinstance(outcome, StreamResponse):
                events = list(outcome.events[: fault.after_events])
                render = outcome.error_event or _generic_stream_error
                events.append(render(fault.message, fault.code, len(events)))
                return replace(outcome, events=events)
            return self.error_response(
                wire, ApiError(500, fault.message, error_type="server_error", code=fault.code)
            )
        return outcome


def _generic_stream_error(message: str, code: str, sequence: int) -> bytes:
    payload = {"error": {"message": message, "type": "server_error", "code": code, "param": None}}
    return f"data: {json.dumps(payload)}\n\n".encode()
