"""Meters: what a step costs, and what it is expected to cost before it runs.

A meter has a ``name`` (the key in ``node.meta["charges"]``, in ``Budget`` limits and in
``run.report()``), a ``charge(kind, payload, result, meta)`` computed after the step, and a
``precheck_estimate(kind, payload)`` used to refuse a step before it runs (``None`` when the meter
cannot estimate). ``precheck_is_estimate = True`` marks the estimate as approximate; refusals caused
by it record ``"estimated": "true"``. A meter may also provide ``measure()``, a context manager
wrapped around your function whose ``readings()`` are merged into the node meta (how energy works),
and ``settle_meta(kind, payload, result, meta)`` returning extra meta for an executed step (never
called on replay).

The runtime always charges steps and tokens: if ``meters=`` has no meter named ``"steps"`` or
``"tokens"``, a `StepMeter` or `TokenMeter` is added, so passing meters never drops token
accounting. Depth is checked by the runtime itself from the cursor depth.

Built-in meters: `StepMeter`, `DepthMeter`, `WallClockMeter`, `TokenMeter`, `WindowMeter`,
`CostMeter`, `EnergyMeter` (``pollard[nvml]``) and `TokenmasterMeter` (``pollard[tokenmaster]``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from pollard._core._canon import canonical_bytes
from pollard._core._ledger import to_decimal
from pollard._core._usage import TOKEN_FIELDS, usable_count
from pollard._step._protocols import Meter
from pollard.meters._energy import EnergyMeter
from pollard.meters._tokenmaster import TokenmasterMeter

__all__ = [
    "CHARGED_KINDS",
    "CostMeter",
    "DepthMeter",
    "EnergyMeter",
    "Meter",
    "StepMeter",
    "TokenEstimator",
    "TokenMeter",
    "TokenmasterMeter",
    "WallClockMeter",
    "WindowMeter",
    "split_usage",
    "token_usage",
]

Amount = int | float | Decimal

CHARGED_KINDS = frozenset({"model_call", "tool_call"})
"""Kinds that dispatch work (and so are charged steps and tokens)."""


@runtime_checkable
class TokenEstimator(Protocol):
    """Estimates the input tokens of a model-call payload before it is sent."""

    def estimate_input_tokens(self, payload: Any) -> int:
        """Return the estimated input tokens of ``payload``."""
        ...


def split_usage(usage: Mapping[str, int]) -> tuple[int, int, int, int]:
    """Return ``(uncached input, cache reads, cache writes, output)`` counting each token once.

    Two shapes are understood: Anthropic's raw usage (``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` beside an ``input_tokens`` that excludes them), and the shape
    pollard's adapters return (``input_tokens`` including cached tokens, with
    ``cache_read_tokens`` and ``cache_write_tokens`` as a breakdown).
    """
    input_tokens = usage.get("input_tokens", 0)
    output_tokens = usage.get("output_tokens", 0)
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        read = usage.get("cache_read_input_tokens", 0)
        write = usage.get("cache_creation_input_tokens", 0)
        return input_tokens, read, write, output_tokens
    read, write = usage.get("cache_read_tokens", 0), usage.get("cache_write_tokens", 0)
    return max(input_tokens - read - write, 0), read, write, output_tokens


def token_usage(result: Any) -> dict[str, int] | None:
    """Return the usable token counts of ``result["usage"]``, or None when there is no usage.

    A count is usable when it is an int from 0 to ``2**63 - 1`` (not a bool). Any other value (a
    string, a float, a bool, a negative or larger int) is left out, so it is charged like a
    missing count; the runtime names such fields in ``node.meta["usage_invalid"]`` and marks a
    model call ``usage_missing``.
    """
    if not isinstance(result, Mapping):
        return None
    usage = result.get("usage")
    if not isinstance(usage, Mapping):
        return None
    fields: dict[str, int] = {}
    for key in TOKEN_FIELDS:
        count = usable_count(usage.get(key))
        if count is not None:
            fields[key] = count
    return fields


class StepMeter:
    """Counts dispatched steps: 1 per model or tool call, 0 otherwise. Its estimate is exact."""

    name = "steps"
    precheck_is_estimate = False

    def __init__(self, name: str = "steps") -> None:
        self.name = name

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return 1 for model and tool calls."""
        return 1 if kind in CHARGED_KINDS else 0

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Return 1 for model and tool calls (exact)."""
        return 1 if kind in CHARGED_KINDS else 0

    def __repr__(self) -> str:
        return f"StepMeter(name={self.name!r})"


class DepthMeter:
    """Charges nothing; the runtime checks ``Budget(depth=...)`` against the absolute tree depth."""

    name = "depth"
    precheck_is_estimate = False

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return 0 (depth is not cumulative)."""
        return 0

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Return None (the runtime checks depth itself)."""
        return None

    def __repr__(self) -> str:
        return "DepthMeter()"


class WallClockMeter:
    """Charges the seconds spent inside your step function (``meta["duration_s"]``)."""

    name = "seconds"
    precheck_is_estimate = False

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return the measured duration (microsecond resolution)."""
        duration = meta.get("duration_s")
        if type(duration) is float:  # the common case: the runtime's own measurement
            return Decimal(repr(round(duration, 6)))
        if isinstance(duration, (int, float)) and not isinstance(duration, bool):
            return Decimal(repr(round(float(duration), 6)))
        return 0

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Return None (duration cannot be known in advance)."""
        return None

    def __repr__(self) -> str:
        return "WallClockMeter()"


class TokenMeter:
    """Charges the tokens a call reports in ``result["usage"]``.

    The charge is every input and output token once: ``input_tokens + output_tokens``, plus
    ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` when usage reports them beside
    an input count that excludes them (Anthropic's raw shape; see `split_usage`). With an estimator,
    model calls are prechecked at ``estimate_input_tokens(payload) + reserved_output_tokens``, an
    approximate figure; without one, a token budget refuses only once it is spent.

    Args:
        estimator: An object with ``estimate_input_tokens(payload) -> int``, or None.
        reserved_output_tokens: Output tokens to reserve on top of the input estimate.
        name: The meter name.
    """

    def __init__(
        self,
        estimator: TokenEstimator | None = None,
        *,
        reserved_output_tokens: int = 0,
        name: str = "tokens",
    ) -> None:
        if isinstance(reserved_output_tokens, bool) or not isinstance(reserved_output_tokens, int):
            raise TypeError("reserved_output_tokens must be an int")
        if reserved_output_tokens < 0:
            raise ValueError("reserved_output_tokens must be >= 0")
        if estimator is not None and not callable(
            getattr(estimator, "estimate_input_tokens", None)
        ):
            raise TypeError("estimator must have an estimate_input_tokens(payload) method")
        self.name = name
        self.estimator = estimator
        self.reserved_output_tokens = reserved_output_tokens
        self.precheck_is_estimate = estimator is not None or reserved_output_tokens > 0

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return the reported tokens of a model or tool call (0 without usage).

        Unusable counts (see `token_usage`) are left out, as if missing.
        """
        if kind not in CHARGED_KINDS:
            return 0
        usage = token_usage(result)
        return sum(split_usage(usage)) if usage else 0

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Return the input estimate plus the output reservation for model calls."""
        if kind != "model_call" or not self.precheck_is_estimate:
            return None
        estimate = 0
        if self.estimator is not None:
            raw = self.estimator.estimate_input_tokens(payload)
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                # A negative estimate would lower the precheck and let an over-budget call run.
                raise ValueError(
                    f"{type(self.estimator).__name__}.estimate_input_tokens returned {raw!r}; "
                    "an estimate must be an int >= 0"
                )
            estimate = raw
        return estimate + self.reserved_output_tokens

    def __repr__(self) -> str:
        return (
            f"TokenMeter(estimator={self.estimator!r}, "
            f"reserved_output_tokens={self.reserved_output_tokens})"
        )


class WindowMeter:
    """A sliding rate window, enforced by every store (memory, SQLite, PostgreSQL, hashrope).

    At most ``limit`` may settle inside any ``window_seconds``. The amount comes from the wrapped
    meter: `TokenMeter` when ``name == "tokens"``, else `StepMeter` (so ``WindowMeter("requests",
    60, 60)`` allows 60 calls a minute). The window is also an ordinary meter: its charges appear
    under ``name`` in node charges and reports.

    Args:
        name: The window and meter name.
        limit: The most that may settle inside one window.
        window_seconds: The window length in seconds.
        meter: The meter whose charge feeds the window (default as above).
        scope: ``None`` (default) shares the window across every run of the store, so workers
            and runs draw on one rate limit; ``"run"`` keeps one window per run root; any other
            string names a shared window scope.
    """

    def __init__(
        self,
        name: str,
        limit: Amount | str,
        window_seconds: float,
        *,
        meter: Meter | None = None,
        scope: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("WindowMeter needs a non-empty name")
        self.name = name
        self.limit = to_decimal(limit)
        if self.limit <= 0:  # a zero window would refuse everything (pollard 0.8 refuses it too)
            raise ValueError(f"WindowMeter limit must be positive, got {limit!r}")
        if isinstance(window_seconds, bool) or not isinstance(window_seconds, (int, float)):
            raise TypeError("window_seconds must be a number")
        if not window_seconds > 0:
            raise ValueError("window_seconds must be > 0")
        self.window_seconds = window_seconds
        self.meter: Meter = (
            meter if meter is not None else (TokenMeter() if name == "tokens" else StepMeter(name))
        )
        self.scope = scope
        self.precheck_is_estimate = bool(getattr(self.meter, "precheck_is_estimate", False))

    def key(self, root_id: str) -> str:
        """Return the window's ledger key for a run rooted at ``root_id``."""
        scope = root_id if self.scope == "run" else (self.scope or "store")
        material = {"name": self.name, "scope": scope, "window_seconds": str(self.window_seconds)}
        return hashlib.sha256(b"pollard/v1:window\n" + canonical_bytes(material)).hexdigest()

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return the wrapped meter's charge."""
        return self.meter.charge(kind, payload, result, meta)

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Return the wrapped meter's estimate."""
        return self.meter.precheck_estimate(kind, payload)

    def __repr__(self) -> str:
        return (
            f"WindowMeter({self.name!r}, {self.limit}, {self.window_seconds}, "
            f"meter={self.meter!r}, scope={self.scope!r})"
        )


class CostMeter:
    """Charges US dollars from token usage and a price table (prices are data).

    ``prices`` maps a model name (``payload["model"]``) to per-million-token prices::

        CostMeter({"gpt-5.5": {"input_per_1m": "1.25", "output_per_1m": "10"}})

    Optional keys ``cache_read_per_1m`` and ``cache_write_per_1m`` price the cache fields (they
    default to the input price). Amounts are exact Decimals. A model call whose model has no price
    is refused before it runs (``ValueError`` from the precheck), unless ``default`` prices are set.

    Args:
        prices: Prices per model.
        default: Prices for models not in ``prices``.
        name: The meter name.
    """

    precheck_is_estimate = False

    def __init__(
        self,
        prices: Mapping[str, Mapping[str, Amount | str]],
        *,
        default: Mapping[str, Amount | str] | None = None,
        name: str = "usd",
    ) -> None:
        self.name = name
        self.prices = {model: self._table(model, table) for model, table in prices.items()}
        self.default = None if default is None else self._table("default", default)

    @staticmethod
    def _table(model: str, table: Mapping[str, Amount | str]) -> dict[str, Decimal]:
        known = {"input_per_1m", "output_per_1m", "cache_read_per_1m", "cache_write_per_1m"}
        unknown = set(table) - known
        if unknown:
            raise ValueError(f"unknown price keys for {model!r}: {sorted(unknown)}")
        if "input_per_1m" not in table or "output_per_1m" not in table:
            raise ValueError(f"prices for {model!r} need input_per_1m and output_per_1m")
        return {key: to_decimal(value) for key, value in table.items()}

    @staticmethod
    def from_genai_prices(*, provider_id: str | None = None, name: str = "usd") -> Meter:
        """Return a dollar meter priced by the genai-prices package (``pollard[prices]``).

        Args:
            provider_id: Restrict lookups to one genai-prices provider (e.g. ``"openai"``).
            name: The meter name.

        Raises:
            ImportError: Naming ``pip install "pollard[prices]"`` when genai-prices is missing.
        """
        from pollard.meters._prices import GenAIPricesCostMeter

        return GenAIPricesCostMeter(provider_id=provider_id, name=name)

    def _prices(self, payload: Any) -> dict[str, Decimal] | None:
        model = payload.get("model") if isinstance(payload, Mapping) else None
        if isinstance(model, str) and model in self.prices:
            return self.prices[model]
        return self.default

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return the dollar cost of a model call's reported usage."""
        if kind != "model_call":
            return 0
        prices = self._prices(payload)
        usage = token_usage(result)
        if prices is None or not usage:
            return 0
        per_input = prices["input_per_1m"]
        uncached, read, write, output = split_usage(usage)
        total = (
            uncached * per_input
            + output * prices["output_per_1m"]
            + read * prices.get("cache_read_per_1m", per_input)
            + write * prices.get("cache_write_per_1m", per_input)
        )
        return total / Decimal(1_000_000)

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Check that the model has a price (fail closed); no dollar estimate is made."""
        if kind == "model_call" and self._prices(payload) is None:
            model = payload.get("model") if isinstance(payload, Mapping) else None
            raise ValueError(
                f"CostMeter has no price for model {model!r}; add it to prices or set default="
            )
        return None

    def __repr__(self) -> str:
        return f"CostMeter({sorted(self.prices)!r}, name={self.name!r})"
