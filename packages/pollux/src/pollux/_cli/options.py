"""The ``--ledger`` options, parsed without importing pollard (it loads only with --ledger)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from decimal import Decimal

from .errors import CLIError
from .inputs import decimal_option

__all__ = ["LedgerOptions", "collect_ledger_options", "ledger_options"]


@dataclass(frozen=True)
class LedgerOptions:
    """The ``--ledger`` options of one command."""

    store: str = field(repr=False)  # may hold a DSN with a password: never printed
    display: str
    label: str
    replay: bool
    max_usd: Decimal | None
    max_tokens: Decimal | None
    max_calls: Decimal | None


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
    store, display = _store_target(args.ledger)
    return LedgerOptions(
        store=store,
        display=display,
        label=args.label or default_label,
        replay=bool(args.replay),
        max_usd=parsed["--max-usd"],
        max_tokens=parsed["--max-tokens"],
        max_calls=parsed["--max-calls"],
    )


def collect_ledger_options(args: argparse.Namespace, label: str) -> LedgerOptions | None:
    """The ledger options of ``pollux collect`` (no budget: collecting settles, it never spends).

    Raises:
        CLIError: ``--replay`` without ``--ledger``, or an empty store.
    """
    if args.ledger is None:
        if args.replay:
            raise CLIError(
                "--replay needs --ledger",
                hint="pass --ledger runs.db, the ledger the job was collected into",
            )
        return None
    store, display = _store_target(args.ledger)
    return LedgerOptions(
        store=store,
        display=display,
        label=label,
        replay=bool(args.replay),
        max_usd=None,
        max_tokens=None,
        max_calls=None,
    )


_PG_SCHEMES = ("postgresql://", "postgres://")


def _store_target(text: str) -> tuple[str, str]:
    """The store pollard opens and how the command names it (a DSN is never shown).

    A SQLite path or a ``postgresql://`` DSN is passed on; ``pg-env:VAR#id`` reads the DSN from
    the environment variable VAR, so it stays out of shell history and process listings.
    """
    if not text:
        raise CLIError("--ledger needs a store", hint="pass --ledger runs.db")
    if text.startswith("pg-env:"):
        var, _, store_id = text[len("pg-env:") :].partition("#")
        store_id = store_id or "default"
        dsn = os.environ.get(var, "") if var else ""
        if not dsn:
            raise CLIError(
                f"--ledger {text}: environment variable {var or '?'} is not set",
                hint="export the PostgreSQL DSN (postgresql://...) in that variable",
            )
        if not dsn.startswith(_PG_SCHEMES):
            raise CLIError(
                f"--ledger {text}: {var} does not hold a postgresql:// DSN",
                hint="write the DSN as postgresql://user@host/db",
            )
        return f"{dsn}#{store_id}", f"pg-env:{var}#{store_id}"
    if text.startswith(_PG_SCHEMES):
        _, sep, store_id = text.rpartition("#")
        return text, f"postgresql#{store_id if sep and store_id else 'default'}"
    return text, text
