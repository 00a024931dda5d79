"""The ``--ledger`` options, parsed without importing pollard (it loads only with --ledger)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from decimal import Decimal

from .errors import CLIError
from .inputs import decimal_option

__all__ = ["LedgerOptions", "ledger_options"]


@dataclass(frozen=True)
class LedgerOptions:
    """The ``--ledger`` options of one command."""

    store: str
    label: str
    replay: bool
    max_usd: Decimal | None
    max_tokens: Decimal | None
    max_calls: Decimal | None

    @property
    def display(self) -> str:
        """The store as the command prints it: a PostgreSQL DSN never appears."""
        if self.store.startswith(("postgresql://", "postgres://")):
            _, _, store_id = self.store.rpartition("#")
            return f"postgresql#{store_id or 'default'}"
        return self.store


def ledger_options(args: argparse.Namespace, default_label: str) -> LedgerOptions | None:
    """The ledger options, or None without ``--ledger``.

    Raises:
        CLIError: A budget or ``--replay`` without ``--ledger``, or a malformed limit.
    """
    limits = {
        "--max-usd": args.max_usd,
        "--max-tokens": args.max_tokens,
        "--max-calls": args.max_calls,
    }
    if args.ledger is None:
        given = [name for name, value in limits.items() if value is not None]
        if args.replay:
            given.append("--replay")
        if args.label is not None:
            given.append("--label")
        if given:
            raise CLIError(
                f"{', '.join(given)} needs --ledger",
                hint="pass --ledger runs.db to govern the calls in a pollard ledger",
            )
        return None
    if args.replay and any(value is not None for value in limits.values()):
        raise CLIError(
            "--replay spends nothing, so it takes no budget",
            hint="drop --max-usd/--max-tokens/--max-calls, or drop --replay to record",
        )
    parsed = {
        name: None if value is None else decimal_option(value, name)
        for name, value in limits.items()
    }
    return LedgerOptions(
        store=_store_target(args.ledger),
        label=args.label or default_label,
        replay=bool(args.replay),
        max_usd=parsed["--max-usd"],
        max_tokens=parsed["--max-tokens"],
        max_calls=parsed["--max-calls"],
    )


def _store_target(text: str) -> str:
    """A SQLite path or a ``postgresql://`` DSN; ``pg-env:VAR#id`` reads the DSN from VAR."""
    if not text:
        raise CLIError("--ledger needs a store", hint="pass --ledger runs.db")
    if text.startswith("pg-env:"):
        var, _, store_id = text[len("pg-env:") :].partition("#")
        dsn = os.environ.get(var, "")
        if not dsn:
            raise CLIError(
                f"--ledger {text}: environment variable {var or '?'} is not set",
                hint="export the PostgreSQL DSN in that variable",
            )
        return f"{dsn}#{store_id or 'default'}"
    return text
