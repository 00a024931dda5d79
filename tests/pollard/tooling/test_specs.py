"""Store specs: SQLite paths, PostgreSQL DSNs and pg-env variables, never printing a DSN."""

from __future__ import annotations

from pathlib import Path

import pytest

from pollard._cli.specs import CLIError, open_store, parse_store_spec

DSN = "postgresql://alice:hunter2@db.internal:5432/pollard"


def test_a_plain_path_is_a_sqlite_store() -> None:
    spec = parse_store_spec("runs/team-a.db")
    assert spec.kind == "sqlite"
    assert spec.path == Path("runs/team-a.db")
    assert spec.label == "runs/team-a.db"


@pytest.mark.parametrize(
    ("text", "store_id"),
    [
        (DSN + "#support-prod", "support-prod"),
        (DSN, "default"),
        (DSN.replace("postgresql", "postgres") + "#x", "x"),
    ],
)
def test_a_dsn_spec_names_its_store_id_and_hides_the_dsn(text: str, store_id: str) -> None:
    spec = parse_store_spec(text)
    assert spec.kind == "postgres"
    assert spec.store_id == store_id
    assert spec.label == f"postgresql#{store_id}"
    assert "hunter2" not in repr(spec) and "alice" not in spec.label
    expected = text.rpartition("#")[0] if "#" in text else text
    assert spec.dsn() == expected


def test_pg_env_reads_the_dsn_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_store_spec("pg-env:POLLARD_PG_DSN#team")
    assert (spec.kind, spec.env_var, spec.store_id) == ("postgres", "POLLARD_PG_DSN", "team")
    assert spec.label == "pg-env:POLLARD_PG_DSN#team"
    monkeypatch.delenv("POLLARD_PG_DSN", raising=False)
    with pytest.raises(ValueError, match="POLLARD_PG_DSN is not set"):
        spec.dsn()
    monkeypatch.setenv("POLLARD_PG_DSN", DSN)
    assert spec.dsn() == DSN


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty store spec"),
        ("pg-env:#x", "needs an environment variable name"),
        ("pg-env:1BAD#x", "needs an environment variable name"),
        ("pg-env:VAR#", "empty store id"),
        (DSN + "#", "empty store id"),
    ],
)
def test_malformed_specs_are_rejected(text: str, message: str) -> None:
    with pytest.raises(CLIError, match=message) as info:
        parse_store_spec(text)
    assert "hunter2" not in str(info.value)


def test_reading_a_missing_sqlite_file_does_not_create_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(CLIError, match="no such store"):
        open_store(parse_store_spec(str(missing)))
    assert not missing.exists()
    with pytest.raises(CLIError, match="is a directory"):
        open_store(parse_store_spec(str(tmp_path)))


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://alice:hunter2@db/pollard", "hunter2"),
        ("postgresql://alice:p%40ss@db/pollard", "p@ss"),
        ("host=db user=alice password=hunter2", "hunter2"),
        ("host=db password='two words' user=alice", "two words"),
    ],
)
def test_driver_messages_are_scrubbed_of_the_dsn_and_password(dsn: str, secret: str) -> None:
    from pollard._cli.specs import _scrub

    message = f"connection failed for {dsn}: password {secret} rejected"
    scrubbed = _scrub(message, dsn)
    assert secret not in scrubbed and dsn not in scrubbed


@pytest.mark.parametrize(
    ("text", "message"),
    [("mysql://db/x", "unsupported store URL scheme 'mysql'"), (DSN + "#", "empty store id")],
)
def test_runtime_and_cli_share_one_parser(text: str, message: str, tmp_path: Path) -> None:
    from pollard import Runtime
    from pollard.cli import main

    with pytest.raises(ValueError, match=message):
        Runtime(text)
    with pytest.raises(CLIError, match=message):
        parse_store_spec(text)
    assert main(["runs", text]) == 2  # refused, never taken for a SQLite file name
    assert not Path("mysql:").exists()


@pytest.mark.parametrize(
    ("text", "store_id", "dsn"),
    [
        ("host=db user=alice password=hunter2 dbname=runs#team", "team", None),
        ("host=db user=alice password=hunter2", "default", None),
        ("  dbname=runs password='hash#in it'", "default", None),
        ("service=fleet #team ", "team", "service=fleet "),
    ],
)
def test_a_keyword_dsn_is_a_postgresql_store_never_a_file(
    text: str, store_id: str, dsn: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once taken for a SQLite file named after the DSN: each host then had a store of its own.
    monkeypatch.chdir(tmp_path)
    spec = parse_store_spec(text)
    assert (spec.kind, spec.store_id, spec.label) == (
        "postgres",
        store_id,
        f"postgresql#{store_id}",
    )
    assert spec.dsn() == (dsn if dsn is not None else text.removesuffix(f"#{store_id}"))
    assert "hunter2" not in repr(spec)


@pytest.mark.postgres
def test_runtime_opens_a_keyword_dsn_on_postgresql(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from pollard import PostgresStore, Runtime

    monkeypatch.chdir(tmp_path)
    keywords = psycopg.conninfo.make_conninfo(**psycopg.conninfo.conninfo_to_dict(pg_dsn))
    with Runtime(keywords + "#keyword-dsn-spec") as runtime:
        assert isinstance(runtime.store, PostgresStore)
    assert list(tmp_path.iterdir()) == []
