"""``Runtime`` given a URL: a PostgreSQL DSN opens a PostgresStore, other schemes are refused."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from pollard import AsyncRuntime, PostgresStore, Runtime
from pollard.errors import PollardError


@pytest.mark.parametrize("url", ["mysql://db/x", "sqlite:///runs.db", "HTTP://host/x"])
def test_other_url_schemes_are_a_clear_error(url: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported store URL scheme"):
        Runtime(url)
    with pytest.raises(ValueError, match="postgresql://"):
        AsyncRuntime(url)
    assert list(tmp_path.iterdir()) == []
    assert not Path("mysql:").exists() and not Path("sqlite:").exists()


def test_a_windows_style_path_is_still_a_sqlite_path(tmp_path: Path) -> None:
    with Runtime(str(tmp_path / "C_runs.db")) as runtime:
        assert type(runtime.store).__name__ == "SQLiteStore"


@pytest.mark.parametrize("mode", ["record", "replay"])
def test_a_path_that_is_not_a_store_is_a_pollard_error_naming_it(mode: str, tmp_path: Path) -> None:
    # sqlite3's own "unable to open database file" names neither the path nor what to do.
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    cases = [
        (tmp_path / "missing" / "runs.db", "unable to open database file"),
        (tmp_path, "it is a directory"),
        (text, "file is not a database"),
    ]
    for path, reason in cases:
        if mode == "replay" and not path.parent.exists():
            continue  # replay of a path where nothing exists is a MissingRecording (tested)
        with pytest.raises(
            PollardError, match=re.escape(f"cannot open the SQLite store {path}: {reason}")
        ):
            Runtime(str(path), mode=mode)
        with pytest.raises(PollardError, match="cannot open the SQLite store") as caught:
            AsyncRuntime(path, mode=mode)
        assert caught.value.hint is not None and "SQLite file" in caught.value.hint
    assert text.read_text() == "not a database"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_replay_of_another_applications_database_names_it_and_leaves_it_alone(
    tmp_path: Path,
) -> None:
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE things (x)")
    connection.close()
    before = other.read_bytes()
    with pytest.raises(PollardError, match=r"app\.db is not a pollard store"):
        Runtime(other, mode="replay")
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


@pytest.mark.postgres
def test_a_postgresql_dsn_opens_a_postgres_store(pg_dsn: str) -> None:
    assert pg_dsn.startswith(("postgresql://", "postgres://"))
    with Runtime(pg_dsn) as runtime:
        assert isinstance(runtime.store, PostgresStore)
        assert runtime.store.store_id == "default"
        assert runtime.store.find("00" * 32) is None  # connected
    with pytest.raises(PollardError, match="is closed"):  # closed with the runtime
        runtime.store.find("00" * 32)


@pytest.mark.postgres
def test_a_dsn_fragment_names_the_store_id(pg_dsn: str) -> None:
    from tests.pollard._postgres import drop_store, fresh_store_id

    store_id = fresh_store_id("url")
    try:
        with Runtime(f"{pg_dsn}#{store_id}") as runtime:
            assert isinstance(runtime.store, PostgresStore)
            assert runtime.store.store_id == store_id
    finally:
        drop_store(pg_dsn, store_id)
    with pytest.raises(ValueError, match="empty store id"):
        Runtime(pg_dsn + "#")
