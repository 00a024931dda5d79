"""List prices of a call's usage, from the optional genai-prices package (no I/O).

pollux reports what a call cost and what its cache saved (``Output.metrics.cost_usd`` and
``cache_savings_usd``) when ``genai-prices`` is installed and knows the model; otherwise those
figures are ``None`` (unknown, never zero). genai-prices is imported on first use, so
``import pollux`` does not pay for its price tables.

Every priced field has its rate: uncached input, cache reads, cache writes by TTL class (a 1-hour
write is priced at the 1-hour rate), output, and the long-context tier genai-prices applies from
the whole prompt's size. A provider's own figure (OpenRouter's ``usage.cost``) wins over the
computed one. The counterfactual for savings is the same usage on the same model with no cache:
every prompt token at the uncached input rate.
"""

from __future__ import annotations

import importlib
from decimal import Decimal
from typing import Any

from pollux.interaction.output import Usage

__all__ = ["PRICE_PROVIDERS", "call_cost", "list_price"]

PRICE_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "openrouter": "openrouter",
}
"""pollux provider -> genai-prices provider id (local servers and the mock have no price)."""

_BATCH = {"processing": "batch"}
_MISSING = object()
_module: Any = None


def _prices() -> Any:
    global _module
    if _module is None:
        try:
            _module = importlib.import_module("genai_prices")
        except ImportError:
            _module = _MISSING
    return None if _module is _MISSING else _module


def list_price(
    provider: str, model: str, usage: Usage, *, batch: bool = False, cached: bool = True
) -> Decimal | None:
    """The computed list price of ``usage`` in US dollars, or None when it cannot be priced.

    Args:
        provider: The pollux provider name.
        model: The model name.
        usage: The call's usage.
        batch: Price at the provider's batch tier (genai-prices' ``processing=batch`` variant).
        cached: False prices the no-cache counterfactual: every prompt token uncached.

    Returns:
        The price, or None (no genai-prices, an unknown model, or usage not reported).
    """
    prices = _prices()
    provider_id = PRICE_PROVIDERS.get(provider)
    if prices is None or provider_id is None or not model or not usage.reported:
        return None
    fields: dict[str, int] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }
    if cached:
        if usage.cached_tokens:
            fields["cache_read_tokens"] = usage.cached_tokens
        if usage.cache_write_tokens:
            fields["cache_write_tokens"] = usage.cache_write_tokens
            if usage.cache_write_1h_tokens:
                fields["cache_write_1h_tokens"] = usage.cache_write_1h_tokens
    try:
        calc = prices.calc_price(
            prices.Usage(**fields),
            model_ref=model,
            provider_id=provider_id,
            price_context=_BATCH if batch else None,
        )
    except (LookupError, ValueError):
        return None
    return Decimal(str(calc.total_price))


def call_cost(
    provider: str, model: str, usage: Usage, *, batch: bool = False
) -> tuple[Decimal | None, Decimal | None]:
    """``(cost, saved)``: what the call cost and what its cache saved, in US dollars.

    ``cost`` is the provider's own figure when it reports one, else the computed list price.
    ``saved`` is the no-cache counterfactual's price less the computed price (negative when a
    cache write's premium was not yet paid back); ``None`` when either cannot be priced.
    """
    computed = list_price(provider, model, usage, batch=batch)
    cost = usage.provider_cost_usd if usage.provider_cost_usd is not None else computed
    if computed is None:
        return cost, None
    if not usage.cached_tokens and not usage.cache_write_tokens:
        return cost, Decimal(0)
    baseline = list_price(provider, model, usage, batch=batch, cached=False)
    return cost, None if baseline is None else baseline - computed
