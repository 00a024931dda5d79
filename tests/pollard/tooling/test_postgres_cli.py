"""Every CLI command against a live PostgreSQL store, merging SQLite -> PostgreSQL -> SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pollard import PostgresStore, SQLiteStore, merge, seal
from tests.conftest import DEFAULT_POSTGRES_DSN
from tests.pollard._postgres import drop_store, fresh_store_id

from ._cli import Result, pollard
from ._trees import SECRET_PROMPT, SECRET_RESULT, Sample, build_sample

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


def test_every_command_works_on_postgres_and_merges_both_ways(
    dsn: str, store_ids: list[str], tmp_path: Path
) -> None:
    source = tmp_path / "runs.db"
    with SQLiteStore(source) as store:
        sample: Sample = build_sample(store)
        expected = seal(store, sample.root).digest
    url = f"{dsn}#{store_ids[0]}"
    env_spec = f"pg-env:{ENV_VAR}#{store_ids[0]}"

    merged = _run(dsn, "merge", env_spec, source, "--json")
    assert merged.code == 0, merged.err
    assert merged.json()["totals"]["copied"] == 8
    assert merged.json()["destination"] == env_spec
    runs = _run(dsn, "runs", url, "--json")
    assert runs.code == 0, runs.err
    (row,) = runs.json()["runs"]
    assert row["label"] == "triage" and row["nodes"] == 8 and row["root_id"] == sample.root
    assert row["store"] == f"postgresql#{store_ids[0]}"

    shown = _run(dsn, "show", env_spec, "triage")
    assert shown.code == 0 and sample.root[:8] in shown.out
    assert SECRET_PROMPT not in shown.out and SECRET_RESULT not in shown.out
    assert SECRET_PROMPT in _run(dsn, "show", env_spec, "triage", "--payloads").out

    report = _run(dsn, "report", env_spec, "triage", "--json")
    assert report.code == 0 and report.json()["spent"]
    verified = _run(dsn, "verify", env_spec, "--json")
    assert verified.code == 0 and verified.json()["ok"] is True
    assert _run(dsn, "seal", url, "triage").out.strip() == expected

    exported = tmp_path / "triage.json"
    assert _run(dsn, "export", env_spec, "triage", exported).code == 0
    other = f"pg-env:{ENV_VAR}#{store_ids[1]}"
    imported = _run(dsn, "import", exported, other, "--json")
    assert imported.code == 0, imported.err
    assert imported.json()["imported"] == 8
    assert _run(dsn, "seal", other, sample.root).out.strip() == expected

    back = tmp_path / "back.db"
    assert _run(dsn, "merge", back, env_spec).code == 0
    with SQLiteStore(back) as store:
        assert seal(store, sample.root).digest == expected

    dropped = _run(dsn, "gc", env_spec, "drop-pruned", "--json")
    assert dropped.code == 0, dropped.err
    assert dropped.json()["removed_nodes"] == 2  # the pruned node and its child
    assert _run(dsn, "gc", env_spec, "compact").code == 0
    with PostgresStore(dsn, store_id=store_ids[0]) as store:
        assert not store.exists(sample.pruned) and not store.exists(sample.pruned_child)
        assert store.exists(sample.left)


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
