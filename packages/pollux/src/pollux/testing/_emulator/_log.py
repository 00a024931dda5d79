"""The request log that tests assert against."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the emulator received it.

    Attributes:
        method: The HTTP method, upper case.
        path: The URL path, without the query string.
        query: Query parameters.
        headers: Request headers with lower-case names.
        body: The raw body bytes.
        json: The parsed JSON body, or ``None`` when the body is not JSON.
        wire: The wire format that served it (``"openai"``, ``"local"``, ...), or ``""``.
        route: The route name, such as ``"openai.responses.create"``; ``""`` when unrouted.
        time: The emulator's virtual time when the request arrived.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    json: Any
    wire: str
    route: str
    time: float

    def matches(self, selector: str) -> bool:
        """Whether ``selector`` (a wire, or a dotted route prefix) names this request's route."""
        return selector_matches(selector, self.route)


def selector_matches(selector: str, route: str) -> bool:
    """Whether ``selector`` names ``route``.

    ``"openai"``, ``"openai.responses"`` and ``"openai.responses.create"`` all match the route
    ``"openai.responses.create"``.
    """
    return route == selector or route.startswith(selector + ".")


class RequestLog:
    """A thread-safe, append-only list of :class:`RecordedRequest`."""

    def __init__(self) -> None:
        self._items: list[RecordedRequest] = []
        self._lock = threading.Lock()

    def append(self, item: RecordedRequest) -> None:
        with self._lock:
            self._items.append(item)

    def snapshot(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
