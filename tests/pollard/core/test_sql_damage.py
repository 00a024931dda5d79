"""A damaged SQL store raises IntegrityError (not KeyError), so ``pollard verify`` exits 1."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pollard import Runtime, SQLiteStore
from pollard.cli import main
from pollard.errors import IntegrityError

DAMAGE = {
    "missing_blob": ("DELETE FROM blobs", "interned blob"),
    "unknown_kind": ("UPDATE nodes SET kind = 9 WHERE kind = 3", "unknown kind code 9"),
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
    with SQLiteStore(db) as store, pytest.raises(IntegrityError, match=message):
        store.get(note.id)
    capsys.readouterr()
    assert main(["verify", str(db)]) == 1
    assert message in capsys.readouterr().err
