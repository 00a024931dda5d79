"""The CLI on PostgreSQL: URL specs, merging PostgreSQL -> SQLite, and merge in the API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pollard import PostgresStore, Runtime, SQLiteStore, merge, seal
from tests.conftest import DEFAULT_POSTGRES_DSN
from tests.pollard._postgres import drop_store, fresh_schema, fresh_store_id, row_count

from ._cli import Result, pollard
from ._trees import SECRET_PROMPT, Sample, build_sample

pytestmark = pytest.mark.postgres

ENV_VAR = "POLLARD_CLI_PG_DSN"
# Trust authentication ignores the password, so the default server accepts this marker.
SECRET = "pollard-cli-secret-pw"


@pytest.fixture
def dsn(pg_dsn: str) -> str:
    if pg_dsn == DEFAULT_POSTGRES_DSN:
        return pg_dsn.replace("postgres@", f"postgres:{SECRET}@")
    return pg_dsn


@pytest.fixture
def store_ids(pg_dsn: str) -> Iterator[list[str]]:
    ids = [fresh_store_id("cli"), fresh_store_id("cli")]
    yield ids
    for store_id in ids:
        drop_store(pg_dsn, store_id)


def _run(dsn: str, *args: str | Path) -> Result:
    result = pollard(*args, env={ENV_VAR: dsn})
    for text in (result.out, result.err):
        assert dsn not in text and SECRET not in text
    return result


def test_url_specs_payloads_merge_back_and_compact(
    dsn: str, store_ids: list[str], tmp_path: Path
) -> None:
    # test_cli_postgres.py covers every command through pg-env specs; this adds the URL form
    # (with a password that must never be printed), content on request, PG -> SQLite and compact.
    with (
        SQLiteStore(tmp_path / "runs.db") as source,
        PostgresStore(dsn, store_id=store_ids[0]) as pg,
    ):
        sample: Sample = build_sample(source)
        expected = seal(source, sample.root).digest
        assert merge(pg, source).copied == 8
    url = f"{dsn}#{store_ids[0]}"
    env_spec = f"pg-env:{ENV_VAR}#{store_ids[0]}"

    runs = _run(dsn, "runs", url, "--json")
    assert runs.code == 0, runs.err
    (row,) = runs.json()["runs"]
    assert row["store"] == f"postgresql#{store_ids[0]}"
    assert row["root_id"] == sample.root and row["nodes"] == 8

    shown = _run(dsn, "show", url, "triage", "--payloads")
    assert shown.code == 0 and SECRET_PROMPT in shown.out

    back = tmp_path / "back.db"
    merged = _run(dsn, "merge", back, url, "--json")
    assert merged.code == 0, merged.err
    assert merged.json()["totals"]["copied"] == 8
    with SQLiteStore(back) as store:
        assert seal(store, sample.root).digest == expected

    compacted = _run(dsn, "gc", env_spec, "compact", "--json")
    assert compacted.code == 0, compacted.err
    assert compacted.json()["removed_nodes"] == 0
    assert expected in compacted.out  # the survivor seal


def test_a_bad_postgres_target_is_a_clean_error(dsn: str) -> None:
    broken = dsn.replace("127.0.0.1:5432", "127.0.0.1:1")
    result = _run(broken, "runs", f"pg-env:{ENV_VAR}#x")
    assert result.code == 2 and result.out == ""
    assert result.err.startswith("pollard: cannot open pg-env:")


def test_merge_sqlite_to_postgres_and_back_in_the_api(
    pg_dsn: str, store_ids: list[str], tmp_path: Path
) -> None:
    with (
        SQLiteStore(tmp_path / "a.db") as sqlite,
        PostgresStore(pg_dsn, store_id=store_ids[0]) as pg,
    ):
        sample = build_sample(sqlite)
        long_text = "interned " * 400
        sqlite.update_meta(sample.model, {"note": long_text})
        report = merge(pg, sqlite)
        assert report.copied == 8
        assert merge(pg, sqlite).copied == 0
        assert seal(pg, sample.root).digest == seal(sqlite, sample.root).digest
        assert pg.get(sample.model).meta["note"] == long_text
        with SQLiteStore(tmp_path / "b.db") as back:
            assert merge(back, pg).copied == 8
            assert [n.id for n in back.walk(sample.root)] == [
                n.id for n in sqlite.walk(sample.root)
            ]
            assert back.get(sample.model) == sqlite.get(sample.model)


_COMMANDS_ON_AN_EXISTING_STORE = (
    ("runs",),
    ("verify",),
    ("show", "{spec}", "abc123"),
    ("report", "{spec}", "abc123"),
    ("seal", "{spec}", "abc123"),
    ("gc", "{spec}", "compact"),
    ("gc", "{spec}", "drop-pruned"),
)


def _argv(command: tuple[str, ...], spec: str) -> list[str]:
    if len(command) == 1:
        return [command[0], spec]
    return [part.format(spec=spec) for part in command]


@pytest.mark.parametrize("command", _COMMANDS_ON_AN_EXISTING_STORE, ids=" ".join)
def test_no_command_but_merge_and_import_creates_a_postgres_store(
    pg_dsn: str, command: tuple[str, ...]
) -> None:
    # gc writes, but only into a store that exists: on a database without pollard's tables it
    # used to create them and report "removed 0 node(s)" (exit 0).
    import psycopg

    with fresh_schema(pg_dsn) as dsn:
        result = pollard(*_argv(command, f"pg-env:{ENV_VAR}#x"), env={ENV_VAR: dsn})
        assert result.code == 2, result
        assert "no pollard store" in result.err and "never creates" in result.err
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('pollard_nodes')").fetchone() == (None,)


@pytest.mark.parametrize("command", _COMMANDS_ON_AN_EXISTING_STORE, ids=" ".join)
def test_a_mistyped_postgres_store_id_is_an_error_naming_the_close_one(
    pg_dsn: str, store_ids: list[str], command: tuple[str, ...]
) -> None:
    known, typo = store_ids[0], store_ids[0][:-1] + ("x" if store_ids[0][-1] != "x" else "y")
    with PostgresStore(pg_dsn, store_id=known) as store:
        Runtime(store).run("exists").note({"n": 1})
    result = pollard(*_argv(command, f"pg-env:{ENV_VAR}#{typo}"), env={ENV_VAR: pg_dsn})
    assert result.code == 2, result
    assert f"no store '{typo}'" in result.err and known in result.err
    for table in ("kv", "nodes", "ledger"):
        assert row_count(pg_dsn, table, typo) == 0
