"""Reading commands never write (no side files, no new stores); damaged SQLite is a finding."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pollard import Runtime, SQLiteStore

from ._cli import one_error_line, pollard


def _record(path: Path, notes: int = 40) -> None:
    with Runtime(path) as runtime:
        run = runtime.run("reads")
        for i in range(notes):
            run.note({"i": i, "text": "x" * 2000})


def _side_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


@pytest.mark.parametrize("command", [["runs"], ["verify"], ["show", "reads"], ["report", "reads"]])
def test_reading_a_wal_store_leaves_no_side_files(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "runs.db"
    _record(path)
    assert _side_files(path) == []  # a closed writer checkpoints and removes its files
    done = pollard(command[0], path, *command[1:])
    assert done.code == 0, done.err
    assert _side_files(path) == []


def test_replay_from_a_path_leaves_no_side_files(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _record(path, notes=1)
    with Runtime(path, mode="replay") as runtime:
        assert runtime.store.roots()
    assert _side_files(path) == []


def test_a_read_only_store_still_sees_a_live_writers_log(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as writer:
        _record(path, notes=1)
        runtime = Runtime(writer)
        runtime.run("live").note({"n": 1})  # in the writer's -wal file, not yet checkpointed
        with SQLiteStore(path, read_only=True) as reader:
            labels = [root.payload["run"] for root in reader.roots()]
    assert labels == ["live", "reads"]


def test_reading_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    for command in (["runs"], ["verify"]):
        line = one_error_line(pollard(command[0], tmp_path / "missing.db"))
        assert "no such store" in line and "missing.db" in line
    assert list(tmp_path.iterdir()) == []


def _damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 2, len(data), 4096):  # past the schema page: b-tree pages
        data[offset + 8 : offset + 400] = bytes(range(256)) + bytes(392 - 256)
    path.write_bytes(bytes(data))


def test_verify_reports_a_damaged_sqlite_file_as_a_finding(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    _record(path)
    _damage(path)
    done = pollard("verify", path, "--json")
    assert done.code == 1, (done.out, done.err)
    assert "Traceback" not in done.err
    report = done.json()
    assert report["ok"] is False
    assert any("damaged" in f["message"] for f in report["findings"])
    shown = pollard("show", path, "reads")
    assert shown.code == 1 and "Traceback" not in shown.err, shown.err


def test_a_file_that_is_not_sqlite_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(os.urandom(8192))
    line = one_error_line(pollard("verify", path))
    assert "cannot open" in line
