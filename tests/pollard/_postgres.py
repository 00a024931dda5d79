"""PostgreSQL test helpers: a fresh logical store per test, removed afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

TABLES = ("nodes", "blobs", "ledger", "reservations", "window_events", "kv")


def fresh_store_id(prefix: str = "t") -> str:
    """A store id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def drop_store(dsn: str, store_id: str) -> None:
    """Delete every row of one logical store (the tables stay)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            if conn.execute("SELECT to_regclass(%s)", (f"pollard_{table}",)).fetchone() == (None,):
                continue
            conn.execute(f"DELETE FROM pollard_{table} WHERE store_id = %s", (store_id,))


def row_count(dsn: str, table: str, store_id: str) -> int:
    """How many rows of ``pollard_<table>`` belong to ``store_id``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM pollard_{table} WHERE store_id = %s", (store_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def fresh_schema(dsn: str) -> Iterator[str]:
    """A new, empty PostgreSQL schema; yields a DSN whose search_path points at it."""
    import psycopg

    schema = f"pollard_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
