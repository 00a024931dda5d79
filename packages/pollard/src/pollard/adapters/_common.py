"""What every provider adapter shares: the result contract, payload merging and JSON-safe copies.

Every adapter returns (or, streaming, ends with) one result dictionary::

    {
        "text": str,                       # the assistant text, text blocks joined
        "tool_calls": [{"id", "name", "arguments"}],   # arguments parsed to a dict when possible
        "usage": {
            "input_tokens": int,           # every prompt token, cache reads and writes included
            "output_tokens": int,          # every generated token, reasoning included
            "cache_read_tokens": int,      # part of input_tokens served from a prompt cache
            "cache_write_tokens": int,     # part of input_tokens written to a prompt cache
            "reasoning_tokens": int,       # part of output_tokens spent on reasoning
        },
        "provider_usage": {...},           # the provider's usage object as it came
        "stop_reason": str | None,
        "raw": {...},                      # the provider response as JSON
    }

``input_tokens + output_tokens`` is the whole token volume of the call on every provider, so a
``TokenMeter`` charges the same way whichever adapter produced the result; the cache and reasoning
fields are breakdowns, never added on top.

Streaming adapters yield ``{"delta": {"text": piece}}`` chunks while the provider streams and end
with one ``{"result": <the result above>}`` chunk, which the runtime uses as the settled result.

The adapters never import a provider SDK: they call the client object you pass in, which is what
keeps credentials and client construction in your code.
"""

from __future__ import annotations

import base64
import datetime
import inspect
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any, Protocol

from pollard.errors import PollardError

__all__ = [
    "EventState",
    "Result",
    "astream_chunks",
    "get",
    "jsonable",
    "make_result",
    "merge_payload",
    "parse_arguments",
    "stream_chunks",
    "tokens",
]

Result = dict[str, Any]
"""A normalized adapter result (see the module docstring)."""


_MISSING: Any = object()


def get(obj: object, name: str, default: Any = None) -> Any:
    """Read ``name`` from an SDK object (attribute) or a wire dict (key), else ``default``."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        value = obj.get(name, default)
    else:
        value = getattr(obj, name, _MISSING)
        if value is _MISSING:
            # Some SDK objects expose their data only through to_dict() (pollard 0.8 read it).
            to_dict = getattr(obj, "to_dict", None)
            data = to_dict() if callable(to_dict) and not isinstance(obj, type) else None
            value = data.get(name, default) if isinstance(data, Mapping) else default
    return default if value is None else value


def tokens(value: object) -> int:
    """Coerce a token count to int (None and junk count as 0)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


def jsonable(value: Any) -> Any:
    """Return a JSON-safe copy of an SDK object or wire value (for ``raw`` and usage)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return jsonable(dump(mode="json", exclude_none=True))
        except TypeError:
            return jsonable(dump())
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, (type, Mapping)):
        return jsonable(to_dict())
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    return str(value)


def parse_arguments(arguments: object) -> Any:
    """Parse tool-call arguments sent as JSON text; keep the text when it is not valid JSON."""
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return jsonable(arguments) if arguments is not None else {}


def merge_payload(defaults: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """Merge adapter defaults under the payload and drop pollard's private ``_pollard`` key."""
    if not isinstance(payload, Mapping):
        raise TypeError(f"a model_call payload must be a dict, got {type(payload).__name__}")
    merged = {**defaults, **payload}
    merged.pop("_pollard", None)
    return merged


def make_result(
    *,
    text: str,
    tool_calls: list[dict[str, Any]],
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
    provider_usage: object = None,
    stop_reason: object = None,
    raw: object = None,
) -> Result:
    """Build the normalized result (see the module docstring for the contract)."""
    return {
        "text": text,
        "tool_calls": tool_calls,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens,
            "reasoning_tokens": reasoning_tokens,
        },
        "provider_usage": jsonable(provider_usage) if provider_usage is not None else {},
        "stop_reason": stop_reason if isinstance(stop_reason, str) else None,
        "raw": jsonable(raw),
    }


def delta(text: str) -> dict[str, Any]:
    """A streaming text chunk."""
    return {"delta": {"text": text}}


def final(result: Result) -> dict[str, Any]:
    """The last streaming chunk: the settled result."""
    return {"result": result}


class EventState(Protocol):
    """Rebuilds one provider response from its raw stream events (one per adapter)."""

    @property
    def done(self) -> bool:
        """True once the last event of a response arrived: stop reading and settle."""

    @property
    def finished(self) -> bool:
        """True when the events seen so far make a complete response if the stream ends now."""

    def add(self, event: Any) -> str:
        """Take one event; returns the text it adds ("" for none)."""

    def result(self) -> Result:
        """The normalized result of everything added."""


def stream_chunks(
    events: Iterable[Any], state: EventState, unterminated: Callable[[], PollardError]
) -> Iterator[dict[str, Any]]:
    """Drive ``state`` over ``events``: a delta per text piece, then one final result chunk.

    A stream that ends before ``state.finished`` raises ``unterminated()`` instead of settling a
    truncated result. ``events`` is closed however the iteration ends.
    """
    try:
        for event in events:
            piece = state.add(event)
            if piece:
                yield delta(piece)
            if state.done:
                yield final(state.result())
                return
        if not state.finished:
            raise unterminated()
        yield final(state.result())
    finally:
        close = getattr(events, "close", None)
        if callable(close):
            close()


async def astream_chunks(
    events: Any,
    state: EventState,
    unterminated: Callable[[], PollardError],
    *,
    iterate: AsyncIterable[Any] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The async form of `stream_chunks`.

    ``iterate`` reads ``events`` another way (for example a sync iterator in a worker thread);
    by default ``events`` is iterated with ``async for``. Its ``close`` may be sync or async.
    """
    try:
        async for event in iterate if iterate is not None else events:
            piece = state.add(event)
            if piece:
                yield delta(piece)
            if state.done:
                yield final(state.result())
                return
        if not state.finished:
            raise unterminated()
        yield final(state.result())
    finally:
        close = getattr(events, "close", None)
        if callable(close):
            outcome = close()
            if inspect.isawaitable(outcome):
                await outcome
