"""What the cache-storage bills read from a run's ledger."""

from __future__ import annotations

from decimal import Decimal

from pollard import AsyncRun, Node


def notes(run: AsyncRun, kind: str) -> list[Node]:
    """The run's nodes whose payload is pollux's ``kind`` record (a cache event, ...)."""
    return [n for n in run.store.walk(run.root_id) if n.payload.get("pollux") == kind]


def usd(run: AsyncRun) -> Decimal:
    """The run's exact dollar spend, from the ledger."""
    return Decimal(run.report(exact=True)["spent"].get("usd", 0))
