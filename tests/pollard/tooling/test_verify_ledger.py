"""``pollard verify`` checks the budget ledger too: a row pollard never wrote is a finding.

A total, reservation or window event changed behind pollard's back makes the next budgeted step
raise `IntegrityError` (see ``tests/pollard/core/test_sql_damage.py``); verify must say so (exit 1,
naming the row) instead of reporting ``ok``, on SQLite and on PostgreSQL, without writing.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import Budget, MemoryStore, PostgresStore, Runtime, SQLiteStore, WindowMeter, verify
from pollard.cli import main
from pollard.meters import StepMeter
from tests.pollard._postgres import drop_store, fresh_store_id, row_count

METERS = [StepMeter(), WindowMeter("requests", 100, 3600)]
STEP = {"text": "x"}

# (statement, the findings' node_id: "scope" for the damaged run's root id, their message). The
# store holds two runs; a window's events are shared by both (one finding per damaged event).
DAMAGE = {
    "total_text": (
        "UPDATE {p}ledger SET total = 'abc' WHERE meter = 'steps' AND scope = '{root}'",
        "scope",
        "'abc'",
    ),
    "total_nan": (
        "UPDATE {p}ledger SET total = 'NaN' WHERE meter = 'steps' AND scope = '{root}'",
        "scope",
        "'NaN'",
    ),
    "reservation_text": (
        "INSERT INTO {p}reservations ({c}id, expires, claims) VALUES ({v}'r1', 1e12, 'garbage')",
        "",
        "reservation 'r1': a stored budget reservation is damaged",
    ),
    "reservation_amount": (
        "INSERT INTO {p}reservations ({c}id, expires, claims) "
        """VALUES ({v}'r1', 1e12, '[["b", "x", "steps", "zz"]]')""",
        "",
        "reservation 'r1': the reservation of 'steps' on 'x' holds 'zz'",
    ),
    "window_amount": (
        "UPDATE {p}window_events SET amount = 'zz'",
        "",
        "'requests' window event at .* holds 'zz'",
    ),
}


def _record(store: SQLiteStore | PostgresStore) -> tuple[str, str]:
    """Two budgeted runs; returns their root ids (``damaged`` first)."""
    with Runtime(store, meters=METERS) as runtime:
        roots = []
        for label in ("damaged", "other"):
            run = runtime.run(label, budget=Budget(steps=10))
            run.model_call({"model": "m", "run": label}, fn=lambda _p: STEP)
            roots.append(run.root_id)
    return roots[0], roots[1]


def _verify(spec: str, capsys: pytest.CaptureFixture[str], *root: str) -> tuple[int, Any]:
    capsys.readouterr()
    code = main(["verify", spec, *root, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _check_reported(case: str, spec: str, root: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, owner, message = DAMAGE[case]
    code, report = _verify(spec, capsys)
    assert code == 1
    assert report["ok"] is False
    expected = 2 if case == "window_amount" else 1
    assert len(report["findings"]) == expected, report["findings"]
    for finding in report["findings"]:
        assert finding["node_id"] == (root if owner == "scope" else "")
        assert re.search(message, finding["message"]), finding
        if owner == "scope":
            assert root in finding["message"]
    # The text form names the row too and counts it.
    capsys.readouterr()
    assert main(["verify", spec]) == 1
    out = capsys.readouterr().out
    assert re.search(message, out) and f"{expected} finding(s)" in out


# -- SQLite ---------------------------------------------------------------------------------------


def _sqlite_damage(db: Path, case: str, root: str) -> None:
    statement = DAMAGE[case][0].format(p="", c="", v="", root=root)
    with sqlite3.connect(db) as con:
        con.execute(statement)
    con.close()


def _side_files(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name != db.name)


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_sqlite_ledger_row_is_a_verify_finding(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        root, _ = _record(store)
    assert _verify(str(db), capsys)[0] == 0
    _sqlite_damage(db, case, root)
    _check_reported(case, str(db), root, capsys)
    assert _side_files(db) == []  # verify opened the file read-only
    with SQLiteStore(db, read_only=True) as store:
        assert not verify(store).ok


def test_an_undamaged_sqlite_ledger_verifies_ok_and_verify_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        root, _ = _record(store)
        assert verify(store).ok and verify(store, root, subtree=True).ok
    before = db.read_bytes()
    code, report = _verify(str(db), capsys)
    assert (code, report["ok"], report["findings"]) == (0, True, [])
    assert _verify(str(db), capsys, "damaged")[0] == 0
    assert db.read_bytes() == before and _side_files(db) == []


def test_verify_reports_an_expired_damaged_reservation_without_sweeping_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The next step would delete it unread, but pollard never wrote it; verify only reads.
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        _record(store)
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO reservations VALUES ('old', 0, 'garbage')")
    con.close()
    code, report = _verify(str(db), capsys)
    assert code == 1 and "reservation 'old'" in json.dumps(report["findings"])
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM reservations").fetchone() == (1,)
    con.close()


def test_verify_root_checks_its_own_totals_and_the_store_wide_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        damaged, other = _record(store)
        with Runtime(store, meters=METERS) as runtime:
            run = runtime.run("damaged", budget=Budget(steps=10))
            branch = run.branch(budget=Budget(steps=5))
            inner = branch.model_call({"model": "m", "in": 1}, fn=lambda _p: STEP)
    with sqlite3.connect(db) as con:
        con.execute(
            "UPDATE ledger SET total = 'abc' WHERE scope = ? AND meter = 'steps'", (damaged,)
        )
    con.close()
    # A total belongs to its scope's node: verified with it, not with another run.
    assert _verify(str(db), capsys, "damaged")[0] == 1
    assert _verify(str(db), capsys, "other")[0] == 0
    # A node's ancestry reaches the run root, whose total its steps check.
    code, report = _verify(str(db), capsys, inner.id)
    assert code == 1 and [f["node_id"] for f in report["findings"]] == [damaged]
    with SQLiteStore(db, read_only=True) as store:
        assert [f.node_id for f in verify(store, inner.id).findings] == [damaged]
        assert verify(store, other).ok
    # Reservations and window events are read by every run's admission: checked for any ROOT.
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO reservations VALUES ('r1', 1e12, 'garbage')")
    con.close()
    code, report = _verify(str(db), capsys, "other")
    assert code == 1 and "reservation 'r1'" in json.dumps(report["findings"])


def test_a_memory_store_has_no_ledger_rows_to_check() -> None:
    store = MemoryStore()
    with Runtime(store, meters=METERS) as runtime:
        run = runtime.run("memory", budget=Budget(steps=10))
        run.model_call({"model": "m"}, fn=lambda _p: STEP)
    assert verify(store).ok and verify(store).nodes == 2


# -- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture
def store_id(pg_dsn: str) -> Iterator[str]:
    name = fresh_store_id("verify")
    yield name
    drop_store(pg_dsn, name)


def _pg_execute(dsn: str, statement: str, store_id: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, {"store": store_id})


@pytest.mark.postgres
@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_postgres_ledger_row_is_a_verify_finding(
    case: str, pg_dsn: str, store_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other_id = fresh_store_id("verify")
    try:
        with PostgresStore(pg_dsn, store_id=store_id) as store:
            root, _ = _record(store)
        with PostgresStore(pg_dsn, store_id=other_id) as store:
            _record(store)  # a second store in the same tables: its rows are not this one's
        spec = f"{pg_dsn}#{store_id}"
        assert _verify(spec, capsys)[0] == 0
        statement = DAMAGE[case][0].format(p="pollard_", c="store_id, ", v="%(store)s, ", root=root)
        if statement.startswith("UPDATE"):
            statement += " AND " if " WHERE " in statement else " WHERE "
            statement += "store_id = %(store)s"
        _pg_execute(pg_dsn, statement, store_id)
        tables = ("ledger", "reservations", "window_events", "nodes")
        counts = {t: row_count(pg_dsn, t, store_id) for t in tables}
        _check_reported(case, spec, root, capsys)
        # verify is a read: nothing swept, nothing added.
        assert {t: row_count(pg_dsn, t, store_id) for t in counts} == counts
        # The other store in the same tables is undamaged.
        assert _verify(f"{pg_dsn}#{other_id}", capsys)[0] == 0
        with PostgresStore(pg_dsn, store_id=store_id, read_only=True) as store:
            assert not verify(store).ok
    finally:
        drop_store(pg_dsn, other_id)


@pytest.mark.postgres
def test_an_undamaged_postgres_ledger_verifies_ok(
    pg_dsn: str, store_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with PostgresStore(pg_dsn, store_id=store_id) as store:
        root, _ = _record(store)
        assert verify(store).ok and verify(store, root, subtree=True).ok
    code, report = _verify(f"{pg_dsn}#{store_id}", capsys)
    assert (code, report["ok"], report["findings"], report["nodes"]) == (0, True, [], 4)
    assert _verify(f"{pg_dsn}#{store_id}", capsys, "damaged")[0] == 0
