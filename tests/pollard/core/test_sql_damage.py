"""A damaged SQL store raises IntegrityError (not KeyError), so ``pollard verify`` exits 1."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from pollard import Budget, Runtime, SQLiteStore, WindowMeter
from pollard.cli import main
from pollard.errors import IntegrityError
from pollard.meters import StepMeter

DAMAGE = {
    "missing_blob": ("DELETE FROM blobs", "interned blob"),
    "unknown_kind": ("UPDATE nodes SET kind = 9 WHERE kind = 3", "unknown kind code 9"),
    # A row that is not JSON names its node (it was a bare JSONDecodeError from the store).
    "meta_not_json": ("UPDATE nodes SET meta = 'garbage' WHERE kind = 3", "invalid JSON .*: node"),
    "payload_not_json": ("UPDATE nodes SET payload = '{x' WHERE kind = 3", "invalid JSON .*: node"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damage_is_an_integrity_error_and_verify_exits_1(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    with Runtime(db) as runtime, runtime.run("damaged") as run:
        note = run.note({"big": "x" * 5000})  # interned: the string lives in the blobs table
    assert main(["verify", str(db)]) == 0
    statement, message = DAMAGE[case]
    with sqlite3.connect(db) as con:
        con.execute(statement)
    con.close()
    with SQLiteStore(db) as store, pytest.raises(IntegrityError, match=message) as caught:
        store.get(note.id)
    assert note.id in str(caught.value) or case == "missing_blob"
    capsys.readouterr()
    assert main(["verify", str(db)]) == 1
    assert re.search(message, capsys.readouterr().err)


LEDGER_DAMAGE = {
    "total_text": ("UPDATE ledger SET total = 'abc' WHERE meter = 'steps'", "'abc'"),
    "total_nan": ("UPDATE ledger SET total = 'NaN' WHERE meter = 'steps'", "'NaN'"),
    "reservation_text": (
        "INSERT INTO reservations VALUES ('r1', 1e12, 'garbage')",
        "reservation is damaged",
    ),
    "reservation_amount": (
        """INSERT INTO reservations VALUES ('r1', 1e12, '[["b", "x", "steps", "zz"]]')""",
        "'zz'",
    ),
    "window_amount": ("UPDATE window_events SET amount = 'zz'", "window event holds 'zz'"),
}


@pytest.mark.parametrize("case", sorted(LEDGER_DAMAGE))
def test_a_damaged_ledger_row_is_an_integrity_error_with_a_hint(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Budget checks read these rows on every step; a row pollard never wrote must not surface as
    # a bare decimal.InvalidOperation or JSONDecodeError from deep inside a step.
    db = tmp_path / "runs.db"
    meters = [StepMeter(), WindowMeter("requests", 100, 3600)]
    step = {"text": "x"}
    with Runtime(db, meters=meters) as runtime:
        run = runtime.run("damaged", budget=Budget(steps=10))
        run.model_call({"model": "m", "i": 0}, fn=lambda _p: step)
    statement, message = LEDGER_DAMAGE[case]
    with sqlite3.connect(db) as con:
        con.execute(statement)
    con.close()
    with Runtime(db, meters=meters) as runtime:
        run = runtime.run("damaged", budget=Budget(steps=10))
        with pytest.raises(IntegrityError, match=message) as caught:
            run.model_call({"model": "m", "i": 1}, fn=lambda _p: step)
    assert caught.value.hint is not None and "restore the store" in caught.value.hint
    if case.startswith("total"):
        capsys.readouterr()
        assert main(["report", str(db), "damaged"]) == 1
        assert capsys.readouterr().err.startswith("pollard: integrity: the ledger total")
