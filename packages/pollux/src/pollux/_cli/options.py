"""The ``--ledger`` options, parsed without importing pollard (it loads only with --ledger)."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from pollux.errors import ConfigurationError

from .errors import CLIError
from .inputs import decimal_option, regular_file, whole_number_option

if TYPE_CHECKING:
    from pollux.quota import CallQuota

__all__ = ["LedgerOptions", "collect_ledger_options", "ledger_options", "quota_from"]


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
        name: None if value is None else _limit(name, value) for name, value in limits.items()
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
        if not dsn.startswith(_PG_SCHEMES) and _keyword_dsn_label(dsn) is None:
            raise CLIError(
                f"--ledger {text}: {var} does not hold a postgresql:// DSN",
                hint="write the DSN as postgresql://user@host/db",
            )
        return f"{dsn}#{store_id}", f"pg-env:{var}#{store_id}"
    if text.startswith(_PG_SCHEMES):
        _, sep, store_id = text.rpartition("#")
        return text, f"postgresql#{store_id if sep and store_id else 'default'}"
    keyword = _keyword_dsn_label(text)
    if keyword is not None:
        return text, keyword  # ``host=db password=...``: shown by its store id, never its text
    # A URL's user and password (``redis://:secret@host/0``) are never shown.
    return text, re.sub(r"(?<=://)[^/@\s]+@", "***@", text)


def _keyword_dsn_label(text: str) -> str | None:
    """``postgresql#store_id`` for a libpq keyword DSN (pollard's reading of it), else None."""
    if "=" not in text or "://" in text:
        return None
    try:
        from .ledger import keyword_dsn_label
    except ImportError:  # no pollard: the store cannot open either, and says so
        return "postgresql#?"
    return keyword_dsn_label(text)


# What each count option is usually given: the hint of a value it refuses.
def _number(text: str) -> Decimal:
    """``text`` as a Decimal; NaN when it is not a number (refused with the option's message)."""
    try:
        return Decimal(text)
    except InvalidOperation:
        return Decimal("NaN")


def _limit(option: str, value: str) -> Decimal:
    """A budget limit: dollars and tokens are exact decimals >= 0, calls a whole number."""
    if option == "--max-calls":  # a call is whole: 2.5 calls was a budget of 2
        return Decimal(whole_number_option(value, option, least=0))
    return decimal_option(value, option)


def _count(value: str | None, option: str) -> int | None:
    return None if value is None else whole_number_option(value, option)


def quota_from(args: argparse.Namespace) -> CallQuota | None:
    """The ``--quota-*`` options as a quota, or None without ``--quota-rpm``/``--quota-tpm``.

    Raises:
        CLIError: A malformed number, store options without a limit, or pollard missing for
            ``--quota-store``.
    """
    rpm = _count(getattr(args, "quota_rpm", None), "--quota-rpm")
    tpm = _count(getattr(args, "quota_tpm", None), "--quota-tpm")
    workers = _count(getattr(args, "quota_workers", None), "--quota-workers")
    store = getattr(args, "quota_store", None)
    name = getattr(args, "quota_name", None)
    window_text = getattr(args, "quota_window", None)
    window = 60.0
    if window_text is not None:
        value = _number(window_text)
        if not value.is_finite() or value <= 0 or value > 86_400:
            raise CLIError(
                f"--quota-window needs seconds > 0 and at most a day, got {window_text!r}",
                hint="pass --quota-window 60 for per-minute limits",
            )
        window = float(value)
    if rpm is None and tpm is None:
        given = [
            flag
            for flag, value in (
                ("--quota-window", window_text),
                ("--quota-store", store),
                ("--quota-name", name),
                ("--quota-workers", workers),
            )
            if value is not None
        ]
        if given:
            raise CLIError(
                f"{', '.join(given)} needs --quota-rpm or --quota-tpm",
                hint="pass the provider's limits, e.g. --quota-rpm 500 --quota-tpm 200000",
            )
        return None
    if store is None:
        if name is not None or workers is not None:
            raise CLIError(
                "--quota-name and --quota-workers need --quota-store",
                hint="pass --quota-store quota.db (or postgresql://...#id) to share the quota",
            )
        from pollux.quota import LocalQuota

        return LocalQuota(rpm, tpm, window_s=window)
    target, display = _store_target(store)
    if "://" not in target:  # a SQLite file: a FIFO or device would block or write beside it
        regular_file(target, "--quota-store", missing_ok=True, hint="pass a SQLite file")
    try:
        from .ledger import shared_quota
    except ImportError:
        raise CLIError(
            "--quota-store needs pollard", hint='pip install "pollux-ai[cli]" (it brings pollard)'
        ) from None
    try:
        return shared_quota(
            target,
            requests_per_minute=rpm,
            tokens_per_minute=tpm,
            name=name or "default",
            window_s=window,
            on_unreachable="local" if workers is not None else "fail",
            workers=workers,
        )
    except ConfigurationError as exc:  # the store named cannot be one (never a traceback)
        raise CLIError(
            f"--quota-store {display}: {exc.message.replace(target, display)}",
            hint=exc.hint or "pass --quota-store quota.db (or postgresql://...#id)",
        ) from None
