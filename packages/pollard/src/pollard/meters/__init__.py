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
from pollard.meters._prices import PRICE_PROVIDERS, genai_price, priced_models
from pollard.meters._tokenmaster import TokenmasterMeter

__all__ = [
    "CHARGED_KINDS",
    "PRICE_PROVIDERS",
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
    "cache_economics_meta",
    "genai_price",
    "output_cap",
    "priced_models",
    "provider_cost",
    "split_usage",
    "split_writes",
    "token_usage",
    "worst_case_usage",
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


def split_writes(usage: Mapping[str, int]) -> tuple[int, int]:
    """Return the cache writes as ``(5-minute class, 1-hour class)``, counting each token once.

    ``cache_write_1h_tokens`` is the 1-hour part of the total (``cache_write_tokens``, or
    Anthropic's raw ``cache_creation_input_tokens``); everything else is priced as the 5-minute
    class, which is every write when no split is reported (the shorter, cheaper TTL is the
    provider default).
    """
    _, _, write, _ = split_usage(usage)
    long = min(usage.get("cache_write_1h_tokens", 0), write)
    return write - long, long


def provider_cost(result: Any) -> Decimal | None:
    """The provider's own dollar price of a call (``result["usage"]["provider_cost_usd"]``).

    OpenRouter reports what it billed (``usage.cost``); the pollux bridge records it as exact
    text. A cost meter charges it instead of its computed price. Anything that is not a finite
    amount >= 0 is ignored (the computed price stands).
    """
    usage = result.get("usage") if isinstance(result, Mapping) else None
    value = usage.get("provider_cost_usd") if isinstance(usage, Mapping) else None
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int, Decimal)):
        return None
    try:
        amount = Decimal(value)
    except ArithmeticError:
        return None
    return amount if amount.is_finite() and amount >= 0 else None


def cache_economics_meta(
    name: str, result: Any, computed: Decimal | None, no_cache: Decimal | None
) -> dict[str, str] | None:
    """The node meta a cost meter adds: its computed price and the cache's saving, as text.

    ``"<name>_computed"`` is the computed price when the provider's own price was charged (both
    are kept); ``"<name>_cache_saved"`` is the same call's price with no cache (every prompt
    token at the input rate) less the computed price, present when the call read or wrote a
    cache. ``pollard report`` sums the savings per run.
    """
    out: dict[str, str] = {}
    if computed is not None and provider_cost(result) is not None:
        out[f"{name}_computed"] = str(computed)
    usage = token_usage(result) or {}
    _, read, write, _ = split_usage(usage)
    if computed is not None and no_cache is not None and (read or write):
        out[f"{name}_cache_saved"] = str(no_cache - computed)
    return out or None


def token_usage(result: Any) -> dict[str, int] | None:
    """Return the usable token counts of ``result["usage"]``, or None when there is no usage.

    A count is usable when it is an int from 0 to ``2**63 - 1`` (not a bool). Any other value (a
    string, a float, a bool, a negative or larger int) is left out, so it is charged like a
    missing count; the runtime names such fields in ``node.meta["usage_invalid"]`` and marks a
    model call ``usage_missing``.
    """
    if type(result) is not dict and not isinstance(result, Mapping):  # a dict: no ABC check
        return None
    usage = result.get("usage")
    if type(usage) is not dict and not isinstance(usage, Mapping):
        return None
    fields: dict[str, int] = {}
    for key in TOKEN_FIELDS:
        value = usage.get(key)
        if value is None:  # absent (most fields of most answers): no call
            continue
        count = usable_count(value)
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


_CAP_KEYS = ("max_tokens", "max_output_tokens", "max_completion_tokens")


def output_cap(payload: Any) -> int | None:
    """Return the output-token cap a model-call payload states, or None when it states none.

    Read from the payload's top level (``max_tokens``, ``max_output_tokens``,
    ``max_completion_tokens``: the Anthropic, OpenAI Responses and Chat Completions names) or
    from ``payload["requirements"]["max_tokens"]`` (the pollux bridge's identity payload).
    """
    # ``type(...) is dict`` first: a plain dict (every payload the runtime records) skips the
    # ABC's Python-level ``__instancecheck__``.
    if type(payload) is not dict and not isinstance(payload, Mapping):
        return None
    places: list[Mapping[str, Any]] = [payload]
    nested = payload.get("requirements")
    if isinstance(nested, Mapping):
        places.append(nested)
    for place in places:
        for key in _CAP_KEYS:
            value = usable_count(place.get(key))
            if value is not None:
                return value
    return None


def worst_case_usage(
    estimator: TokenEstimator | None, default_cap: int, payload: Any
) -> dict[str, int] | None:
    """The most usage a model call may report: input estimate plus its output cap.

    The cap is the payload's own (`output_cap`), else ``default_cap`` when it is positive; None
    when there is no estimator or no cap (the worst case cannot be bounded).
    """
    if estimator is None:
        return None
    estimate = input_estimate(estimator, payload)  # checked even when the call is unbounded
    cap = output_cap(payload)
    if cap is None:
        if default_cap <= 0:
            return None
        cap = default_cap
    return {"input_tokens": estimate, "output_tokens": cap}


def input_estimate(estimator: TokenEstimator, payload: Any) -> int:
    """Return ``estimator.estimate_input_tokens(payload)``, checked to be an int >= 0.

    Raises:
        ValueError: For anything else (a negative estimate would lower the hold and let an
            over-budget call run).
    """
    raw = estimator.estimate_input_tokens(payload)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError(
            f"{type(estimator).__name__}.estimate_input_tokens returned {raw!r}; "
            "an estimate must be an int >= 0"
        )
    return raw


_UNBOUNDED_HINT = (
    "pass max_tokens (the call's output cap), or give the meter a default cap with "
    "reserved_output_tokens=N; estimated=True keeps an estimated (soft) budget instead"
)


class TokenMeter:
    """Charges the tokens a call reports in ``result["usage"]``.

    The charge is every input and output token once: ``input_tokens + output_tokens``, plus
    ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` when usage reports them beside
    an input count that excludes them (Anthropic's raw shape; see `split_usage`).

    With an estimator the meter is **hard** (``hard = True``): a model call is admitted against
    its worst case, ``estimate_input_tokens(payload)`` plus its output cap (the payload's
    ``max_tokens`` / ``max_output_tokens`` / ``max_completion_tokens``, see `output_cap`, else
    ``reserved_output_tokens`` as the default cap), held until the call settles at its actual
    usage, so concurrent calls cannot overspend a token budget together. A call with no cap at
    all cannot be bounded: a token budget refuses it (recorded, with a hint) rather than admit
    it unreserved. ``estimated=True`` keeps the estimated (soft) precheck instead: the input
    estimate plus ``reserved_output_tokens``, admitted even without a cap. Without an estimator
    a token budget refuses only once it is spent (a soft budget).

    Args:
        estimator: An object with ``estimate_input_tokens(payload) -> int``, or None.
        reserved_output_tokens: The default output cap (hard) or the output reservation added to
            the input estimate (``estimated=True``).
        name: The meter name.
        estimated: Keep the estimated (soft) precheck instead of the worst case.
    """

    unbounded_hint = _UNBOUNDED_HINT

    def __init__(
        self,
        estimator: TokenEstimator | None = None,
        *,
        reserved_output_tokens: int = 0,
        name: str = "tokens",
        estimated: bool = False,
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
        self.estimated = bool(estimated)
        self.hard = estimator is not None and not self.estimated
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
        """Return what a step holds at admission: its worst case (hard) or the estimate.

        A hard meter returns None for a model call whose worst case cannot be bounded (no
        output cap), and 0 for other kinds (they report no tokens of their own).
        """
        if self.hard:
            if kind != "model_call":
                return 0
            worst = worst_case_usage(self.estimator, self.reserved_output_tokens, payload)
            return None if worst is None else worst["input_tokens"] + worst["output_tokens"]
        if kind != "model_call" or not self.precheck_is_estimate:
            return None
        estimate = 0
        if self.estimator is not None:
            estimate = input_estimate(self.estimator, payload)
        return estimate + self.reserved_output_tokens

    def __repr__(self) -> str:
        extra = ", estimated=True" if self.estimated else ""
        return (
            f"TokenMeter(estimator={self.estimator!r}, "
            f"reserved_output_tokens={self.reserved_output_tokens}{extra})"
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
    default to the input price); ``cache_write_1h_per_1m`` prices the 1-hour part of the writes
    (``cache_write_1h_tokens``, see `split_writes`; it defaults to ``cache_write_per_1m``).
    When the result carries the provider's own price (`provider_cost`, OpenRouter's
    ``usage.cost``) that is charged instead, and the computed price is kept in the node meta as
    ``"<name>_computed"``. Amounts are exact Decimals. A model call whose model has no price
    is refused before it runs (``ValueError`` from the precheck), unless ``default`` prices are set.

    With an ``estimator`` the meter is **hard**, as `TokenMeter` is: a model call is admitted
    against its priced worst case (the input estimate at the dearest input price, plus its output
    cap at the output price) and settled at its actual cost; a call with no output cap is refused
    under a ``usd`` budget. Without one (or with ``estimated=True``) a dollar budget refuses once
    it is spent (a soft budget).

    Args:
        prices: Prices per model.
        default: Prices for models not in ``prices``.
        name: The meter name.
        estimator: Input-token estimator for the worst case (see `TokenMeter`), or None.
        reserved_output_tokens: The default output cap for calls that state none.
        estimated: Keep the soft budget even with an estimator.

    Raises:
        ValueError: Unknown or missing price keys, or a price that is negative, not finite or
            out of range.
        TypeError: A price that is not a number.
    """

    unbounded_hint = _UNBOUNDED_HINT

    def __init__(
        self,
        prices: Mapping[str, Mapping[str, Amount | str]],
        *,
        default: Mapping[str, Amount | str] | None = None,
        name: str = "usd",
        estimator: TokenEstimator | None = None,
        reserved_output_tokens: int = 0,
        estimated: bool = False,
    ) -> None:
        self.name = name
        self.prices = {model: self._table(model, table) for model, table in prices.items()}
        self.default = None if default is None else self._table("default", default)
        # The worst case is priced by the token meter's rule; it validates the arguments.
        self._tokens = TokenMeter(
            estimator, reserved_output_tokens=reserved_output_tokens, estimated=estimated
        )
        self.hard = self._tokens.hard
        self.precheck_is_estimate = self.hard

    @staticmethod
    def _table(model: str, table: Mapping[str, Amount | str]) -> dict[str, Decimal]:
        known = {
            "input_per_1m",
            "output_per_1m",
            "cache_read_per_1m",
            "cache_write_per_1m",
            "cache_write_1h_per_1m",
        }
        unknown = set(table) - known
        if unknown:
            raise ValueError(f"unknown price keys for {model!r}: {sorted(unknown)}")
        if "input_per_1m" not in table or "output_per_1m" not in table:
            raise ValueError(f"prices for {model!r} need input_per_1m and output_per_1m")
        prices: dict[str, Decimal] = {}
        for key, value in table.items():
            try:
                price = to_decimal(value)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"price {key} for {model!r}: {exc}") from None
            if price < 0:
                # A negative price would credit the budget with every call it charges.
                raise ValueError(f"price {key} for {model!r} must be >= 0, got {value!r}")
            prices[key] = price
        return prices

    @staticmethod
    def from_genai_prices(
        *,
        provider_id: str | None = None,
        name: str = "usd",
        estimator: TokenEstimator | None = None,
        reserved_output_tokens: int = 0,
        estimated: bool = False,
    ) -> Meter:
        """Return a dollar meter priced by the genai-prices package (``pollard[prices]``).

        With an ``estimator`` it is **hard**, as a `CostMeter` with one is: each model call
        holds its priced worst case (the input estimate at the model's dearest input rate plus
        its output cap at the output rate) until it settles at its actual cost, and a call with
        no output cap is refused under a dollar budget (``BudgetExceeded(reason="unbounded")``).
        Without one, or with ``estimated=True``, a dollar budget refuses once it is spent.

        Args:
            provider_id: Restrict lookups to one genai-prices provider (e.g. ``"openai"``).
            name: The meter name.
            estimator: Input-token estimator for the worst case (see `TokenMeter`), or None.
            reserved_output_tokens: The default output cap for calls that state none.
            estimated: Keep the estimated (soft) budget even with an estimator.

        Raises:
            ImportError: Naming ``pip install "pollard[prices]"`` when genai-prices is missing.
        """
        from pollard.meters._prices import GenAIPricesCostMeter

        return GenAIPricesCostMeter(
            provider_id=provider_id,
            name=name,
            estimator=estimator,
            reserved_output_tokens=reserved_output_tokens,
            estimated=estimated,
        )

    def _prices(self, payload: Any) -> dict[str, Decimal] | None:
        model = payload.get("model") if isinstance(payload, Mapping) else None
        if isinstance(model, str) and model in self.prices:
            return self.prices[model]
        return self.default

    def _computed(self, payload: Any, result: Any) -> Decimal | None:
        prices = self._prices(payload)
        usage = token_usage(result)
        if prices is None or not usage:
            return None
        per_input = prices["input_per_1m"]
        per_write = prices.get("cache_write_per_1m", per_input)
        uncached, read, _, output = split_usage(usage)
        short, long = split_writes(usage)
        total = (
            uncached * per_input
            + output * prices["output_per_1m"]
            + read * prices.get("cache_read_per_1m", per_input)
            + short * per_write
            + long * prices.get("cache_write_1h_per_1m", per_write)
        )
        return total / Decimal(1_000_000)

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return the dollar cost of a model call: the provider's own price, else computed."""
        if kind != "model_call":
            return 0
        billed = provider_cost(result)
        if billed is not None:
            return billed
        computed = self._computed(payload, result)
        return 0 if computed is None else computed

    def _no_cache(self, payload: Any, result: Any) -> Decimal | None:
        prices = self._prices(payload)
        usage = token_usage(result)
        if prices is None or not usage:
            return None
        uncached, read, write, output = split_usage(usage)
        total = (uncached + read + write) * prices["input_per_1m"]
        return (total + output * prices["output_per_1m"]) / Decimal(1_000_000)

    def settle_meta(
        self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """Keep the computed price and what the cache saved (see `cache_economics_meta`)."""
        if kind != "model_call":
            return None
        return cache_economics_meta(
            self.name,
            result,
            self._computed(payload, result),
            self._no_cache(payload, result),
        )

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Check that the model has a price (fail closed); a hard meter prices the worst case.

        A hard meter returns None for a model call whose worst case cannot be bounded, and 0
        for other kinds; a soft one makes no dollar estimate (None).
        """
        if kind != "model_call":
            return 0 if self.hard else None
        prices = self._prices(payload)
        if prices is None:
            model = payload.get("model") if isinstance(payload, Mapping) else None
            raise ValueError(
                f"CostMeter has no price for model {model!r}; add it to prices or set default="
            )
        if not self.hard:
            return None
        tokens = self._tokens
        worst = worst_case_usage(tokens.estimator, tokens.reserved_output_tokens, payload)
        if worst is None:
            return None
        # Whichever way the provider bills the input (fresh, cache read, cache write), the
        # dearest of those prices bounds it.
        per_write = prices.get("cache_write_per_1m", prices["input_per_1m"])
        per_input = max(
            prices["input_per_1m"],
            prices.get("cache_read_per_1m", prices["input_per_1m"]),
            per_write,
            prices.get("cache_write_1h_per_1m", per_write),
        )
        total = worst["input_tokens"] * per_input + worst["output_tokens"] * prices["output_per_1m"]
        return total / Decimal(1_000_000)

    def __repr__(self) -> str:
        return f"CostMeter({sorted(self.prices)!r}, name={self.name!r})"
