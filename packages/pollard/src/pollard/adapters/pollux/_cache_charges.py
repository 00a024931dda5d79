"""Explicit context caches as charged ledger entries: creation and storage, under their run.

A Gemini ``CachePolicy`` cache is billed apart from the calls that read it: its tokens once at
the model's input rate when it is created, then storage for every hour it lives
(``tokens x hours x storage rate``). pollux reports a cache the call created in
``Output.diagnostics.raw["cache"]`` (name, tokens, TTL); the bridge then records a
``cache_storage`` note under that call's node, charged ``usd`` for the creation plus the whole TTL
of storage (what the provider bills when the cache lives to its expiry, so expiry settles it).
The note's id is a function of the cache name, so a cache is charged once however many calls
report it, and replay (which makes no call) records nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pollard import Node, NodeKind
from pollard.meters import PRICE_PROVIDERS, genai_price

if TYPE_CHECKING:
    from pollard import AsyncRun
    from pollux import Output

__all__ = ["CACHE_STORAGE_PRICES", "cache_storage_price", "charge_created_cache"]

CACHE_STORAGE_PRICES: dict[str, Decimal] = {
    # Gemini Developer API pricing page, "Context caching (storage)": US dollars per 1,000,000
    # tokens per hour. Longest matching model-name prefix wins.
    "gemini-2.5-pro": Decimal("4.50"),
    "gemini-3-pro": Decimal("4.50"),
    "gemini-2.5-flash": Decimal("1.00"),
    "gemini-2.5-flash-lite": Decimal("1.00"),
    "gemini-2.0-flash": Decimal("1.00"),
    "gemini-3-flash": Decimal("1.00"),
}
"""Explicit-cache storage prices (US dollars per million tokens per hour), by model prefix."""


def _storage_rate(model: str) -> Decimal | None:
    name = model.rsplit("/", 1)[-1]
    matches = [prefix for prefix in CACHE_STORAGE_PRICES if name.startswith(prefix)]
    return CACHE_STORAGE_PRICES[max(matches, key=len)] if matches else None


def cache_storage_price(
    provider: str, model: str, tokens: int, seconds: float
) -> tuple[Decimal, Decimal] | None:
    """``(creation, storage)`` dollars of an explicit cache, or None when unpriced.

    Creation is ``tokens`` at the model's input rate (genai-prices); storage is
    ``tokens x seconds / 3600 x`` the hourly storage rate (`CACHE_STORAGE_PRICES`).
    """
    rate = _storage_rate(model)
    if rate is None:
        return None
    try:
        import genai_prices
    except ImportError:  # pragma: no cover - the prices extra is installed in the tests
        return None
    try:
        creation, _ = genai_price(
            genai_prices,
            model,
            {"input_tokens": tokens, "output_tokens": 0},
            provider_id=PRICE_PROVIDERS.get(provider),
        )
    except LookupError:
        return None
    storage = Decimal(tokens) * rate * Decimal(str(seconds)) / Decimal(3600) / Decimal(1_000_000)
    return creation, storage


async def charge_created_cache(
    run: AsyncRun, node_id: str, provider: str, model: str | None, output: Output
) -> Node | None:
    """Record the creation and storage charge of the cache ``output`` created, once.

    Returns the ``cache_storage`` note, or None when the call created no cache.
    """
    facts = output.diagnostics.raw.get("cache")
    if not isinstance(facts, Mapping) or facts.get("created") is not True:
        return None
    name, tokens, ttl = facts.get("name"), facts.get("tokens"), facts.get("ttl_seconds")
    if not isinstance(name, str) or not isinstance(tokens, int) or not isinstance(ttl, int):
        return None
    payload = {"pollux": "cache_storage", "cache": name}
    if run.store.find(Node.create(NodeKind.NOTE, node_id, payload).id) is not None:
        return None
    model = model or ""
    priced = cache_storage_price(provider, model, tokens, ttl)
    meta: dict[str, Any] = {
        "cache": {"name": name, "tokens": tokens, "ttl_seconds": ttl, "model": model},
    }
    charges: dict[str, Any] = {}
    if priced is None:
        meta["unpriced"] = True
    else:
        creation, storage = priced
        charges["usd"] = creation + storage
        meta["cache"]["creation_usd"] = str(creation)
        meta["cache"]["storage_usd"] = str(storage)
    return await run.record_charged(
        NodeKind.NOTE,
        payload,
        charges=charges,
        result={"cache": name, "tokens": tokens, "ttl_seconds": ttl},
        parent=node_id,
        meta=meta,
    )
