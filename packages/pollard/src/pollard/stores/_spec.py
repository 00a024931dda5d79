"""Store specs: the one parser behind ``Runtime(...)`` and the ``pollard`` command line.

Accepted forms:

* a path (``runs.db``, ``Path(...)``): a SQLite store file;
* ``postgresql://user@host/db#store_id`` (also ``postgres://``): a PostgreSQL store; the part
  after the last ``#`` is the logical store id (``default`` when absent);
* a libpq keyword DSN (``host=db dbname=runs user=worker``, optionally ``#store_id`` at the
  end): a PostgreSQL store, as the URL form (never taken for a file name);
* ``pg-env:VAR#store_id`` (``env=True`` only, the command line): a PostgreSQL store whose DSN is
  read from the environment variable ``VAR``, so it never appears in shell history;
* any other ``scheme://`` text is refused (it is never taken for a file name).

A DSN is never printed: every spec has a display ``label`` without credentials or hosts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["StoreSpec", "open_spec", "parse_store_spec"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PG_SCHEMES = ("postgresql", "postgres")
# A libpq keyword DSN starts with one of its connection keywords (``host=db dbname=runs``).
_KEYWORD_DSN = re.compile(
    r"^\s*(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options"
    r"|connect_timeout|application_name|target_session_attrs|sslrootcert|sslcert|sslkey)\s*="
)
# A keyword DSN's trailing store id: a bare word (a '#' inside a quoted value is the value's).
_KEYWORD_STORE_ID = re.compile(r"#([^\s='\"#\\]+)\s*$")


@dataclass(frozen=True)
class StoreSpec:
    """A parsed store spec.

    Attributes:
        kind: ``"sqlite"`` or ``"postgres"``.
        label: What may be printed for this store; never contains a DSN.
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
        """Return the PostgreSQL DSN (from the spec or the environment); never print it.

        Raises:
            ValueError: The ``pg-env:`` variable is unset or empty, or this is not a PostgreSQL
                spec.
        """
        if self.env_var is not None:
            value = os.environ.get(self.env_var, "")
            if not value:
                raise ValueError(f"environment variable {self.env_var} is not set or empty")
            return value
        if self._dsn is None:
            raise ValueError(f"{self.label} is not a PostgreSQL store spec")
        return self._dsn


def _split_store_id(text: str, what: str) -> tuple[str, str]:
    target, sep, store_id = text.rpartition("#")
    if not sep:
        return text, "default"
    if not store_id:
        raise ValueError(f"empty store id after '#' in {what}")
    return target, store_id


def parse_store_spec(value: str | os.PathLike[str], *, env: bool = False) -> StoreSpec:
    """Parse a store argument.

    Args:
        value: A path, a ``postgresql://`` DSN or a libpq keyword DSN (either optionally
            ending in ``#store_id``), or with ``env`` a ``pg-env:VAR#store_id`` spec.
        env: Accept ``pg-env:`` specs (the command line does; ``Runtime`` takes a DSN).

    Returns:
        The parsed spec.

    Raises:
        ValueError: The spec is empty, malformed, or a URL of another scheme (the message never
            contains a DSN).
    """
    if not isinstance(value, str):
        return StoreSpec(kind="sqlite", label=os.fspath(value), path=Path(value))
    if not value.strip():
        raise ValueError("empty store spec")
    if env and value.startswith("pg-env:"):
        var, store_id = _split_store_id(value[len("pg-env:") :], "a pg-env: store spec")
        if not _ENV_NAME.match(var):
            raise ValueError(f"pg-env: needs an environment variable name, got {var!r}")
        return StoreSpec(
            kind="postgres", label=f"pg-env:{var}#{store_id}", store_id=store_id, env_var=var
        )
    if _KEYWORD_DSN.match(value):
        found = _KEYWORD_STORE_ID.search(value)
        dsn, store_id = (value[: found.start()], found.group(1)) if found else (value, "default")
        return StoreSpec(
            kind="postgres", label=f"postgresql#{store_id}", store_id=store_id, _dsn=dsn
        )
    if _URL.match(value):
        scheme = value.split(":", 1)[0].lower()
        if scheme not in _PG_SCHEMES:
            raise ValueError(
                f"unsupported store URL scheme {scheme!r}: pass a SQLite file path, a "
                "postgresql:// DSN, a Store instance, or None for a MemoryStore"
            )
        dsn, store_id = _split_store_id(value, "a postgresql:// store")
        return StoreSpec(
            kind="postgres", label=f"postgresql#{store_id}", store_id=store_id, _dsn=dsn
        )
    return StoreSpec(kind="sqlite", label=value, path=Path(value))


def open_spec(spec: StoreSpec, *, read_only: bool) -> Any:
    """Open the store a spec names (``read_only``: never create or change anything).

    Raises:
        FileNotFoundError: ``read_only`` and no SQLite file exists at the path.
        PollardError: The path cannot be opened as a SQLite store (a directory, a missing
            folder, a file that is not SQLite), or ``read_only`` and it holds no pollard store;
            ``read_only`` and the PostgreSQL database holds no such store.
        ImportError: The PostgreSQL store needs psycopg (``pip install "pollard[pg]"``).
    """
    if spec.kind == "postgres":
        from pollard.stores.postgres import PostgresStore

        return PostgresStore(spec.dsn(), store_id=spec.store_id, read_only=read_only)
    import sqlite3

    from pollard.errors import PollardError
    from pollard.stores.sqlite import SQLiteStore, has_pollard_tables

    path = spec.path
    assert path is not None
    hint = (
        "check the path and its permissions: record and hybrid mode need a writable SQLite file "
        "in an existing folder (created when missing), replay needs one a recording run wrote"
    )
    if path.is_dir():
        raise PollardError(
            f"cannot open the SQLite store {spec.label}: it is a directory", hint=hint
        )
    try:
        store = SQLiteStore(path, read_only=read_only)
    except sqlite3.DatabaseError as exc:
        # sqlite3's own text ("unable to open database file") names neither the path nor a fix.
        raise PollardError(f"cannot open the SQLite store {spec.label}: {exc}", hint=hint) from exc
    if read_only:
        # A writable open creates pollard's tables; a read-only one on another application's
        # database would otherwise fail at the first read with a bare "no such table: nodes".
        try:
            found = has_pollard_tables(path)
        except sqlite3.DatabaseError:
            found = False
        if not found:
            store.close()
            raise PollardError(
                f"{spec.label} is not a pollard store (it has no pollard tables)", hint=hint
            )
    return store
