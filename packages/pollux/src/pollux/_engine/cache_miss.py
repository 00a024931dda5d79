"""Why a prompt cache missed: compare a call's prefix with the one the cache was proven on.

Providers cache a request's stable prefix (model, then tools, instructions and sources, and the
settings that shape it). pollux remembers, per provider and process, the prefixes that proved
cacheable (a call reported cache reads or writes for them) as *fingerprint parts*: the model,
a digest of the instructions, each source's ``cache_identity_hash``, each tool's canonical
schema digest (tools are sent in canonical order, so reordering alone never changes the prefix)
and a digest of the prefix-shaping settings (tool choice, output schema, reasoning).

When a call that reports usage reads nothing from the cache although a proven prefix sharing
the opening of its instructions, a source or its tools is still within its lifetime, the call
was *expected to hit*: the
Output then carries ``diagnostics.raw["cache_miss"]`` naming what changed (``"model"``,
``"instructions"``, ``"source[i]"``, ``"tools"`` with the tool names, ``"settings"``), or, when
nothing did, that the entry expired, was evicted or the prefix is below the model's minimum. It
is a diagnostic from the fingerprints, never a guess at the provider's internals, and it is
logged on the ``pollux.cache`` logger.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pollux.interaction.requirements import response_schema_hash

if TYPE_CHECKING:
    from pollux.interaction.output import Usage
    from pollux.interaction.tools import ToolDeclaration
    from pollux.providers.base import ProviderRequest

__all__ = ["PREFIXES", "PrefixParts", "PrefixRegistry", "canonical_tools", "prefix_parts"]

_log = logging.getLogger("pollux.cache")
_MAX = 256
# How long a proven prefix is expected to stay cached: the provider default (5 minutes), or
# the hour a CachePolicy asks for.
_DEFAULT_TTL_S = 300.0


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def canonical_tools(tools: Sequence[ToolDeclaration]) -> tuple[ToolDeclaration, ...]:
    """The tools in canonical form: ordered by name, schema keys sorted.

    Providers cache the tool block as part of the prefix, so the same tools declared in another
    order (or a schema whose keys were built in another order) must serialize identically.
    """
    from dataclasses import replace

    ordered = sorted(tools, key=lambda tool: tool.name)
    return tuple(replace(tool, parameters=_canonical(tool.parameters)) for tool in ordered)


@dataclass(frozen=True, slots=True)
class PrefixParts:
    """The fingerprint parts of a request's cacheable prefix."""

    model: str
    instructions: str | None
    sources: tuple[str, ...]
    tools: tuple[tuple[str, str], ...]
    settings: str
    # The instructions' opening (a digest): an edit further down keeps it, so an edited
    # Environment is still recognised as the one the cache was proven on.
    opening: str | None = None

    def changes(self, before: PrefixParts) -> list[str]:
        """What differs from ``before``, in prefix order (model first)."""
        changed: list[str] = []
        if self.model != before.model:
            changed.append("model")
        if self.tools != before.tools:
            names = sorted(
                {n for n, _ in set(self.tools) ^ set(before.tools)}
                | ({n for n, _ in self.tools} ^ {n for n, _ in before.tools})
            )
            changed.append("tools" + (f" ({', '.join(names)})" if names else ""))
        if self.instructions != before.instructions:
            changed.append("instructions")
        for index in range(max(len(self.sources), len(before.sources))):
            now = self.sources[index] if index < len(self.sources) else None
            then = before.sources[index] if index < len(before.sources) else None
            if now != then:
                changed.append(f"source[{index}]")
        if self.settings != before.settings:
            changed.append("settings")
        return changed

    def overlaps(self, other: PrefixParts) -> bool:
        """Whether the two share instructions (or their opening), a source or their tools.

        That makes them plausibly one Environment, edited: the case worth explaining.
        """
        if self.opening is not None and self.opening == other.opening:
            return True
        if self.tools and self.tools == other.tools:
            return True
        return bool(set(self.sources) & set(other.sources))


def prefix_parts(provider: str, request: ProviderRequest) -> PrefixParts:
    """The fingerprint parts of ``request``'s prefix."""
    settings = request.requirements
    shaping = {
        "tool_choice": settings.tool_choice,
        "schema": response_schema_hash(settings.output_schema),
        "reasoning_effort": settings.reasoning_effort,
        "reasoning_budget_tokens": settings.reasoning_budget_tokens,
    }
    return PrefixParts(
        model=request.model or "",
        instructions=None if request.instructions is None else _digest(request.instructions),
        sources=tuple(
            source.cache_identity_hash(provider=provider)[:16] for source in request.sources.sources
        ),
        tools=tuple(
            (tool.name, _digest([tool.description, tool.parameters, tool.strict]))
            for tool in request.tools
        ),
        settings=_digest(shaping),
        opening=None if request.instructions is None else _digest(request.instructions[:200]),
    )


@dataclass(slots=True)
class _Proven:
    parts: PrefixParts
    until: float


class PrefixRegistry:
    """Prefixes proven cacheable, per provider (process-wide, bounded, thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, PrefixParts], _Proven] = OrderedDict()
        self._providers: set[str] = set()

    def observe(
        self,
        provider: str,
        parts_of: Callable[[], PrefixParts],
        usage: Usage,
        ttl_s: float | None = None,
    ) -> dict[str, Any] | None:
        """Record a call's cache outcome; return the miss diagnostic when a hit was expected.

        ``parts_of`` is called only when there is something to record or compare, so a
        provider that never caches pays nothing.
        """
        if not usage.reported:
            return None
        now = time.monotonic()
        reads, writes = usage.cached_tokens or 0, usage.cache_write_tokens or 0
        if not reads and not writes and provider not in self._providers:
            return None
        parts = parts_of()
        with self._lock:
            if reads or writes:
                self._providers.add(provider)
                self._entries[(provider, parts)] = _Proven(parts, now + (ttl_s or _DEFAULT_TTL_S))
                self._entries.move_to_end((provider, parts))
                while len(self._entries) > _MAX:
                    self._entries.popitem(last=False)
            if reads:
                return None
            candidates = [
                entry
                for (name, _), entry in reversed(self._entries.items())
                if name == provider
                and entry.until > now
                and entry.parts != parts
                and entry.parts.overlaps(parts)
            ]
            same = self._entries.get((provider, parts))
            if not candidates and not writes and same is not None and same.until > now:
                # This very prefix was proven and is still expected to be cached, yet nothing
                # was read or written: the entry is gone (or below the minimum after all).
                candidates = [same]
        if not candidates:
            return None
        # The closest proven prefix: the one with the fewest changes.
        before = min(candidates, key=lambda entry: len(parts.changes(entry.parts))).parts
        changed = parts.changes(before)
        if writes and not changed:
            return None  # written again (a concurrent first write): not a miss to explain
        if changed:
            message = (
                "the prompt cache missed because the prefix changed since it was cached: "
                + ", ".join(changed)
            )
            hint = (
                "Keep the cached part identical between calls: the same model, tools, "
                "instructions and sources in the same order, and the same tool choice, output "
                "schema and reasoning settings; put what varies in the prompt."
            )
        else:
            message = (
                "the prompt cache missed although the prefix is unchanged: the entry expired or "
                "was evicted, or the prefix is below the model's minimum cacheable size"
            )
            hint = (
                "Send calls over one prefix within its lifetime (5 minutes by default, or ask "
                "for longer with CachePolicy(ttl_seconds=3600)), or grow the shared prefix."
            )
        _log.info("pollux %s: %s", provider, message)
        return {"expected_hit": True, "changed": changed, "message": message, "hint": hint}


#: The process-wide registry (module-level ``pollux.run`` opens a Session per call).
PREFIXES = PrefixRegistry()
