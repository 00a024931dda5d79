"""Dollar prices from the genai-prices package (``pollard[prices]``)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["PRICE_PROVIDERS", "GenAIPricesCostMeter", "genai_price", "priced_models"]

_INSTALL = 'CostMeter.from_genai_prices needs the prices extra: pip install "pollard[prices]"'

PRICE_PROVIDERS: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    # genai-prices lists no Vertex AI provider: a Gemini model there is priced at Google's list
    # price for the model (Vertex's standard on-demand prices for Gemini are the same table).
    "vertex": "google",
    "openrouter": "openrouter",
    # genai-prices' Azure table (it falls back to OpenAI's for the models it does not list).
    "azure_openai": "azure",
}
"""pollux provider name (``payload["provider"]`` of a bridge node) -> genai-prices provider id."""

# pollux providers whose ``model`` names a deployment, not a model (see `priced_models`).
_DEPLOYMENTS = frozenset({"azure_openai"})


def priced_models(payload: Any, result: Any = None) -> tuple[str, ...]:
    """The model names a bridge node is priced by, in order (the first one priced wins).

    A node's ``model`` is priced as it is, except where a pollux provider's ``model`` names a
    deployment (``provider="azure_openai"``): there the model the recorded answer names
    (``diagnostics.response.artifacts.model_version``) comes first, then the model the
    configuration says the deployment serves (``Config.pricing_model``, kept in the payload's
    ``_pollard``), then the deployment's own name. Before the call (no ``result``) only the
    last two are known.
    """
    if not isinstance(payload, Mapping):
        return ()
    model = payload.get("model")
    names = [model if isinstance(model, str) and model else None]
    if payload.get("provider") in _DEPLOYMENTS:
        extra = payload.get("_pollard")
        declared = extra.get("pricing_model") if isinstance(extra, Mapping) else None
        names[:0] = [_served(result), declared if isinstance(declared, str) else None]
    return tuple(dict.fromkeys(name for name in names if name))


def _served(result: Any) -> str | None:
    # The model a recorded pollux answer names (bridge results: {"output": Output JSON, ...}).
    node: Any = result
    for key in ("output", "diagnostics", "response", "artifacts", "model_version"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, str) and node else None


def _unpriced_hint(payload: Any) -> str:
    # What makes a deployment priceable before its call ("" for a model name).
    if isinstance(payload, Mapping) and payload.get("provider") in _DEPLOYMENTS:
        return (
            f" ({payload.get('provider')} model {payload.get('model')!r} names a deployment: "
            "set Config(pricing_model=...) or POLLUX_AZURE_PRICING_MODEL to the model it "
            "serves, e.g. 'gpt-5-mini')"
        )
    return ""


_BATCH = {"processing": "batch"}


def genai_price(
    prices: Any,
    model: str,
    usage: Mapping[str, int],
    *,
    provider_id: str | None,
    batch: bool = False,
    cached: bool = True,
    batch_discount: Decimal | None = None,
    discount_cache_reads: bool = True,
) -> tuple[Decimal, bool]:
    """Price ``usage`` with genai-prices: ``(dollars, the model's batch variant applied)``.

    Every priced field has its rate: uncached input, cache reads, cache writes by TTL class
    (``cache_write_1h_tokens`` at the 1-hour rate, the rest at the 5-minute one), output, and the
    long-context tier genai-prices picks from the whole prompt. ``batch`` asks for the model's
    ``processing=batch`` price variant; the second value says whether the model has one. When it
    does not, ``batch_discount`` (a fraction of the standard price) is applied instead, to the
    cache reads too unless ``discount_cache_reads`` is False (Google's batch and cache discounts
    do not stack). ``cached=False`` prices the no-cache counterfactual: every prompt token at the
    input rate.

    Raises:
        LookupError: genai-prices has no price for the model.
    """
    from pollard.meters import split_usage, split_writes

    uncached, read, write, output = split_usage(usage)
    fields: dict[str, int] = {"input_tokens": uncached + read + write, "output_tokens": output}
    if cached:
        # genai-prices counts cache tokens inside input_tokens, as pollard's adapters do.
        fields["cache_read_tokens"] = read
        fields["cache_write_tokens"] = write
        _, long = split_writes(usage)
        if long:
            fields["cache_write_1h_tokens"] = long
    tokens = prices.Usage(**fields)
    context = _BATCH if batch and _takes_context(prices) else None
    try:
        calc = prices.calc_price(
            tokens,
            model_ref=model,
            provider_id=provider_id,
            **({"price_context": context} if context else {}),
        )
    except ValueError as exc:  # genai-prices' own "no price" answers for some shapes
        raise LookupError(str(exc)) from None
    variants = getattr(calc.model, "price_variants", None) or ()
    # genai-prices applies the batch variant only to the provider's own models, not to one
    # borrowed from its fallback table (Azure's OpenAI models): those are priced standard.
    own = any(calc.model is m for m in getattr(calc.provider, "models", None) or ())
    batched = (
        context is not None and own and any(getattr(v, "when", None) == _BATCH for v in variants)
    )
    price = Decimal(str(calc.total_price))
    if batch and not batched and batch_discount is not None:
        kept = Decimal(0)
        if not discount_cache_reads and cached and read:
            model_price = calc.model_price
            rate = getattr(model_price, "cache_read_mtok", None)
            if rate is None:  # genai-prices' own fallback: a cache read at the input rate
                rate = getattr(model_price, "input_mtok", None)
            kept = _tiered(rate, uncached + read + write) * read / _MILLION
        price = batch_discount * (price - kept) + kept
    return price, batched


_MILLION = Decimal(1_000_000)


def _tiered(rate: Any, prompt_tokens: int) -> Decimal:
    """A genai-prices rate per million tokens at the tier the whole prompt falls in."""
    if rate is None:
        return Decimal(0)
    tiers = getattr(rate, "tiers", None)
    if tiers is None:
        return Decimal(str(rate))
    chosen = rate.base
    for tier in sorted(tiers, key=lambda t: t.start, reverse=True):
        if prompt_tokens > tier.start:
            chosen = tier.price
            break
    return Decimal(str(chosen))


def _takes_context(prices: Any) -> bool:
    # Older genai-prices (before price variants) has no price_context.
    return "price_context" in inspect.signature(prices.calc_price).parameters


class GenAIPricesCostMeter:
    """Charge US dollars with prices from genai-prices (bundled data, no network at charge time).

    Both usage shapes of `pollard.meters.split_usage` are understood, so cached tokens are priced
    once, at the cache price; 1-hour cache writes (``cache_write_1h_tokens``) at the 1-hour rate;
    long prompts at the model's long-context tier. The provider's own price of a call (OpenRouter's
    ``usage.cost``, see `pollard.meters.provider_cost`) is charged instead of the computed one,
    which the node keeps as ``"<name>_computed"``; what a cache saved is kept as
    ``"<name>_cache_saved"``. A node recorded by the pollux bridge names its provider, which
    selects the genai-prices provider when ``provider_id`` is not set. A model genai-prices does
    not know is refused before the call runs (fail closed). An Azure OpenAI node's model is a
    deployment: it is admitted at the price of the model ``Config.pricing_model`` names and
    settled at the price of the model its answer names (`priced_models`).

    With an ``estimator`` the meter is **hard**, as ``CostMeter(estimator=...)`` is: a model call
    is admitted against its priced worst case (the input estimate at the model's dearest input
    rate, whether billed fresh, as a cache read or as a cache write, plus its output cap at the
    output rate, at the tier genai-prices picks for that prompt size), held until the call
    settles at its actual cost. A call with no output cap is refused under a dollar budget
    (``BudgetExceeded(reason="unbounded")``). Without an estimator, or with ``estimated=True``,
    the budget refuses once it is spent (an estimated, soft budget).
    """

    def __init__(
        self,
        *,
        provider_id: str | None = None,
        name: str = "usd",
        estimator: Any = None,
        reserved_output_tokens: int = 0,
        estimated: bool = False,
    ) -> None:
        from pollard.meters import TokenMeter

        # The worst case in tokens follows the token meter's rule; it validates the arguments.
        self._tokens = TokenMeter(
            estimator, reserved_output_tokens=reserved_output_tokens, estimated=estimated
        )
        try:
            self._prices = importlib.import_module("genai_prices")
        except ImportError as exc:
            raise ImportError(_INSTALL) from exc
        self.name = name
        self.provider_id = provider_id
        self.estimated = self._tokens.estimated
        self.hard = self._tokens.hard
        self.precheck_is_estimate = self.hard
        self.unbounded_hint = self._tokens.unbounded_hint

    def _provider(self, payload: Any) -> str | None:
        if self.provider_id is not None:
            return self.provider_id
        provider = payload.get("provider") if isinstance(payload, Mapping) else None
        return PRICE_PROVIDERS.get(provider) if isinstance(provider, str) else None

    def _price(
        self,
        model: str | None,
        usage: Mapping[str, int],
        payload: Any = None,
        *,
        cached: bool = True,
        result: Any = None,
    ) -> Decimal:
        # ``model`` None: the payload's (`priced_models`, the first genai-prices knows).
        names = (model,) if model is not None else priced_models(payload, result)
        error: LookupError = LookupError("no model in the payload")
        for name in names:
            try:
                price, _ = genai_price(
                    self._prices, name, usage, provider_id=self._provider(payload), cached=cached
                )
            except LookupError as exc:
                error = exc
                continue
            return price
        raise error

    def _computed(self, payload: Any, result: Any, *, cached: bool = True) -> Decimal | None:
        from pollard.meters import token_usage

        usage = token_usage(result)
        if not isinstance(payload, Mapping) or not usage:
            return None
        try:
            return self._price(None, usage, payload, cached=cached, result=result)
        except LookupError:
            return None

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Decimal:
        """Return the provider's own price of a model call, else its computed dollar price."""
        from pollard.meters import provider_cost, token_usage

        model = payload.get("model") if isinstance(payload, Mapping) else None
        usage = token_usage(result)
        if kind != "model_call" or not isinstance(model, str) or not usage:
            return Decimal(0)
        billed = provider_cost(result)
        if billed is not None:
            return billed
        return self._price(None, usage, payload, result=result)

    def settle_meta(
        self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """Keep the computed price and the cache saving (`pollard.meters.cache_economics_meta`)."""
        from pollard.meters import cache_economics_meta

        if kind != "model_call":
            return None
        return cache_economics_meta(
            self.name,
            result,
            self._computed(payload, result),
            self._computed(payload, result, cached=False),
        )

    def precheck_estimate(self, kind: str, payload: Any) -> Decimal | None:
        """Check that genai-prices knows the model (fail closed); hard: price the worst case.

        A hard meter returns None for a model call whose worst case cannot be bounded (no output
        cap), and 0 for other kinds; a soft one makes no dollar estimate (None).
        """
        if kind != "model_call":
            return Decimal(0) if self.hard else None
        model = payload.get("model") if isinstance(payload, Mapping) else None
        error: LookupError = LookupError("no model in the payload")
        # Before the call, a deployment is priced by the model it is said to serve.
        for name in priced_models(payload):
            try:
                self._price(name, {}, payload)
            except LookupError as exc:
                error = exc
                continue
            model = name
            break
        else:
            raise ValueError(
                f"genai-prices has no price for model {model!r}: {error}{_unpriced_hint(payload)}"
            ) from None
        if not self.hard:
            return None
        from pollard.meters import worst_case_usage

        tokens = self._tokens
        worst = worst_case_usage(tokens.estimator, tokens.reserved_output_tokens, payload)
        if worst is None:
            return None
        prompt, cap = worst["input_tokens"], worst["output_tokens"]
        # Whichever way the provider bills the prompt (fresh, a cache read, a 5-minute or a
        # 1-hour cache write), the dearest of those prices bounds it.
        shapes: tuple[dict[str, int], ...] = (
            {},
            {"cache_read_tokens": prompt},
            {"cache_write_tokens": prompt},
            {"cache_write_tokens": prompt, "cache_write_1h_tokens": prompt},
        )
        return max(
            self._price(model, {"input_tokens": prompt, "output_tokens": cap, **shape}, payload)
            for shape in shapes
        )

    def __repr__(self) -> str:
        extra = ""
        if self._tokens.estimator is not None:
            extra = f", estimator={self._tokens.estimator!r}"
            if self._tokens.reserved_output_tokens:
                extra += f", reserved_output_tokens={self._tokens.reserved_output_tokens}"
        if self.estimated:
            extra += ", estimated=True"
        return f"CostMeter.from_genai_prices(provider_id={self.provider_id!r}{extra})"
