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

An Azure OpenAI ``Config.model`` names a deployment, not a model: its calls are priced by the
model the response names (``served``), else by ``Config.pricing_model`` (`priced_model`); a call
that still cannot be priced is logged once per deployment (never a silent ``None``).
"""

from __future__ import annotations

import importlib
import logging
import time
from decimal import Decimal
from typing import Any

from pollux.interaction.deferred import BATCH_DISCOUNT, BATCH_FULL_PRICE_CACHE_READS
from pollux.interaction.output import Usage

__all__ = [
    "DEPLOYMENT_PROVIDERS",
    "PRICE_PROVIDERS",
    "call_cost",
    "list_price",
    "priced_model",
]

PRICE_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    # genai-prices lists no Vertex AI provider: priced as the same Gemini model at Google.
    "vertex": "google",
    "openrouter": "openrouter",
    # genai-prices' Azure table, which falls back to OpenAI's for the models it does not list.
    "azure_openai": "azure",
}
"""pollux provider -> genai-prices provider id (local servers and the mock have no price)."""

DEPLOYMENT_PROVIDERS = frozenset({"azure_openai"})
"""Providers whose ``Config.model`` names a deployment (priced by the model it serves)."""

_log = logging.getLogger("pollux.pricing")
_warned: set[tuple[str, str]] = set()


def priced_model(
    provider: str, model: str, *, served: str | None = None, declared: str | None = None
) -> tuple[str, ...]:
    """The model names a call of ``provider`` is priced by, the first one known winning.

    A model name (every provider but Azure OpenAI) is priced as configured. A deployment is
    priced by the model the response names (``served``), else by the model the configuration
    says it serves (``declared``, ``Config.pricing_model``), else by its own name (which prices
    only a deployment named like a model).
    """
    if provider not in DEPLOYMENT_PROVIDERS:
        return (model,)
    return tuple(dict.fromkeys(name for name in (served, declared, model) if name))


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

    The model's genai-prices rates are resolved once per process and hour (genai-prices' own
    calculation costs a fraction of a millisecond, too much on every call of a fan-out); the
    arithmetic is genai-prices' own: a missing cache rate falls back to the input rate (a
    missing 1-hour write rate to the write rate), and a tiered rate applies to every token once
    the whole prompt is above the tier's start.

    Args:
        provider: The pollux provider name.
        model: The model name.
        usage: The call's usage.
        batch: Price at the provider's batch tier (genai-prices' ``processing=batch`` variant).
        cached: False prices the no-cache counterfactual: every prompt token uncached.

    Returns:
        The price, or None (no genai-prices, an unknown model, or usage not reported).
    """
    provider_id = PRICE_PROVIDERS.get(provider)
    if provider_id is None or not model or not usage.reported:
        return None  # checked first: the mock and local servers never load the price tables
    rates = _rates(provider_id, model, batch)
    if rates is None:
        return None
    total = usage.input_tokens

    def rate(*keys: str) -> Decimal:
        for key in keys:
            value = rates.get(key)
            if value is not None:
                return _tier(value, total)
        return Decimal(0)

    read = (usage.cached_tokens or 0) if cached else 0
    write = (usage.cache_write_tokens or 0) if cached else 0
    long = min(usage.cache_write_1h_tokens or 0, write) if cached else 0
    uncached = max(total - read - write, 0)
    factor = BATCH_DISCOUNT.get(provider, _ONE) if batch and not rates["_batched"] else _ONE
    read_factor = _ONE if provider in BATCH_FULL_PRICE_CACHE_READS else factor
    amount = factor * (
        uncached * rate("input_mtok")
        + (write - long) * rate("cache_write_5m_mtok", "cache_write_mtok", "input_mtok")
        + long * rate("cache_write_1h_mtok", "cache_write_mtok", "input_mtok")
        + usage.output_tokens * rate("output_mtok")
    ) + read_factor * read * rate("cache_read_mtok", "input_mtok")
    return amount / _MILLION


_MILLION = Decimal(1_000_000)
_ONE = Decimal(1)
_RATE_KEYS = (
    "input_mtok",
    "output_mtok",
    "cache_read_mtok",
    "cache_write_mtok",
    "cache_write_5m_mtok",
    "cache_write_1h_mtok",
)
_RESOLVE_EVERY_S = 3600.0
_resolved: dict[tuple[str, str, bool], tuple[float, dict[str, Any] | None]] = {}


def _tier(value: Any, total_input: int) -> Decimal:
    tiers = getattr(value, "tiers", None)
    if tiers is None:
        return Decimal(value)
    price = value.base
    for tier in sorted(tiers, key=lambda t: t.start, reverse=True):
        if total_input > tier.start:
            price = tier.price
            break
    return Decimal(price)


def _rates(provider_id: str, model: str, batch: bool) -> dict[str, Any] | None:
    key = (provider_id, model, batch)
    now = time.monotonic()
    cached = _resolved.get(key)
    if cached is not None and now - cached[0] < _RESOLVE_EVERY_S:
        return cached[1]
    prices = _prices()
    rates: dict[str, Any] | None = None
    if prices is not None:
        try:
            calc = prices.calc_price(
                prices.Usage(input_tokens=0, output_tokens=0),
                model_ref=model,
                provider_id=provider_id,
                price_context=_BATCH if batch else None,
            )
        except (LookupError, ValueError):
            calc = None
        if calc is not None:
            found = {k: getattr(calc.model_price, k, None) for k in _RATE_KEYS}
            rates = {k: v for k, v in found.items() if v is not None}
            # Whether the rates are already the batch tier's (else `BATCH_DISCOUNT` applies).
            rates["_batched"] = batch and _batch_priced(calc)
    if len(_resolved) > 1024:
        _resolved.clear()
    _resolved[key] = (now, rates)
    return rates


def _batch_priced(calc: Any) -> bool:
    # genai-prices applies a model's batch variant only when the model is the provider's own
    # (not one borrowed from the provider's fallback table).
    model = calc.model
    own = any(model is m for m in getattr(calc.provider, "models", ()) or ())
    variants = getattr(model, "price_variants", None) or ()
    return own and any(getattr(v, "when", None) == _BATCH for v in variants)


def call_cost(
    provider: str,
    model: str,
    usage: Usage,
    *,
    batch: bool = False,
    served: str | None = None,
    declared: str | None = None,
) -> tuple[Decimal | None, Decimal | None]:
    """``(cost, saved)``: what the call cost and what its cache saved, in US dollars.

    ``cost`` is the provider's own figure when it reports one, else the computed list price.
    ``saved`` is the no-cache counterfactual's price less the computed price (negative when a
    cache write's premium was not yet paid back); ``None`` when either cannot be priced. A
    deployment's call is priced by the model `priced_model` picks from ``served`` (the model
    the response names) and ``declared`` (``Config.pricing_model``).
    """
    computed = None
    for name in priced_model(provider, model, served=served, declared=declared):
        computed = list_price(provider, name, usage, batch=batch)
        if computed is not None:
            model = name
            break
    else:
        if provider in DEPLOYMENT_PROVIDERS:
            _unpriced(provider, model, served, usage)
    cost = usage.provider_cost_usd if usage.provider_cost_usd is not None else computed
    if computed is None:
        return cost, None
    if not usage.cached_tokens and not usage.cache_write_tokens:
        return cost, Decimal(0)
    baseline = list_price(provider, model, usage, batch=batch, cached=False)
    return cost, None if baseline is None else baseline - computed


def _unpriced(provider: str, model: str, served: str | None, usage: Usage) -> None:
    # A deployment's unpriced call is a configuration problem with a fix: say so, once per
    # deployment and process (a fan-out would repeat it for every call).
    if not usage.reported or usage.provider_cost_usd is not None or _prices() is None:
        return
    if (provider, model) in _warned:
        return
    _warned.add((provider, model))
    _log.warning(
        "%s deployment %r: its calls are unpriced (Output.metrics.cost_usd is None): "
        "genai-prices knows neither the model the response names (%r) nor the deployment. "
        "Set Config(pricing_model=<the model the deployment serves>, e.g. 'gpt-5-mini') or "
        "POLLUX_AZURE_PRICING_MODEL.",
        provider,
        model,
        served,
    )
