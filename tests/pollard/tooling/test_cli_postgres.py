"""The CLI on PostgreSQL stores (skipped without a server, required when CI=true)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollard import SQLiteStore, seal
from tests.pollard._postgres import drop_store, fresh_store_id

from ._cli import pollard, tamper
from ._trees import SECRET_PROMPT, Sample, build_sample

pytestmark = pytest.mark.postgres


@pytest.fixture
def spec(pg_dsn: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A fresh logical store in the test database, named through pg-env (dropped afterwards)."""
    pytest.importorskip("pollard.stores.postgres")
    store_id = fresh_store_id("cli")
    yield f"pg-env:POLLARD_CLI_PG#{store_id}", {"POLLARD_CLI_PG": pg_dsn}
    for used in (store_id, f"{store_id}-copy"):
        drop_store(pg_dsn, used)


@pytest.fixture
def sample_db(tmp_path: Path) -> tuple[Path, Sample]:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        sample = build_sample(store)
    return path, sample


def test_merge_into_postgres_then_inspect_it(
    spec: tuple[str, dict[str, str]], sample_db: tuple[Path, Sample], tmp_path: Path, pg_dsn: str
) -> None:
    target, env = spec
    path, smp = sample_db
    merged = pollard("merge", target, path, "--json", env=env)
    assert merged.code == 0, merged.err
    assert merged.json()["destination"] == target
    assert merged.json()["totals"]["copied"] == 8
    assert pollard("merge", target, path, "--json", env=env).json()["totals"]["copied"] == 0

    runs = pollard("runs", target, "--json", env=env).json()["runs"]
    assert [(r["store"], r["root_id"], r["nodes"]) for r in runs] == [(target, smp.root, 8)]
    shown = pollard("show", target, "triage", env=env)
    assert shown.code == 0 and "[REFUSED]" in shown.out and SECRET_PROMPT not in shown.out
    assert pollard("verify", target, "--json", env=env).json()["ok"] is True
    with SQLiteStore(path, read_only=True) as store:
        digest = seal(store, smp.root).digest
    assert pollard("seal", target, smp.root, env=env).out.strip() == digest
    report = pollard("report", target, "triage", "--json", env=env).json()
    assert report["ledger"]["tokens"] == 135  # merged charges settle into the PG ledger

    exported = tmp_path / "pg.json"
    assert pollard("export", target, "triage", exported, env=env).code == 0
    assert json.loads(exported.read_text())["seal"]["digest"] == digest
    other = f"{target}-copy"
    imported = pollard("import", exported, other, "--json", env=env)
    assert imported.code == 0, imported.err
    assert imported.json()["imported"] == 8

    collected = pollard("gc", target, "drop-pruned", "--json", env=env)
    assert collected.code == 0, collected.err
    assert collected.json()["removed_nodes"] == 2
    for result in (merged, shown, imported, collected):
        assert pg_dsn not in result.out + result.err


def test_a_failed_merge_leaves_no_new_postgres_store_behind(
    spec: tuple[str, dict[str, str]], sample_db: tuple[Path, Sample]
) -> None:
    target, env = spec
    path, smp = sample_db
    tamper(path, f"UPDATE nodes SET payload = '{{\"model\":\"other\"}}' WHERE id = X'{smp.model}'")
    failed = pollard("merge", target, path, env=env)
    assert failed.code == 1 and "does not match its content" in failed.err
    # The new store id was created before the source was found to be tampered, and stayed: a
    # reading command then saw an empty store instead of a missing one.
    missing = pollard("runs", target, env=env)
    assert missing.code == 2 and "no store" in missing.err, missing
