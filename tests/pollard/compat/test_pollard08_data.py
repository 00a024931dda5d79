"""Upgrading from pollard 0.8.0 loses nothing: its stores, bundles and recordings (issue 24).

Every fixture under ``fixtures/`` was written by the released ``pollard==0.8.0`` (see
``fixtures/make_fixtures_08.py``), and ``golden08.json`` holds what 0.8.0 itself reported about
them: node ids, results, charges, seal digests and settled ledger totals.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import (
    IntegrityError,
    MemoryStore,
    PollardError,
    PostgresStore,
    SQLiteStore,
    Store,
    import_subtree,
    seal,
    verify,
)
from pollard.cli import main
from pollard.stores import sqlite as sqlite_module

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN: dict[str, Any] = json.loads((FIXTURES / "golden08.json").read_text())
RUNS: dict[str, Any] = GOLDEN["runs"]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_fixtures_08", FIXTURES / "make_fixtures_08.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def store08(tmp_path: Path) -> Path:
    """A private copy of the 0.8.0 SQLite store."""
    target = tmp_path / "store08.db"
    shutil.copyfile(FIXTURES / "store08.db", target)
    return target


def _assert_identical(store: Store, *, ledger: bool = True) -> None:
    """Every id, result, charge, seal and ledger total is what 0.8.0 recorded."""
    assert sorted(root.id for root in store.roots()) == sorted(r["root_id"] for r in RUNS.values())
    for label, run in RUNS.items():
        assert [n.id for n in store.walk(run["root_id"])] == run["node_ids"] or sorted(
            n.id for n in store.walk(run["root_id"])
        ) == sorted(run["node_ids"]), label
        for node_id, expected in run["nodes"].items():
            node = store.get(node_id)
            assert node.kind.value == expected["kind"]
            assert node.parent == expected["parent"]
            assert node.payload == expected["payload"]
            assert node.result == expected["result"]
            assert node.meta.get("charges") == expected["charges"]
        assert seal(store, run["root_id"]).digest == run["seal_digest"], label
    if ledger:  # 0.8.0 settled totals only for the meters of a budget
        budgeted = RUNS["budgeted"]["root_id"]
        assert store.totals(budgeted) == {"steps": Decimal(3), "tokens": Decimal(126)}
    assert verify(store).ok


def test_read_only_open_reads_in_place_and_writes_nothing(store08: Path) -> None:
    before = _digests(store08.parent)
    with SQLiteStore(store08, read_only=True) as store:
        _assert_identical(store)
    assert main(["verify", str(store08)]) == 0
    assert main(["runs", str(store08)]) == 0
    assert _digests(store08.parent) == before  # no -wal, no backup, no byte changed


def test_first_writable_open_migrates_in_one_transaction_keeping_a_backup(store08: Path) -> None:
    with SQLiteStore(store08) as store:
        assert store.migration_backup == Path(f"{store08}.pollard-0.8.bak")
        _assert_identical(store)
    backup = store.migration_backup
    assert sqlite_module.is_legacy_store(backup)  # 0.8's file as it was, opened read-only
    with SQLiteStore(backup, read_only=True) as kept:
        _assert_identical(kept)
    assert sqlite_module.is_legacy_store(backup)
    with SQLiteStore(store08) as again:  # already migrated: opens as it is, no second backup
        assert again.migration_backup is None
        _assert_identical(again)
    assert not Path(f"{store08}.pollard-0.8.bak.1").exists()
    assert main(["verify", str(store08)]) == 0


def test_unwritable_0_8_file_is_refused_with_a_hint_naming_migrate(
    store08: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The suite may run as root, where file modes are not enforced: make the file unwritable
    # for the check the store does itself.
    monkeypatch.setattr(sqlite_module.os, "access", lambda *args, **kwargs: False)
    before = _digests(store08.parent)
    with pytest.raises(PollardError, match=r"pollard 0\.8") as caught:
        SQLiteStore(store08)
    assert "pollard migrate" in str(caught.value.hint)
    assert _digests(store08.parent) == before


def test_pollard_migrate_copies_into_a_new_file(
    store08: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = store08.read_bytes()
    target = store08.parent / "new.db"
    assert main(["migrate", str(store08), str(target), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["nodes"] == sum(len(r["node_ids"]) for r in RUNS.values())
    assert out["seals"] == {r["root_id"]: r["seal_digest"] for r in RUNS.values()}
    assert store08.read_bytes() == before
    with SQLiteStore(target, read_only=True) as store:
        _assert_identical(store)
    # Not a 0.8 store / an existing target: exit 2 with a message naming the problem.
    assert main(["migrate", str(target), str(store08.parent / "other.db")]) == 2
    assert "not a pollard 0.8 store" in capsys.readouterr().err
    assert main(["migrate", str(store08), str(target)]) == 2
    assert "exists" in capsys.readouterr().err


def test_pollard_migrate_in_place_keeps_the_0_8_file(
    store08: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate", str(store08), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backup"] == f"{store08}.pollard-0.8.bak" and out["ok"] is True
    assert out["seals"] == {r["root_id"]: r["seal_digest"] for r in RUNS.values()}
    assert sqlite_module.is_legacy_store(Path(out["backup"]))
    with SQLiteStore(store08, read_only=True) as store:
        _assert_identical(store)
    assert main(["migrate", str(store08)]) == 2  # already migrated: nothing to do
    assert "not a pollard 0.8 store" in capsys.readouterr().err


def test_a_tampered_0_8_store_is_not_migrated(store08: Path) -> None:
    import sqlite3

    conn = sqlite3.connect(store08)
    conn.execute(
        "UPDATE nodes SET result = ? WHERE id = ?",
        ('{"text":"forged"}', RUNS["replay"]["node_ids"][1]),
    )
    conn.commit()
    conn.close()
    before = store08.read_bytes()
    with pytest.raises(IntegrityError, match="does not match its digest"):
        SQLiteStore(store08)
    assert store08.read_bytes() == before  # the transaction rolled back: still 0.8's layout
    assert sqlite_module.is_legacy_store(store08)
    assert sorted(p.name for p in store08.parent.iterdir()) == ["store08.db"]  # no backup left
    assert main(["migrate", str(store08), str(store08.parent / "new.db")]) == 1
    assert not (store08.parent / "new.db").exists()


def _never(*_args: object) -> Any:
    raise AssertionError("replay must not call the step function")


@pytest.mark.parametrize("read_only", [True, False])
def test_0_8_recordings_replay_with_their_ids(
    store08: Path, read_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Model calls, streams, registered tool calls (0.8's identity) and refusals all replay."""
    for name in ("_model", "_stream", "_lookup", "_send"):
        monkeypatch.setattr(SCRIPT, name, _never)
    with SQLiteStore(store08, read_only=read_only) as store:
        roots = SCRIPT.record(store, mode="replay")
        assert roots == {label: run["root_id"] for label, run in RUNS.items()}
        stored = sum(len(list(store.walk(root.id))) for root in store.roots())
        assert stored == sum(len(r["node_ids"]) for r in RUNS.values())  # nothing added


def test_bundles_from_0_8_import_with_identical_seals(tmp_path: Path) -> None:
    target = MemoryStore()
    for label, run in RUNS.items():
        report = import_subtree(FIXTURES / f"bundle08-{label}.json", target)
        assert (report.root_id, report.digest) == (run["root_id"], run["seal_digest"])
        assert report.imported == len(run["node_ids"])
    _assert_identical(target, ledger=False)  # import charges the ledger from node charges
    path = tmp_path / "bundle.sqlite"
    assert main(["import", str(FIXTURES / "bundle08-tools.json"), str(path)]) == 0


def test_our_export_writes_the_layout_0_8_imports(store08: Path, tmp_path: Path) -> None:
    """0.8.0's import accepted our files once the seal had its layout (checked with 0.8.0
    itself while this was written); it ignores the keys it does not know."""
    for label, run in RUNS.items():
        ours = tmp_path / f"{label}.json"
        assert main(["export", str(store08), run["root_id"], str(ours)]) == 0
        document = json.loads(ours.read_text())
        theirs = json.loads((FIXTURES / f"bundle08-{label}.json").read_text())
        assert document["format"] == theirs["format"] == "pollard/subtree/v1"
        assert document["seal"] == theirs["seal"]
        assert [n["id"] for n in document["nodes"]] == [n["id"] for n in theirs["nodes"]]
        keys = {key for node in theirs["nodes"] for key in node}
        assert all(set(node) == keys for node in document["nodes"])


def test_golden_vectors_ids_and_seals_match_0_8() -> None:
    """Recording the same steps today gives 0.8.0's ids and seals, except where documented:
    registered tool calls (no registry digest or description in the identity) and refusals
    (their payloads), which replay finds explicitly."""
    store = MemoryStore()
    roots = SCRIPT.record(store)
    assert roots == {label: run["root_id"] for label, run in RUNS.items()}
    for label in ("branching", "replay"):
        run = RUNS[label]
        assert [n.id for n in store.walk(run["root_id"])] == run["node_ids"]
        assert seal(store, run["root_id"]).digest == run["seal_digest"]
    ours = {n.id for label in RUNS for n in store.walk(roots[label])}
    for run in RUNS.values():
        for node_id, node in run["nodes"].items():
            registered = node["kind"] == "tool_call" and "registry_digest" in node["payload"]
            if node["kind"] != "refusal" and not registered:
                assert node_id in ours, node


# -- PostgreSQL ------------------------------------------------------------------------------


def _load_dump(dsn: str, schema: str) -> None:
    import psycopg

    lines = (FIXTURES / "pg08.sql").read_text().replace("__SCHEMA__", schema).splitlines()
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA {schema}")
        statement: list[str] = []
        rows = iter(lines)
        for line in rows:
            if not line.startswith("COPY "):
                statement.append(line)
                continue
            if statement:
                cur.execute("\n".join(statement))
                statement = []
            data = []
            for row in rows:
                if row == "\\.":
                    break
                data.append(row)
            with cur.copy(line) as copy:
                if data:
                    copy.write("\n".join(data) + "\n")
        if statement:
            cur.execute("\n".join(statement))


@pytest.fixture
def pg08(pg_dsn: str) -> Iterator[str]:
    """A fresh schema holding the store pollard 0.8.0 created; yields its DSN."""
    import psycopg

    schema = f"pollard_08_{uuid.uuid4().hex[:10]}"
    _load_dump(pg_dsn, schema)
    try:
        yield f"{pg_dsn}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.postgres
def test_postgres_store_from_0_8_migrates_and_replays(
    pg08: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = GOLDEN["postgres"]
    with pytest.raises(PollardError, match=r"pollard 0\.8"):
        PostgresStore(pg08, store_id=expected["store_id"], read_only=True)
    store = PostgresStore(pg08, store_id=expected["store_id"])
    try:
        for label, root_id in expected["roots"].items():
            assert seal(store, root_id).digest == expected["seal_digests"][label]
        assert verify(store).ok
        assert store.totals(expected["roots"]["budgeted"]) == {
            "steps": Decimal(3),
            "tokens": Decimal(126),
        }
        for name in ("_model", "_stream", "_lookup", "_send"):
            monkeypatch.setattr(SCRIPT, name, _never)
        assert SCRIPT.record(store, mode="replay") == expected["roots"]
    finally:
        store.close()
    assert store.migration_backup is not None and "pollard08_nodes" in store.migration_backup
    reopened = PostgresStore(pg08, store_id=expected["store_id"], read_only=True)  # migrated
    try:
        assert len(reopened.roots()) == len(expected["roots"])
    finally:
        reopened.close()
    import psycopg

    with psycopg.connect(pg08) as conn:  # the 0.8 tables are kept, as the backup
        kept = conn.execute("SELECT count(*) FROM pollard08_nodes").fetchone()
    assert kept == (sum(len(r["node_ids"]) for r in RUNS.values()),)


def test_async_and_hybrid_runs_serve_0_8_tool_calls_then_record_new_ones(
    store08: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AsyncRuntime replays a 0.8 registered call; hybrid serves it and records what is new
    under the current identity (the handler runs only for the new call)."""
    import asyncio

    from pollard import AsyncRuntime, Runtime
    from pollard.meters import StepMeter

    tools = RUNS["tools"]
    first = tools["node_ids"][1]
    calls: list[object] = []
    real = SCRIPT._lookup

    def counted(args: Any) -> Any:
        calls.append(args)
        return real(args)

    monkeypatch.setattr(SCRIPT, "_lookup", counted)

    async def replay() -> str:
        store = SQLiteStore(store08, read_only=True)
        rt = AsyncRuntime(store, registry=SCRIPT.registry(), mode="replay")
        async with rt, rt.run("tools") as run:
            node = await run.tool_call("lookup", {"order_id": "A-1"})
        store.close()
        return node.id

    assert asyncio.run(replay()) == first
    with Runtime(store08, meters=[StepMeter()], registry=SCRIPT.registry(), mode="hybrid") as rt:
        run = rt.run("tools")
        served = run.tool_call("lookup", {"order_id": "A-1"})
        fresh = run.tool_call("lookup", {"order_id": "A-3"})
    assert served.id == first and served.result == tools["nodes"][first]["result"]
    assert calls == [{"order_id": "A-3"}]  # the 0.8 call was served, not run again
    assert fresh.parent == first and "registry_digest" not in fresh.payload


def test_another_applications_nodes_table_is_not_taken_for_a_0_8_store(tmp_path: Path) -> None:
    import contextlib
    import sqlite3

    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE nodes (id TEXT, parent TEXT, label TEXT)")
    conn.execute("INSERT INTO nodes VALUES ('a', NULL, 'theirs')")
    conn.commit()
    conn.close()
    assert not sqlite_module.is_legacy_store(path)
    with contextlib.suppress(Exception):  # whatever the open says, it migrates nothing
        SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    rows = conn.execute("SELECT * FROM nodes").fetchall()
    conn.close()
    assert "pollard08_nodes" not in tables and rows == [("a", None, "theirs")]
    assert not list(tmp_path.glob("*.bak*"))


@pytest.mark.postgres
def test_pollard_migrate_in_place_on_postgres(
    pg08: str, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = GOLDEN["postgres"]
    spec = f"{pg08}#{expected['store_id']}"
    assert main(["runs", spec]) == 2  # not migrated yet: reading says what to do
    assert "`pollard migrate STORE`" in capsys.readouterr().err
    assert main(["migrate", spec, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and "pollard08_nodes" in out["backup"]
    assert out["seals"] == {expected["roots"][k]: v for k, v in expected["seal_digests"].items()}
    assert main(["migrate", spec]) == 2
    assert "no pollard 0.8 tables" in capsys.readouterr().err
    assert main(["runs", spec]) == 0


def test_a_0_8_run_opens_under_its_registry_and_refuses_another(store08: Path) -> None:
    """0.8 bound the run root to its registry digest (computed its way): the same registry
    opens the run, a different one is refused as 0.8 refuses it."""
    from pollard import ActionSpec, Registry, Runtime

    with Runtime(
        SQLiteStore(store08, read_only=True), registry=SCRIPT.registry(), mode="replay"
    ) as rt:
        assert rt.run("tools").root_id == RUNS["tools"]["root_id"]
    other = Registry(
        [*SCRIPT.registry(), ActionSpec("extra", "1", "More.", {"type": "object"}, False)]
    )
    with (
        Runtime(SQLiteStore(store08, read_only=True), registry=other, mode="replay") as rt,
        pytest.raises(IntegrityError, match="different registry"),
    ):
        rt.run("tools")
