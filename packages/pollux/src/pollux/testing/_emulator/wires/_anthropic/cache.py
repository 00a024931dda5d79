"""Prompt-cache accounting the way the Messages API reports it.

The prompt is a sequence of blocks in cache order (tools, then system, then messages). A block
marked with ``cache_control`` is a breakpoint: the prefix ending there is written to the cache
(``cache_creation_input_tokens``, split by TTL in ``cache_creation``) unless it is shorter than
the minimum cacheable length; a later request whose prefix matches an entry still alive on the
virtual clock reads it (``cache_read_input_tokens``) and refreshes its lifetime. As on the API,
a breakpoint also finds an entry written up to 20 blocks before it, ``input_tokens`` counts only
what follows the last cached or written prefix, and a request may carry at most 4 breakpoints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pollux.testing._emulator._clock import VirtualClock

from .errors import invalid

__all__ = ["MAX_BREAKPOINTS", "TTLS", "CacheBlock", "CacheUsage", "PromptCache"]

MAX_BREAKPOINTS = 4
TTLS = {"5m": 300.0, "1h": 3600.0}
LOOKBACK = 20
_MAX_ENTRIES = 100_000


@dataclass(slots=True)
class CacheBlock:
    """One cacheable unit of the prompt: its identity, token count and breakpoint TTL."""

    identity: Any
    tokens: int
    ttl: str | None = None
    where: str = ""


@dataclass(slots=True)
class CacheUsage:
    """What one request reports."""

    input_tokens: int
    read: int = 0
    write_5m: int = 0
    write_1h: int = 0

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h


@dataclass(slots=True)
class _Entry:
    expires: float
    ttl: float


@dataclass(slots=True)
class PromptCache:
    """The cache entries of one emulator, keyed by prefix hash (touched on the server thread)."""

    clock: VirtualClock
    entries: dict[bytes, _Entry] = field(default_factory=dict)

    def account(
        self, model: str, blocks: Sequence[CacheBlock], min_tokens: int, *, write: bool = True
    ) -> CacheUsage:
        """Read and write the cache for one request's ``blocks``; ``write=False`` only counts.

        Raises:
            ApiError: More than 4 breakpoints, or a 1 hour breakpoint after a 5 minute one.
        """
        breakpoints = [i for i, b in enumerate(blocks) if b.ttl is not None]
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise invalid(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(breakpoints)}."
            )
        seen_short = False
        for index in breakpoints:
            if blocks[index].ttl == "5m":
                seen_short = True
            elif seen_short:
                raise invalid(
                    f"{blocks[index].where}: a ttl='1h' cache_control block must not come after "
                    "a ttl='5m' cache_control block. Put the longer-lived breakpoints first."
                )
        total = sum(b.tokens for b in blocks)
        if not breakpoints:
            return CacheUsage(total)
        now = self.clock.now()
        running = hashlib.blake2b(model.encode(), digest_size=16)
        keys: list[bytes] = []
        ends: list[int] = []
        position = 0
        for block in blocks:
            running.update(json.dumps(block.identity, sort_keys=True, default=str).encode())
            running.update(b"\x1e")
            keys.append(running.copy().digest())
            position += block.tokens
            ends.append(position)
        read_at = -1  # index of the last block of the longest live cached prefix
        for index in breakpoints:
            for candidate in range(index, max(-1, index - LOOKBACK - 1), -1):
                entry = self.entries.get(keys[candidate])
                if entry is not None and entry.expires > now:
                    if candidate > read_at:
                        read_at = candidate
                    break
        usage = CacheUsage(total)
        if read_at >= 0:
            usage.read = ends[read_at]
            entry = self.entries[keys[read_at]]
            if write:
                entry.expires = now + entry.ttl
        covered = usage.read
        for index in breakpoints:
            if index <= read_at or ends[index] < min_tokens:
                continue
            ttl = str(blocks[index].ttl)
            span = ends[index] - covered
            if ttl == "1h":
                usage.write_1h += span
            else:
                usage.write_5m += span
            covered = ends[index]
            if write:
                seconds = TTLS[ttl]
                self.entries[keys[index]] = _Entry(now + seconds, seconds)
        usage.input_tokens = total - covered
        if len(self.entries) > _MAX_ENTRIES:
            for key in [k for k, e in self.entries.items() if e.expires <= now]:
                del self.entries[key]
        return usage
