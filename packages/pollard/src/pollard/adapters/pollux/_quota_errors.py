"""What a `SharedQuota` makes of a store's error: an outage, or a fault waiting does not fix.

Only an outage lets the quota fail closed with a retryable error or run on its local share; any
other error is reported as it is (see `store_unreachable`).
"""

from __future__ import annotations

import re
import sqlite3
import sys

from pollard import PollardError

__all__ = ["describe", "store_unreachable"]

# SQLite's primary result codes for a database that cannot be used right now, as opposed to one
# that is damaged, read-only or full: SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_CANTOPEN.
_SQLITE_UNREACHABLE = frozenset((5, 6, 10, 14))
# Their messages, for Python 3.10 (``sqlite_errorcode`` came in 3.11).
_SQLITE_UNREACHABLE_TEXT = (
    "unable to open database file",
    "database is locked",
    "database table is locked",
    "disk i/o error",
)


def store_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means a store cannot be reached now, rather than a fault in it.

    A shared quota runs on its local share, or fails with a retryable error, only for these;
    anything else (a bug, a damaged ledger, an unknown store format, a read-only store) is a
    fault that waiting does not fix. Unreachable means:

    * an error a store marked so: `PostgresStore`'s lost connection (``connection_lost``) and
      its first connection failing (``store_unreachable``), except a login the server refused
      (``login_refused``: a wrong password, user or database name, which every retry meets
      again);
    * `OSError`, which covers `ConnectionError` and `TimeoutError` (the contract for a
      `pollard.Store` of one's own), except `PermissionError` (a setting to fix);
    * `sqlite3.OperationalError` for a file that cannot be opened, is locked or busy, or a
      disk I/O error (`SQLiteStore` raises the first for a path that is not a regular file);
    * redis-py's ``ConnectionError`` and ``TimeoutError`` (the Redis quota backend), except a
      refused login or permission.
    """
    if getattr(exc, "login_refused", False):
        return False
    if getattr(exc, "store_unreachable", False) or getattr(exc, "connection_lost", False):
        return True
    if isinstance(exc, OSError):
        return not isinstance(exc, PermissionError)
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _SQLITE_UNREACHABLE
        return str(exc).lower().startswith(_SQLITE_UNREACHABLE_TEXT)
    # Only an exception of an imported redis can be redis's: never imported here for the check.
    redis = sys.modules.get("redis.exceptions")
    if redis is not None and isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        # A refused login or permission (both ConnectionErrors in redis-py 5) is a setting to
        # fix, not an outage.
        return not isinstance(exc, (redis.AuthenticationError, redis.AuthorizationError))
    return False


# How much of a store error's own message an error or a log line quotes.
_DETAIL_CHARS = 300
# A URL's user and password (postgresql://user:secret@host), and a keyword DSN's password
# (``password=secret``, ``password = 'it''s secret'``, ``?password=secret&...``).
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_PASSWORD = re.compile(r"(?i)(password\s*=\s*)(?:'(?:[^'\\]|\\.|'')*'|[^\s&]+)")


def describe(exc: BaseException) -> str:
    """``exc`` for a message: its type (``pollard.IntegrityError``) and its own message.

    Credentials a message may quote (a DSN's password) are replaced; pollard's stores never
    quote their DSN, but a store of one's own might.
    """
    kind = type(exc)
    package = kind.__module__.partition(".")[0]
    name = kind.__name__ if package == "builtins" else f"{package}.{kind.__name__}"
    text = exc.message if isinstance(exc, PollardError) else str(exc)
    text = _PASSWORD.sub(r"\1***", _USERINFO.sub("***@", " ".join(text.split())))
    if len(text) > _DETAIL_CHARS:
        text = text[: _DETAIL_CHARS - 3] + "..."
    return f"{name}: {text}" if text else name
