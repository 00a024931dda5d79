"""Dollar prices from the genai-prices package (``pollard[prices]``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["GenAIPricesCostMeter"]

_INSTALL = 'CostMeter.from_genai_prices needs the prices extra: pip install "pollard[prices]"'


class GenAIPricesCostMeter:
    """Charge US dollars with prices from genai-prices (bundled data, no network at charge time).

    Both usage shapes of `pollard.meters.split_usage` are understood, so cached tokens are priced
    once, at the cache price. A model genai-prices does not know is refused before the call runs
    (fail closed).
    """

    precheck_is_estimate = False

    def __init__(self, *, provider_id: str | None = None, name: str = "usd") -> None:
        try:
            self._prices = importlib.import_module("genai_prices")
        except ImportError as exc:
            raise ImportError(_INSTALL) from exc
        self.name = name
        self.provider_id = provider_id

    def _price(self, model: str, usage: Mapping[str, int]) -> Decimal:
        from pollard.meters import split_usage

        uncached, read, write, output = split_usage(usage)
        tokens = self._prices.Usage(
            input_tokens=uncached + read + write,  # genai-prices counts cached tokens as input
            output_tokens=output,
            cache_read_tokens=read,
            cache_write_tokens=write,
        )
        calc = self._prices.calc_price(tokens, model_ref=model, provider_id=self.provider_id)
        return Decimal(str(calc.total_price))

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Decimal:
        """Return the dollar price of a model call's reported usage."""
        from pollard.meters import token_usage

        model = payload.get("model") if isinstance(payload, Mapping) else None
        usage = token_usage(result)
        if kind != "model_call" or not isinstance(model, str) or not usage:
            return Decimal(0)
        return self._price(model, usage)

    def precheck_estimate(self, kind: str, payload: Any) -> None:
        """Check that genai-prices knows the model (fail closed); no dollar estimate is made."""
        if kind != "model_call":
            return None
        model = payload.get("model") if isinstance(payload, Mapping) else None
        try:
            if not isinstance(model, str):
                raise LookupError("no model in the payload")
            self._price(model, {})
        except LookupError as exc:
            raise ValueError(f"genai-prices has no price for model {model!r}: {exc}") from None
        return None

    def __repr__(self) -> str:
        return f"CostMeter.from_genai_prices(provider_id={self.provider_id!r})"
