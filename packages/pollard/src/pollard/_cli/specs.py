"""Store specs on the command line: a SQLite path or a PostgreSQL target.

Accepted forms:

* ``runs.db`` (any path): a SQLite store file.
* ``postgresql://user@host/db#store_id`` (also ``postgres://``): a PostgreSQL store; the part
  after the last ``#`` is the logical store id (``default`` when absent).
* ``pg-env:VAR#store_id``: a PostgreSQL store whose DSN is read from the environment variable
  ``VAR``, so the DSN never appears in shell history or process listings.

A DSN is never printed: every spec has a display ``label`` that omits credentials and hosts.
"""

from __future__ import annotations

import importlib
import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pollard.errors import IntegrityError, PollardError
from pollard.stores._spec import StoreSpec
from pollard.stores._spec import parse_store_spec as _parse

__all__ = [
    "CLIError",
    "StoreSpec",
    "cannot_open",
    "open_store",
    "parse_store_spec",
    "regular_or_missing",
    "sqlite_read_only",
]

_PG_MODULE = "pollard.stores.postgres"


class CLIError(Exception):
    """A usage or input error: the CLI prints ``pollard: <message>`` and exits with 2."""


def parse_store_spec(text: str) -> StoreSpec:
    """Parse one store spec from the command line (``pollard.stores._spec``, plus ``pg-env:``).

    Args:
        text: The argument as typed.

    Returns:
        The parsed spec.

    Raises:
        CLIError: The spec is malformed (the message never contains a DSN).
    """
    try:
        return _parse(text, env=True)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _dsn(spec: StoreSpec) -> str:
    try:
        return spec.dsn()
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _postgres_class() -> Any:
    try:
        module = importlib.import_module(_PG_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name in (_PG_MODULE, "pollard.stores"):
            raise CLIError("the PostgreSQL store is not available yet") from None
        raise CLIError(
            f'the PostgreSQL store needs the pg extra: pip install "pollard[pg]" '
            f"({exc.name} is missing)"
        ) from None
    cls = getattr(module, "PostgresStore", None)
    if cls is None:
        raise CLIError("the PostgreSQL store is not available yet")
    return cls


_KV_PASSWORD = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")


def _scrub(message: str, dsn: str) -> str:
    """Remove the DSN and its password from a driver's error message."""
    secrets = [dsn]
    try:
        password = urlsplit(dsn).password if "://" in dsn else None
    except ValueError:
        password = None
    if password:
        secrets.extend({password, unquote(password)})
    secrets.extend(match.group(1).strip("'") for match in _KV_PASSWORD.finditer(dsn))
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


def sqlite_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a SQLite file (never creates or changes it, nor side files)."""
    from pollard.stores.sqlite import read_only_uri

    return sqlite3.connect(read_only_uri(path), uri=True)


SQLITE_MAGIC = b"SQLite format 3\x00"


def regular_or_missing(path: Path, label: str) -> None:
    """Refuse a path that exists but is not a regular file (before anything opens it).

    Opening a FIFO blocks until another process opens its other end, and a device never ends
    (``/dev/zero``) or swallows writes (``/dev/null``): every file argument is checked first.

    Raises:
        CLIError: A FIFO, socket, device or directory, or a path that cannot be looked up (a
            symlink loop).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot open {label}: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(mode):
        raise CLIError(f"{label} is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise CLIError(f"{label} is not a regular file (a FIFO, socket or device)")


def _require_pollard_file(spec: StoreSpec) -> None:
    """Refuse a SQLite file that is not a pollard store before the store opens it.

    Opening a store for writing creates pollard's tables, so ``gc`` on another application's
    database (or an empty file) would write into it; reading commands would fail later with a
    bare ``no such table``. A file with SQLite's header whose pages do not read is damage, an
    integrity error (exit 1), not an input error.
    """
    from pollard.stores.sqlite import has_pollard_tables

    assert spec.path is not None
    try:
        found = has_pollard_tables(spec.path)
    except sqlite3.DatabaseError as exc:
        if is_sqlite_file(spec.path) and not isinstance(exc, sqlite3.OperationalError):
            raise IntegrityError(f"{spec.label} is a damaged SQLite file: {exc}") from None
        raise CLIError(f"cannot open {spec.label}: {exc}") from None
    if not found:
        raise CLIError(f"{spec.label} is not a pollard store (it has no pollard tables)")


def cannot_open(label: str, exc: PollardError, dsn: str = "", verb: str = "open") -> CLIError:
    """``cannot open LABEL: message (hint)`` as one line, the DSN (if any) scrubbed."""
    text, hint = str(exc), exc.hint or ""
    if dsn:
        text, hint = _scrub(text, dsn), _scrub(hint, dsn)
    return CLIError(f"cannot {verb} {label}: {text}" + (f" ({hint})" if hint else ""))


def is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` starts with SQLite's file header."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def open_store(spec: StoreSpec, *, create: bool = False, write: bool = False) -> Any:
    """Open the store a spec names.

    Args:
        spec: A parsed spec.
        create: Whether a missing store may be created (destinations of ``merge`` and
            ``import``); reading commands refuse a missing SQLite file or PostgreSQL store id
            instead of creating an empty one.
        write: Whether the command writes; a store is otherwise opened read-only.

    Returns:
        An open store; the caller closes it.

    Raises:
        CLIError: The store cannot be opened (missing file or store id, not a database, bad
            DSN, ...).
        IntegrityError: The SQLite file is damaged.
    """
    if spec.kind == "postgres":
        cls = _postgres_class()
        dsn = _dsn(spec)
        try:
            if write and not create:
                # A writable open creates pollard's tables and the store id; gc must only
                # touch a store that exists, so the read-only open checks that first.
                cls(dsn, store_id=spec.store_id, read_only=True).close()
            return cls(dsn, store_id=spec.store_id, read_only=not (write or create))
        except PollardError as exc:
            raise cannot_open(spec.label, exc, dsn) from None
        except Exception as exc:  # the driver's message may echo the DSN: scrub it
            raise CLIError(
                f"cannot open {spec.label}: {_scrub(str(exc), dsn) or type(exc).__name__}"
            ) from None
    assert spec.path is not None
    path = spec.path
    if path.is_dir():
        raise CLIError(f"{spec.label} is a directory, not a store file")
    regular_or_missing(path, spec.label)
    if not create and not path.exists():
        raise CLIError(f"no such store: {spec.label} (reading never creates a store)")
    if create and not path.parent.exists():
        raise CLIError(f"directory does not exist: {path.parent}")
    from pollard.stores.sqlite import SQLiteStore, check_file_format

    try:
        # A newer release's store says so first, even if its tables no longer look like ours.
        check_file_format(path)
    except PollardError as exc:
        raise cannot_open(spec.label, exc) from None
    if not create:
        _require_pollard_file(spec)
    try:
        return SQLiteStore(path, read_only=not (write or create))
    except PollardError as exc:  # a newer release's store format, a 0.8 file not writable
        raise cannot_open(spec.label, exc) from None
    except sqlite3.DatabaseError as exc:
        if is_sqlite_file(path) and not isinstance(exc, sqlite3.OperationalError):
            raise IntegrityError(f"{spec.label} is a damaged SQLite file: {exc}") from None
        raise CLIError(f"cannot open {spec.label}: {exc}") from None
    except Exception as exc:
        raise CLIError(f"cannot open {spec.label}: {exc}") from None
