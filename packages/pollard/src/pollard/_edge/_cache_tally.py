"""Cache economics of a run, read from its recorded nodes: hit ratio and dollars saved.

Every model call records its usage (``meta["usage"]``); a cost meter records what the cache saved
against the same call with no cache (``meta["<meter>_cache_saved"]``, see
`pollard.meters.cache_economics_meta`); a created explicit cache is a ``cache_storage`` note
charged its creation and storage. ``pollard report`` shows the sums per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from pollard._core._usage import usable_count

__all__ = ["CacheTally"]

_SAVED = "_cache_saved"


class CacheTally:
    """Sums prompt, cache-read and cache-write tokens and savings over the nodes it sees."""

    def __init__(self) -> None:
        self.prompt = 0
        self.read = 0
        self.write = 0
        self.saved: dict[str, Decimal] = {}

    def tally(self, nodes: Iterable[Any]) -> Iterator[Any]:
        """Yield ``nodes`` unchanged, counting each model call's cache figures on the way."""
        for node in nodes:
            meta = node.meta if isinstance(node.meta, Mapping) else {}
            usage = meta.get("usage")
            if isinstance(usage, Mapping):
                self._add(usage)
            for key, value in meta.items():
                if isinstance(key, str) and key.endswith(_SAVED):
                    try:
                        amount = Decimal(str(value))
                    except InvalidOperation:
                        continue
                    name = key[: -len(_SAVED)]
                    self.saved[name] = self.saved.get(name, Decimal(0)) + amount
            yield node

    def _add(self, usage: Mapping[str, Any]) -> None:
        def count(key: str) -> int:
            return usable_count(usage.get(key)) or 0

        if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
            read, write = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
            prompt = count("input_tokens") + read + write  # Anthropic's raw shape
        else:
            read, write = count("cache_read_tokens"), count("cache_write_tokens")
            prompt = count("input_tokens")
        self.prompt += prompt
        self.read += read
        self.write += write

    @property
    def hit_ratio(self) -> float | None:
        """Cache-read tokens over all prompt tokens (None without any prompt tokens)."""
        return self.read / self.prompt if self.prompt else None

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON: plain numbers, and exact texts for the savings."""
        return {
            "prompt_tokens": self.prompt,
            "cache_read_tokens": self.read,
            "cache_write_tokens": self.write,
            "hit_ratio": self.hit_ratio,
            "saved": {name: float(amount) for name, amount in sorted(self.saved.items())},
            "saved_exact": {name: str(amount) for name, amount in sorted(self.saved.items())},
        }

    def line(self) -> str:
        """One line for the text report."""
        if not self.prompt:
            return "no model calls"
        ratio = self.hit_ratio or 0.0
        text = f"hit ratio {ratio:.1%} ({self.read:,} of {self.prompt:,} prompt tokens read"
        text += f", {self.write:,} written)"
        if self.saved:
            text += ", saved " + ", ".join(
                f"{name} {amount.normalize():f}" for name, amount in sorted(self.saved.items())
            )
        return text
