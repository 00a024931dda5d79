"""Ledger values and the one admission rule every store applies.

The value classes are plain slotted dataclasses (not frozen: they are built on every step, and
frozen construction is several times slower); treat them as immutable.

The ledger keeps a running total per ``(scope, meter)``, updated in the same transaction as the
node write that carries the charge, so checking a budget is a key lookup, not a tree walk. A *scope*
is the id of the node a budget is anchored at: the run root, or a branch anchor with its own budget.

Admission rule (identical on every store; see `judge`):

* ``settled`` is the scope's running total, ``active`` the sum of unexpired reservations.
* Refuse when the meter is exhausted: ``settled >= limit``.
* Refuse when a positive request does not fit: ``requested > limit - settled - active``.
* Otherwise reserve ``requested`` (when positive) under a lease until the step settles.

Windows use the same rule with ``settled`` = the sum of events inside the sliding window.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

__all__ = [
    "Admission",
    "BudgetClaim",
    "Shortfall",
    "WindowClaim",
    "WindowEvent",
    "active_totals",
    "admit",
    "decimal_text",
    "held_amounts",
    "in_range",
    "judge",
    "to_decimal",
    "utc_now_iso",
]

ZERO = Decimal(0)


#: Amounts pollard keeps: below 10**31 in magnitude, and (when not zero) at least 10**-60. A
#: stored or configured ``1e999999999`` is finite, yet adding to it raises ``decimal.Overflow``
#: and turning it into an int (every report does) computes a billion-digit number.
MAX_ADJUSTED = 30
MIN_ADJUSTED = -60
_INT_BOUND = 10 ** (MAX_ADJUSTED + 1)


def in_range(amount: Decimal) -> bool:
    """Whether a finite Decimal is within the amounts pollard keeps (see `MAX_ADJUSTED`)."""
    return not amount or MIN_ADJUSTED <= amount.adjusted() <= MAX_ADJUSTED


def to_decimal(value: object) -> Decimal:
    """Convert a charge, limit or stored amount to an exact Decimal.

    ints and Decimals are exact; floats go through ``repr`` (``0.1`` becomes ``Decimal("0.1")``, not
    its binary expansion); numeric strings are parsed. bools, NaN and infinities are rejected,
    and so are amounts of 10**31 or more in magnitude or nonzero below 10**-60.

    Raises:
        TypeError: For bools and non-numeric types.
        ValueError: For NaN, infinities, amounts out of range or unparsable strings.
    """
    if type(value) is int:
        if -_INT_BOUND < value < _INT_BOUND:
            return Decimal(value)
        raise ValueError(f"{_short(value)} is too large an amount (the most is below 1e31)")
    if isinstance(value, bool):
        raise TypeError("a bool is not an amount")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, float):
        result = Decimal(repr(value))
    elif isinstance(value, str):
        try:
            result = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"{value!r:.80} is not a decimal amount") from None
    else:
        raise TypeError(f"{type(value).__name__} is not an amount")
    if not result.is_finite():
        raise ValueError(f"{value!r} is not a finite amount")
    if not in_range(result):
        raise ValueError(
            f"{_short(value)} is out of range for an amount (below 1e31, and not below 1e-60 "
            "unless zero)"
        )
    return result


def _short(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_BOUND:
        # str() of an int over 4,300 digits raises; its size is what matters here.
        return f"an integer of about {value.bit_length() * 0.30103:,.0f} digits"
    return f"{value!r:.80}"


def decimal_text(value: Decimal) -> str:
    """Return the exact, stable text of a Decimal: ``"12"``, ``"0.0025"``, ``"-3"`` (no exponent).

    Trailing fractional zeros are dropped so equal amounts have one text (``"3.0"`` is ``"3"``).
    """
    if value == value.to_integral_value():
        return str(int(value))
    text = format(value.normalize(), "f")
    return text


_second_cache: list[Any] = [-1, ""]


def utc_now_iso() -> str:
    """Return the current UTC time as ISO 8601 with microseconds and a ``Z`` suffix."""
    now = time.time()
    second = int(now)
    cache = _second_cache
    if cache[0] != second:  # formatting the date part once per second keeps this cheap
        stamp = _dt.datetime.fromtimestamp(second, _dt.timezone.utc)
        cache[1] = stamp.strftime("%Y-%m-%dT%H:%M:%S")
        cache[0] = second
    return f"{cache[1]}.{int((now - second) * 1_000_000):06d}Z"


@dataclass(slots=True)
class BudgetClaim:
    """A request to check (and reserve) an amount against one scope's limit for one meter.

    Attributes:
        scope: The scope id (a run root or a branch anchor).
        meter: The meter name.
        limit: The limit for this meter in this scope.
        amount: The amount to reserve, or ``None`` when the meter has no precheck estimate (then
            only the exhaustion rule applies).
        approximate: Whether ``amount`` is an estimate rather than an exact figure.
    """

    scope: str
    meter: str
    limit: Decimal
    amount: Decimal | None = None
    approximate: bool = False


@dataclass(slots=True)
class WindowClaim:
    """A request to check (and reserve) an amount against a sliding rate window.

    Attributes:
        key: The window's ledger key (see ``WindowMeter.key``).
        meter: The window meter's name.
        limit: The most that may settle inside any window.
        window_seconds: The window length.
        amount: The amount to reserve, or ``None`` without an estimate.
        approximate: Whether ``amount`` is an estimate.
    """

    key: str
    meter: str
    limit: Decimal
    window_seconds: float
    amount: Decimal | None = None
    approximate: bool = False


@dataclass(slots=True)
class WindowEvent:
    """An amount settled into a window (stamped with the store's clock at commit)."""

    key: str
    meter: str
    amount: Decimal


@dataclass(slots=True)
class Shortfall:
    """Why a claim was refused.

    Attributes:
        reason: ``"budget"`` or ``"window"``.
        scope: The scope id or the window key.
        meter: The meter name.
        requested: The amount requested (``0`` when the meter was simply exhausted).
        remaining: ``limit - settled - active`` (may be negative).
        limit: The limit.
        spent: The settled amount (inside the window for windows).
        approximate: Whether ``requested`` was an estimate.
        window_seconds: The window length for window refusals.
    """

    reason: Literal["budget", "window"]
    scope: str
    meter: str
    requested: Decimal
    remaining: Decimal
    limit: Decimal
    spent: Decimal
    approximate: bool = False
    window_seconds: float | None = None


@dataclass(slots=True)
class Admission:
    """The answer to a reservation request: a reservation id, or a shortfall.

    Attributes:
        reservation_id: Set when something was reserved (release or settle it); ``None`` when
            nothing needed reserving or the claim was refused.
        shortfall: The first refused claim, or ``None`` when admitted.
    """

    reservation_id: str | None = None
    shortfall: Shortfall | None = None

    @property
    def ok(self) -> bool:
        """True when the claims were admitted."""
        return self.shortfall is None


def judge(claim: BudgetClaim | WindowClaim, settled: Decimal, active: Decimal) -> Shortfall | None:
    """Apply the admission rule to one claim (pure; every store calls this).

    Args:
        claim: The claim.
        settled: The settled total (inside the window for window claims).
        active: The sum of unexpired reservations against the same scope/window and meter.

    Returns:
        ``None`` when admitted, else the shortfall.
    """
    amount = claim.amount
    requested = amount if amount is not None and amount > 0 else ZERO
    if settled < claim.limit and (not requested or requested <= claim.limit - settled - active):
        return None
    available = claim.limit - settled - active
    if settled >= claim.limit or (requested > 0 and requested > available):
        if isinstance(claim, WindowClaim):
            return Shortfall(
                "window",
                claim.key,
                claim.meter,
                requested,
                available,
                claim.limit,
                settled,
                claim.approximate,
                claim.window_seconds,
            )
        return Shortfall(
            "budget",
            claim.scope,
            claim.meter,
            requested,
            available,
            claim.limit,
            settled,
            claim.approximate,
        )
    return None


# One amount a reservation holds: ("b", scope, meter, amount) or ("w", key, meter, amount).
Held = tuple[str, str, str, Decimal]


def held_amounts(claims: Sequence[BudgetClaim], windows: Sequence[WindowClaim]) -> list[Held]:
    """The positive amounts a reservation for these claims holds (the same on every store)."""
    held: list[Held] = [
        ("b", c.scope, c.meter, c.amount) for c in claims if c.amount is not None and c.amount > 0
    ]
    held += [
        ("w", w.key, w.meter, w.amount) for w in windows if w.amount is not None and w.amount > 0
    ]
    return held


def active_totals(reservations: Iterable[Iterable[Held]]) -> dict[tuple[str, str, str], Decimal]:
    """Sum the unexpired reservations' held amounts per ``(kind, key, meter)``."""
    active: dict[tuple[str, str, str], Decimal] = {}
    for held in reservations:
        for kind, key, meter, amount in held:
            slot = (kind, key, meter)
            active[slot] = active.get(slot, ZERO) + amount
    return active


def admit(
    claims: Sequence[BudgetClaim],
    windows: Sequence[WindowClaim],
    *,
    settled: Callable[[BudgetClaim], Decimal],
    window_settled: Callable[[WindowClaim], Decimal],
    active: Mapping[tuple[str, str, str], Decimal],
) -> Shortfall | None:
    """The admission rule over one request, as every store applies it (memory and SQL alike).

    Budget claims are judged first, then windows, each against its settled amount and the
    unexpired reservations on the same ``(scope or key, meter)``.

    Args:
        claims: The budget claims.
        windows: The window claims.
        settled: The settled total of a claim's scope and meter.
        window_settled: The amount settled inside a window claim's window.
        active: Unexpired held amounts from `active_totals`.

    Returns:
        The first shortfall, or ``None`` when every claim fits (then hold `held_amounts`).
    """
    for claim in claims:
        short = judge(claim, settled(claim), active.get(("b", claim.scope, claim.meter), ZERO))
        if short is not None:
            return short
    for window in windows:
        short = judge(
            window, window_settled(window), active.get(("w", window.key, window.meter), ZERO)
        )
        if short is not None:
            return short
    return None


def add_charges(totals: dict[str, Decimal], charges: Mapping[str, Decimal]) -> None:
    """Add ``charges`` into ``totals`` in place."""
    for meter, amount in charges.items():
        totals[meter] = totals.get(meter, ZERO) + amount
