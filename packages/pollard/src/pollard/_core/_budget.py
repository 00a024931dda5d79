"""``Budget``: per-scope limits, exact Decimals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType

from pollard._core._ledger import to_decimal

__all__ = ["Budget"]

Amount = int | float | Decimal | str


def _limit(name: str, value: object) -> Decimal:
    if isinstance(value, bool):
        raise TypeError(f"Budget {name} must be a number, not a bool")
    try:
        amount = to_decimal(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"Budget {name}: {exc}") from None
    if amount < 0:
        raise ValueError(f"Budget {name} must be >= 0, got {value!r}")
    return amount


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits checked before each step of a run (or of a branch that has its own budget).

    Every limit is optional; ``None`` means unlimited. Amounts are kept as exact Decimals (floats
    are converted through their shortest text, so ``0.1`` is ``Decimal("0.1")``).

    Args:
        usd: Spend limit in US dollars (needs a ``CostMeter``).
        tokens: Token limit (input + output, including cache fields the adapters report).
        depth: Maximum absolute tree depth of a step (the root is depth 0).
        seconds: Wall-clock seconds spent inside your step functions.
        steps: Number of model and tool calls.
        extra: Limits for custom meters, by meter name.

    Raises:
        TypeError: For bools or non-numeric limits.
        ValueError: For negative, NaN or infinite limits.

    Example:
        >>> Budget(tokens=20_000, usd="0.50").limits()["usd"]
        Decimal('0.50')
    """

    usd: Amount | None = None
    tokens: Amount | None = None
    depth: Amount | None = None
    seconds: Amount | None = None
    steps: Amount | None = None
    extra: Mapping[str, Amount] = field(default_factory=dict)
    _limits: Mapping[str, Decimal] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        limits: dict[str, Decimal] = {}
        for name in ("usd", "tokens", "depth", "seconds", "steps"):
            value = getattr(self, name)
            if value is not None:
                limits[name] = _limit(name, value)
        for name, value in dict(self.extra).items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"Budget extra keys must be meter names, got {name!r}")
            if name in limits:
                raise ValueError(f"Budget extra repeats the built-in limit {name!r}")
            limits[name] = _limit(name, value)
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        object.__setattr__(self, "_limits", MappingProxyType(limits))

    def limits(self) -> dict[str, Decimal]:
        """Return the set limits by meter name, as exact Decimals."""
        return dict(self._limits)
