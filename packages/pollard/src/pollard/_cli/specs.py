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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PG_SCHEMES = ("postgresql://", "postgres://")
_PG_MODULE = "pollard.stores.postgres"


class CLIError(Exception):
    """A usage or input error: the CLI prints ``pollard: <message>`` and exits with 2."""


@dataclass(frozen=True)
class StoreSpec:
    """A parsed store spec.

    Attributes:
        kind: ``"sqlite"`` or ``"postgres"``.
        label: What the CLI prints for this store; never contains a DSN.
        path: The SQLite file, for ``kind == "sqlite"``.
        store_id: The logical PostgreSQL store id, for ``kind == "postgres"``.
        env_var: The environment variable holding the DSN, for ``pg-env:`` specs.
    """

    kind: str
    label: str
    path: Path | None = None
    store_id: str = ""
    env_var: str | None = None
    _dsn: str | None = field(default=None, repr=False, compare=False)

    def dsn(self) -> str:
        """Return the PostgreSQL DSN (from the spec or the environment); never print it."""
        if self.env_var is not None:
            value = os.environ.get(self.env_var, "")
            if not value:
                raise CLIError(f"environment variable {self.env_var} is not set or empty")
            return value
        if self._dsn is None:
            raise CLIError(f"{self.label} is not a PostgreSQL store spec")
        return self._dsn


def _split_store_id(text: str, what: str) -> tuple[str, str]:
    target, sep, store_id = text.rpartition("#")
    if not sep:
        return text, "default"
    if not store_id:
        raise CLIError(f"empty store id after '#' in {what}")
    return target, store_id


def parse_store_spec(text: str) -> StoreSpec:
    """Parse one store spec from the command line.

    Args:
        text: The argument as typed.

    Returns:
        The parsed spec.

    Raises:
        CLIError: The spec is malformed (the message never contains a DSN).
    """
    if not text:
        raise CLIError("empty store spec")
    if text.startswith("pg-env:"):
        var, store_id = _split_store_id(text[len("pg-env:") :], "a pg-env: store spec")
        if not _ENV_NAME.match(var):
            raise CLIError(f"pg-env: needs an environment variable name, got {var!r}")
        return StoreSpec(
            kind="postgres", label=f"pg-env:{var}#{store_id}", store_id=store_id, env_var=var
        )
    if text.startswith(_PG_SCHEMES):
        dsn, store_id = _split_store_id(text, "a postgresql:// store spec")
        return StoreSpec(
            kind="postgres", label=f"postgresql#{store_id}", store_id=store_id, _dsn=dsn
        )
    return StoreSpec(kind="sqlite", label=text, path=Path(text))


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
    """A read-only connection to a SQLite file (never creates or changes it)."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    return sqlite3.connect(uri, uri=True)


def _require_pollard_file(spec: StoreSpec) -> None:
    """Refuse a SQLite file that is not a pollard store before the store opens it.

    Opening a store for writing creates pollard's tables, so ``gc`` on another application's
    database (or an empty file) would write into it; reading commands would fail later with a
    bare ``no such table``.
    """
    assert spec.path is not None
    try:
        connection = sqlite_read_only(spec.path)
        try:
            found = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'nodes'"
            ).fetchone()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise CLIError(f"cannot open {spec.label}: {exc}") from None
    if found is None:
        raise CLIError(f"{spec.label} is not a pollard store (it has no pollard tables)")


def open_store(spec: StoreSpec, *, create: bool = False, write: bool = False) -> Any:
    """Open the store a spec names.

    Args:
        spec: A parsed spec.
        create: Whether a missing SQLite file may be created (destinations of ``merge`` and
            ``import``); reading commands refuse a missing file instead of creating an empty one.
        write: Whether the command writes; a SQLite store is otherwise opened read-only.

    Returns:
        An open store; the caller closes it.

    Raises:
        CLIError: The store cannot be opened (missing file, not a database, bad DSN, ...).
    """
    if spec.kind == "postgres":
        cls = _postgres_class()
        dsn = spec.dsn()
        try:
            return cls(dsn, store_id=spec.store_id)
        except Exception as exc:  # the driver's message may echo the DSN: scrub it
            raise CLIError(
                f"cannot open {spec.label}: {_scrub(str(exc), dsn) or type(exc).__name__}"
            ) from None
    assert spec.path is not None
    path = spec.path
    if path.is_dir():
        raise CLIError(f"{spec.label} is a directory, not a store file")
    if not create and not path.exists():
        raise CLIError(f"no such store: {spec.label}")
    if create and not path.parent.exists():
        raise CLIError(f"directory does not exist: {path.parent}")
    if not create:
        _require_pollard_file(spec)
    from pollard.stores.sqlite import SQLiteStore

    try:
        return SQLiteStore(path, read_only=not (write or create))
    except Exception as exc:
        raise CLIError(f"cannot open {spec.label}: {exc}") from None
