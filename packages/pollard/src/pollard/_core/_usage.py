"""Which token counts in a result's ``usage`` pollard can charge, and which it cannot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_TOKEN_COUNT", "TOKEN_FIELDS", "unusable_counts", "usable_count"]

TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "reasoning_tokens",
)
"""The usage fields the token and cost meters read."""

MAX_TOKEN_COUNT = 2**63 - 1
"""The largest count charged: a signed 64-bit integer, what providers and SQL stores hold.

A larger figure is no token count (and would make the ledger's Decimal sums inexact), so it is
treated like a missing one.
"""


def usable_count(value: object) -> int | None:
    """Return ``value`` as a chargeable token count, or None when it is absent or unusable.

    A count is an int (not a bool) from 0 to `MAX_TOKEN_COUNT`. Strings, floats (even ``3.0``),
    bools, negative and larger ints are not: charging them would read a string or a float as 0 and
    let a negative count refund a budget.
    """
    if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
        count = int(value)
        if 0 <= count <= MAX_TOKEN_COUNT:
            return count
    return None


def unusable_counts(usage: Mapping[str, Any]) -> dict[str, str]:
    """Return ``{field: what it holds}`` for each token field present in ``usage`` but unusable.

    ``None`` counts as absent (providers report it for a breakdown they do not have). The
    description is the value's type name (``"str"``, ``"float"``, ``"bool"``), or ``"negative
    int"`` / ``"int above 2**63-1"`` for an int out of range.
    """
    out: dict[str, str] = {}
    for key in TOKEN_FIELDS:
        value = usage.get(key)
        if value is None or usable_count(value) is not None:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = "negative int" if value < 0 else "int above 2**63-1"
        else:
            out[key] = type(value).__name__
    return out
