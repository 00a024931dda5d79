"""Forward compatibility: a store a newer release migrated is refused, never written.

A future release that changes the store format stamps ``kv('schema_version')`` with its own
version inside its migration transaction. This release must then refuse the store at open (read
only or writable, library and command line alike) before it writes or creates anything, and
name both versions, so the user upgrades instead of having this release write the old layout
into the new one (or recreate a renamed table empty).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollard import PollardError, Runtime, SQLiteStore
from pollard.cli import main
from pollard.stores import sqlite as sqlite_module
from tests.pollard._postgres import TABLES, drop_store, fresh_schema, fresh_store_id

NEWER = "pollard-sql/2"
CURRENT = "pollard-sql/1"


def _record(store: object) -> None:
    with Runtime(store).run("before the upgrade") as run:  # type: ignore[arg-type]
        run.note({"step": 1})


def _refusal(error: PollardError) -> None:
    assert f"{NEWER!r}" in error.message and f"{CURRENT!r}" in error.message
    assert error.hint is not None and "upgrade pollard" in error.hint
    assert "pollard migrate" not in error.hint  # never "migrate" back to this release's format


def _files(folder: Path) -> dict[str, str]:
    """Every file of the folder and its digest (side files like -wal/-shm included)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
    }


@pytest.fixture
def newer_file(tmp_path: Path) -> Path:
    """A SQLite store this release wrote, then stamped by a (simulated) newer release."""
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        _record(store)
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("UPDATE kv SET value = ? WHERE key = 'schema_version'", (NEWER,))
    connection.close()  # the last connection: the WAL is checkpointed into the file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
    return path


@pytest.mark.parametrize("read_only", [True, False])
def test_a_newer_sqlite_store_is_refused_and_left_byte_for_byte(
    newer_file: Path, read_only: bool
) -> None:
    before = _files(newer_file.parent)
    with pytest.raises(PollardError) as caught:
        SQLiteStore(newer_file, read_only=read_only)
    _refusal(caught.value)
    assert str(newer_file) in caught.value.message
    with pytest.raises(PollardError):  # a path, as Runtime takes it, too
        Runtime(newer_file, mode="replay" if read_only else "record")
    assert _files(newer_file.parent) == before  # no write, no -wal/-shm beside it


def test_the_format_is_checked_again_under_the_write_lock(
    newer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A newer release's migration that commits between the first look and the write lock: the
    # check inside the schema transaction still refuses, and the transaction writes nothing.
    before = newer_file.read_bytes()
    monkeypatch.setattr(sqlite_module, "inspect_file", lambda path: (False, None))
    with pytest.raises(PollardError) as caught:
        SQLiteStore(newer_file)
    _refusal(caught.value)
    assert newer_file.read_bytes() == before


def test_a_store_of_this_release_and_a_new_file_still_open(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:  # a new file: no version yet, then this release's
        _record(store)
    with SQLiteStore(path, read_only=True) as store:
        assert len(store.roots()) == 1
    with sqlite3.connect(path) as connection:
        row = connection.execute("SELECT value FROM kv WHERE key = 'schema_version'").fetchone()
    connection.close()
    assert row == (CURRENT,)


@pytest.mark.parametrize(
    "args",
    [["runs", "{db}"], ["verify", "{db}"], ["gc", "{db}", "compact"], ["migrate", "{db}"]],
    ids=["runs", "verify", "gc", "migrate"],
)
def test_the_cli_says_so_in_one_line(
    newer_file: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    before = _files(newer_file.parent)
    capsys.readouterr()
    assert main([a.format(db=newer_file) for a in args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pollard: "), captured.err
    assert f"{NEWER!r}" in lines[0] and f"{CURRENT!r}" in lines[0]
    assert "upgrade pollard" in lines[0]
    assert _files(newer_file.parent) == before


# -- PostgreSQL ---------------------------------------------------------------------------------


def _rows(dsn: str, store_id: str) -> dict[str, list[str]]:
    """Every row of one store id, as text, table by table."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return {
            table: [
                row[0]
                for row in conn.execute(
                    f"SELECT t::text FROM pollard_{table} t WHERE store_id = %s ORDER BY 1",
                    (store_id,),
                ).fetchall()
            ]
            for table in TABLES
        }


@pytest.fixture
def newer_pg(pg_dsn: str) -> Iterator[tuple[str, str, str]]:
    """``(dsn, newer store id, current store id)`` in one database; the first one stamped."""
    pytest.importorskip("psycopg")
    import psycopg

    from pollard import PostgresStore

    newer, current = fresh_store_id("newer"), fresh_store_id("current")
    try:
        for store_id in (newer, current):
            with PostgresStore(pg_dsn, store_id=store_id) as store:
                _record(store)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE pollard_kv SET value = %s WHERE store_id = %s AND key = 'schema_version'",
                (NEWER, newer),
            )
        yield pg_dsn, newer, current
    finally:
        drop_store(pg_dsn, newer)
        drop_store(pg_dsn, current)


@pytest.mark.postgres
@pytest.mark.parametrize("read_only", [True, False])
def test_a_newer_postgres_store_id_is_refused_and_its_rows_unchanged(
    newer_pg: tuple[str, str, str], read_only: bool
) -> None:
    from pollard import PostgresStore

    dsn, newer, current = newer_pg
    before = _rows(dsn, newer)
    with pytest.raises(PollardError) as caught:
        PostgresStore(dsn, store_id=newer, read_only=read_only)
    _refusal(caught.value)
    assert repr(newer) in caught.value.message
    assert _rows(dsn, newer) == before
    # Another store id of the same database opens as before, both ways.
    with PostgresStore(dsn, store_id=current, read_only=read_only) as store:
        assert len(store.roots()) == 1
        if not read_only:
            _record(store)


@pytest.mark.postgres
def test_a_postgres_open_checks_again_under_the_schema_lock(
    newer_pg: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As for SQLite: a newer release's migration commits between the first look and the schema
    # lock (here: stamps the store right after the first look). The schema transaction still
    # refuses the store, and writes nothing.
    import psycopg

    from pollard import PostgresStore

    dsn, _, current = newer_pg
    is_legacy = PostgresStore._is_legacy
    before: dict[str, list[str]] = {}

    def migrated_meanwhile(self: PostgresStore) -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE pollard_kv SET value = %s WHERE store_id = %s AND key = 'schema_version'",
                (NEWER, current),
            )
        before.update(_rows(dsn, current))
        return is_legacy(self)

    monkeypatch.setattr(PostgresStore, "_is_legacy", migrated_meanwhile)
    with pytest.raises(PollardError) as caught:
        PostgresStore(dsn, store_id=current)
    _refusal(caught.value)
    assert before and _rows(dsn, current) == before


@pytest.mark.postgres
def test_a_schema_wide_newer_format_refuses_every_store_id_even_a_new_one(pg_dsn: str) -> None:
    # A newer release that changed the tables every store id shares records their format under
    # the store id '' (no store can have it): a store id it never saw is refused too, rather
    # than created in tables this release does not know. A schema of its own: the shared
    # database's other tests must not see the stamp.
    pytest.importorskip("psycopg")
    import psycopg

    from pollard import PostgresStore

    with fresh_schema(pg_dsn) as dsn:
        with PostgresStore(dsn, store_id="old") as store:
            _record(store)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pollard_kv (store_id, key, value) VALUES ('', 'schema_version', %s)",
                (NEWER,),
            )
        before = {store_id: _rows(dsn, store_id) for store_id in ("old", "new", "")}
        for store_id in ("old", "new"):
            for read_only in (True, False):
                with pytest.raises(PollardError) as caught:
                    PostgresStore(dsn, store_id=store_id, read_only=read_only)
                _refusal(caught.value)
                assert "schema" in caught.value.message
        assert {store_id: _rows(dsn, store_id) for store_id in ("old", "new", "")} == before
        assert main(["runs", f"{dsn}#old"]) == 2


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["runs", "gc", "migrate"])
def test_the_cli_says_so_in_one_line_for_postgres(
    newer_pg: tuple[str, str, str], capsys: pytest.CaptureFixture[str], command: str
) -> None:
    dsn, newer, _ = newer_pg
    before = _rows(dsn, newer)
    capsys.readouterr()
    extra = ["compact"] if command == "gc" else []
    assert main([command, f"{dsn}#{newer}", *extra]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("pollard: ")
    assert f"{NEWER!r}" in lines[0] and f"{CURRENT!r}" in lines[0]
    assert "upgrade pollard" in lines[0]
    assert _rows(dsn, newer) == before
