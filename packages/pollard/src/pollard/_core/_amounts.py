"""Amounts as users read them: plain numbers outside the ledger, exact Decimals inside it.

The ledger adds Decimals, so money never drifts. Every public read (``node.meta["charges"]``,
``run.report()``, CLI JSON) gives plain JSON numbers instead, so users can compare, sum and
serialize them: an ``int`` when the amount is integral, else a ``float``.

A float cannot hold every decimal exactly. When an amount's float does not read back as the same
Decimal (``Decimal(repr(x)) != amount``), the node meta also carries the exact text under
``meta["charges_exact"]`` (only for those meters), so an audit (`recompute_charges`, `verify`,
`merge`) still sums exactly what the ledger settled. `read_charges` is the one reader: it accepts
the numbers, the exact texts, and the decimal strings of stores written before this format.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pollard._core._ledger import decimal_text, to_decimal

__all__ = ["charges_meta", "exact_map", "plain", "plain_map", "read_charges"]

Number = int | float


def plain(value: Decimal) -> Number:
    """Return ``value`` as an ``int`` when integral, else as the nearest ``float``."""
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def plain_map(values: Mapping[str, Decimal]) -> dict[str, Number]:
    """Plain numbers by meter, keys sorted."""
    return {name: plain(values[name]) for name in sorted(values)}


def exact_map(values: Mapping[str, Decimal]) -> dict[str, str]:
    """Exact decimal texts by meter, keys sorted (the audit form)."""
    return {name: decimal_text(values[name]) for name in sorted(values)}


def charges_meta(
    amounts: Mapping[str, Decimal], key: str = "charges", *, patch: bool = False
) -> dict[str, Any]:
    """The meta entries recording ``amounts``: ``key`` and, when needed, ``key + "_exact"``.

    With ``patch`` (a shallow `Store.update_meta` patch) the exact entry is always present,
    ``None`` when every number is exact, so it also clears an exact form an earlier patch left.
    """
    numbers: dict[str, Number] = {}
    exact: dict[str, str] = {}
    for name, amount in amounts.items():
        whole = int(amount)
        if whole == amount:
            numbers[name] = whole
            continue
        number = float(amount)
        numbers[name] = number
        # A decimal of at most 15 significant digits survives the float round trip (a double
        # carries 15.9); only longer ones need the (slower) check and perhaps the exact text.
        if len(amount.as_tuple().digits) > 15 and Decimal(repr(number)) != amount:
            exact[name] = decimal_text(amount)
    if exact or patch:
        return {key: numbers, key + "_exact": exact or None}
    return {key: numbers}


def read_charges(meta: Mapping[str, Any], key: str = "charges") -> dict[str, Decimal]:
    """The exact amounts recorded in ``meta[key]`` (numbers, exact texts or legacy strings).

    Entries that are not amounts are skipped, so a hand-edited or foreign record never breaks a
    read; zero amounts are kept as recorded.
    """
    raw = meta.get(key)
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, Decimal] = {}
    for name, amount in raw.items():
        try:
            out[str(name)] = to_decimal(amount)
        except (TypeError, ValueError):
            continue
    exact = meta.get(key + "_exact")
    if isinstance(exact, Mapping):
        for name, text in exact.items():
            try:
                out[str(name)] = to_decimal(text)
            except (TypeError, ValueError):
                continue
    return out
