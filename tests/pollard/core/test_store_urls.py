"""``Runtime`` given a URL: a PostgreSQL DSN opens a PostgresStore, other schemes are refused."""

from __future__ import annotations

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
