"""Compact JSON request bodies whose large repeated strings are escaped once, not per request.

A fan-out sends the same source text (or base64 document) in every request body: encoding a
20 KB string costs ~30 us of client CPU each time, as much as the rest of pollux's per-request
work. :class:`BodyEncoder` notices a large string *object* it has seen in an earlier body, keeps
its escaped form, and splices it into later bodies in place of a short marker; the bytes are
exactly ``json.dumps(body, separators=(",", ":")).encode()``. Strings are recognised by
identity, not value (no hashing of large strings), and the encoder holds a reference to every
string it remembers, so an identity is never reused while it is remembered. What it remembers
is bounded (by count and by bytes), oldest first out.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from typing import Any

__all__ = ["BodyEncoder"]

#: Strings shorter than this are encoded as usual: splicing them would save nothing.
MIN_CHARS = 4096
#: Strings larger than this are never remembered (their escaped copy would be a large hold).
MAX_CHARS = 8 << 20
_SEEN_MAX = 64
_ESCAPED_MAX = 32
_ESCAPED_MAX_BYTES = 64 << 20


class BodyEncoder:
    """Encode request bodies as compact JSON, splicing in large strings seen before.

    One encoder serves one provider's direct path (its strings are that provider's sources).
    """

    __slots__ = ("_escaped", "_escaped_bytes", "_markers", "_seen", "_token")

    def __init__(self) -> None:
        # id(s) -> s: large strings seen once (held, so the id stays theirs).
        self._seen: OrderedDict[int, str] = OrderedDict()
        # id(s) -> (s, its JSON encoding with quotes): strings seen at least twice.
        self._escaped: OrderedDict[int, tuple[str, bytes]] = OrderedDict()
        self._escaped_bytes = 0
        # The i-th spliced string of a body stands in as marker i while the rest is encoded:
        # NUL bytes around a random token, which no real prompt contains.
        self._token = uuid.uuid4().hex
        self._markers: list[tuple[str, bytes]] = []

    def encode(self, body: Any) -> bytes:
        """``json.dumps(body, separators=(",", ":")).encode()``, with remembered strings spliced."""
        found: list[bytes] = []
        swapped = self._swap(body, found)
        data = json.dumps(swapped, separators=(",", ":")).encode("utf-8")
        for i, escaped in enumerate(found):
            data = data.replace(self._markers[i][1], escaped, 1)
        return data

    def _marker(self, i: int) -> str:
        while i >= len(self._markers):
            marker = f"\x00pollux-{self._token}-{len(self._markers)}\x00"
            self._markers.append((marker, json.dumps(marker).encode("ascii")))
        return self._markers[i][0]

    def _swap(self, value: Any, found: list[bytes]) -> Any:
        kind = type(value)
        if kind is str:
            if len(value) < MIN_CHARS or len(value) > MAX_CHARS:
                return value
            escaped = self._lookup(value)
            if escaped is None:
                return value
            found.append(escaped)
            return self._marker(len(found) - 1)
        if kind is dict:
            return {k: self._swap(v, found) for k, v in value.items()}
        if kind is list or kind is tuple:
            return [self._swap(v, found) for v in value]
        return value

    def _lookup(self, text: str) -> bytes | None:
        """The escaped form of ``text`` if it was seen before (remembering it now if not)."""
        key = id(text)
        hit = self._escaped.get(key)
        if hit is not None:
            return hit[1]
        if self._seen.pop(key, None) is None:
            self._seen[key] = text
            if len(self._seen) > _SEEN_MAX:
                self._seen.popitem(last=False)
            return None
        # Second sighting of the same object: a string the bodies share.
        escaped = json.dumps(text).encode("utf-8")
        self._escaped[key] = (text, escaped)
        self._escaped_bytes += len(escaped)
        while len(self._escaped) > _ESCAPED_MAX or (
            self._escaped_bytes > _ESCAPED_MAX_BYTES and len(self._escaped) > 1
        ):
            _, (_, old) = self._escaped.popitem(last=False)
            self._escaped_bytes -= len(old)
        return escaped
