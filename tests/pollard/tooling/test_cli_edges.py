"""The CLI on damaged stores, foreign files and awkward arguments (issue 8 review)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pollard import MemoryStore, SQLiteStore, export_subtree

from ._cli import one_error_line, pollard, tamper
from ._trees import Sample, build_sample


@pytest.fixture
def sample_db(tmp_path: Path) -> tuple[Path, Sample]:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        sample = build_sample(store)
    return path, sample


def test_verify_finds_nodes_cut_off_from_their_run(sample_db: tuple[Path, Sample]) -> None:
    path, smp = sample_db
    # Deleting a middle node hides its descendants from every walk from the roots.
    tamper(path, f"DELETE FROM nodes WHERE id = X'{smp.left}'")
    result = pollard("verify", path, "--json")
    assert result.code == 1, result.err
    report = result.json()
    assert report["ok"] is False
    findings = {f["node_id"]: f["message"] for f in report["findings"]}
    assert set(findings) == {smp.tool}
    assert f"its parent {smp.left} is not stored" in findings[smp.tool]
    text = pollard("verify", path)
    assert text.code == 1 and "unreachable from any run" in text.out


def test_verify_names_the_missing_ancestor_and_cycles(sample_db: tuple[Path, Sample]) -> None:
    path, smp = sample_db
    tamper(path, f"DELETE FROM nodes WHERE id = X'{smp.anchor}'")
    findings = {
        f["node_id"]: f["message"] for f in pollard("verify", path, "--json").json()["findings"]
    }
    assert set(findings) == {smp.left, smp.tool, smp.refusal}
    assert f"its ancestor {smp.left} has a parent {smp.anchor}" in findings[smp.tool]
    # A cycle: the pruned note now hangs under its own child.
    tamper(path, f"UPDATE nodes SET parent = X'{smp.pruned_child}' WHERE id = X'{smp.pruned}'")
    findings = {
        f["node_id"]: f["message"] for f in pollard("verify", path, "--json").json()["findings"]
    }
    assert "its ancestry has a cycle" in findings[smp.pruned]
    assert "its ancestry has a cycle" in findings[smp.pruned_child]


def test_a_stored_row_that_is_not_json_is_an_integrity_error(
    sample_db: tuple[Path, Sample],
) -> None:
    path, smp = sample_db
    tamper(path, f"UPDATE nodes SET payload = '{{not json' WHERE id = X'{smp.model}'")
    for args in (("verify", path), ("show", path, "triage"), ("seal", path, "triage")):
        line = one_error_line(pollard(*args), code=1)
        assert line.startswith("pollard: integrity: a stored node holds invalid JSON"), line


def test_a_file_that_is_not_a_pollard_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE users (name TEXT)")
    connection.close()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for path in (foreign, empty):
        for args in (("runs", path), ("verify", path), ("gc", path, "compact")):
            line = one_error_line(pollard(*args))
            assert line == f"pollard: {path} is not a pollard store (it has no pollard tables)"
    with sqlite3.connect(foreign) as connection:
        tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
    connection.close()
    assert tables == [("users",)]  # gc did not create pollard's tables in it
    assert empty.read_bytes() == b""


def test_a_failed_merge_or_import_leaves_no_new_store_behind(
    sample_db: tuple[Path, Sample], tmp_path: Path
) -> None:
    path, smp = sample_db
    inner = tmp_path / "inner.json"
    assert pollard("export", path, smp.anchor, inner).code == 0
    fresh = tmp_path / "fresh.db"
    assert "not in the target store" in one_error_line(pollard("import", inner, fresh))
    assert not fresh.exists()

    tampered = tmp_path / "tampered.db"
    assert pollard("merge", tampered, path).code == 0
    tamper(tampered, f"UPDATE nodes SET result = '{{\"queued\":false}}' WHERE id = X'{smp.tool}'")
    dest = tmp_path / "dest.db"
    assert one_error_line(pollard("merge", dest, tampered), code=1).startswith(
        "pollard: integrity:"
    )
    assert list(tmp_path.glob("dest.db*")) == []
    # An existing destination is kept whatever happens.
    assert pollard("merge", dest, path).code == 0
    assert pollard("merge", dest, tampered).code == 1
    assert dest.exists() and pollard("verify", dest).code == 0


def test_output_files_are_checked_before_anything_is_written(
    sample_db: tuple[Path, Sample], tmp_path: Path
) -> None:
    path, _ = sample_db
    directory = tmp_path / "out"
    directory.mkdir()
    cases = [
        (("show", path, "triage", "--html", ""), "pollard: --html needs a file name"),
        (("seal", path, "triage", "--output", ""), "pollard: --output needs a file name"),
        (("export", path, "triage", directory), f"pollard: cannot write {directory}: it is"),
        (("seal", path, "triage", "--output", directory), f"pollard: cannot write {directory}"),
        (("show", path, "triage", "--html", directory), f"pollard: cannot write {directory}"),
        (
            ("export", path, "triage", tmp_path / "no" / "x.json"),
            f"directory does not exist: {tmp_path / 'no'}",
        ),
    ]
    for args, message in cases:
        assert message in one_error_line(pollard(*args))
    assert list(tmp_path.glob("*.tmp")) == [] and list(directory.iterdir()) == []


def test_an_output_file_that_is_the_store_being_read_is_refused(
    sample_db: tuple[Path, Sample],
) -> None:
    path, _ = sample_db
    # A typo that names the ledger as the output would replace the ledger with a page or report.
    before = path.read_bytes()
    cases = [
        ("show", path, "triage", "--html", path),
        ("seal", path, "triage", "--output", path),
        ("export", path, "triage", path),
        ("export", path, "triage", path.parent / ".." / path.parent.name / path.name),
        ("seal", path, "triage", "--output", f"{path}-wal"),
    ]
    for args in cases:
        assert "it is the store being read" in one_error_line(pollard(*args)), args
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists()
    assert pollard("verify", path).code == 0


def test_an_export_file_that_cannot_be_replaced_is_named_in_the_error(
    sample_db: tuple[Path, Sample], tmp_path: Path
) -> None:
    path, _ = sample_db
    # The temporary file export writes beside FILE is its own business; the message names FILE.
    taken = tmp_path / "taken.json"
    taken.mkdir()
    (taken / "keep").write_text("x")
    line = one_error_line(pollard("export", path, "triage", f"{taken}/"))
    assert "it is a directory" in line
    (tmp_path / "blocked.json.tmp").mkdir()
    line = one_error_line(pollard("export", path, "triage", tmp_path / "blocked.json"))
    assert line.startswith(f"pollard: cannot write {tmp_path / 'blocked.json'}: "), line
    assert ".tmp" not in line


def test_export_subtree_removes_its_temporary_file_when_the_target_cannot_be_written(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    sample = build_sample(store)
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(OSError):
        export_subtree(store, sample.root, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_root_accepts_the_short_id_that_show_prints_for_any_node(
    sample_db: tuple[Path, Sample],
) -> None:
    path, smp = sample_db
    shown = pollard("show", path, smp.tool[:8], "--json").json()
    assert shown["root_id"] == smp.tool
    assert pollard("report", path, smp.refusal[:6], "--json").json()["root_id"] == smp.refusal
    # Too short for an inner node (only run roots match any prefix) or not hex: no match.
    assert "no node or run matches" in one_error_line(pollard("show", path, smp.tool[:3]))
    assert "no node or run matches" in one_error_line(pollard("show", path, "zzzz"))


def test_an_ambiguous_inner_prefix_asks_for_more(tmp_path: Path) -> None:
    from pollard import Node, NodeKind

    root = Node.create(NodeKind.ROOT, None, {"run": "many"})
    seen: dict[str, Node] = {}
    index = 0
    while True:  # two notes whose ids share their first 4 hex digits (a few hundred tries)
        node = Node.create(NodeKind.NOTE, root.id, {"status": str(index)})
        index += 1
        if node.id[:4] in seen and not root.id.startswith(node.id[:4]):
            pair = (seen[node.id[:4]], node)
            break
        seen[node.id[:4]] = node
    path = tmp_path / "many.db"
    with SQLiteStore(path) as store:
        for item in (root, *pair):
            store.put(item)
    prefix = pair[0].id[:4]
    assert f"{prefix!r} matches 2 nodes" in one_error_line(pollard("show", path, prefix))
    assert pollard("show", path, pair[1].id[:12], "--json").json()["root_id"] == pair[1].id


def test_an_unexpected_error_is_one_line_and_not_an_integrity_exit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from pollard._cli import commands
    from pollard.cli import main

    def broken(*_: object) -> int:
        raise RuntimeError("driver exploded\nsecond line")

    monkeypatch.setitem(commands.COMMANDS, "runs", broken)
    assert main(["runs", str(tmp_path / "x.db")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "pollard: unexpected RuntimeError: driver exploded second line\n"


def test_options_may_come_between_positionals(
    sample_db: tuple[Path, Sample], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pollard.cli import main

    path, smp = sample_db
    other = tmp_path / "other.db"
    with SQLiteStore(other) as store:
        build_sample(store)
    # An optional or repeated positional after an option was an "unrecognized argument".
    assert main(["verify", str(path), "--json", "triage"]) == 0
    assert json.loads(capsys.readouterr().out)["roots"] == 1
    assert main(["runs", str(path), "--json", str(other)]) == 0
    assert {r["store"] for r in json.loads(capsys.readouterr().out)["runs"]} == {
        str(path),
        str(other),
    }
    merged = tmp_path / "merged.db"
    assert main(["merge", str(merged), str(path), "--json", str(other)]) == 0
    assert len(json.loads(capsys.readouterr().out)["sources"]) == 2
    assert main(["show", "--json", str(path), smp.root]) == 0
    assert json.loads(capsys.readouterr().out)["root_id"] == smp.root
    # Extra or unknown arguments are still refused, naming them.
    assert main(["show", str(path), "triage", "extra"]) == 2
    assert "unrecognized arguments: extra" in capsys.readouterr().err
    assert main(["verify", str(path), "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
