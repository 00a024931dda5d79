"""export_subtree / import_subtree and gc through the Python API, on every store backend."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pollard import (
    Budget,
    IntegrityError,
    MemoryStore,
    Node,
    NodeKind,
    Runtime,
    SQLiteStore,
    Store,
    export_subtree,
    gc,
    import_subtree,
    merge,
    seal,
)
from pollard._cli.text import render_tree
from pollard._edge._view import build_view
from pollard.html import render_html

from ._trees import build_sample

Factory = Callable[[Path, str], Store]


def _memory(_tmp: Path, _name: str) -> Store:
    return MemoryStore()


def _sqlite(tmp: Path, name: str) -> Store:
    return SQLiteStore(tmp / f"{name}.db")


def _hashrope(_tmp: Path, _name: str) -> Store:
    hashrope = pytest.importorskip("pollard.stores.hashrope", reason="hashrope extra missing")
    return hashrope.HashRopeStore()  # type: ignore[no-any-return]


@pytest.fixture(params=[_memory, _sqlite, _hashrope], ids=["memory", "sqlite", "hashrope"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    opened: list[Store] = []

    def factory(directory: Path, name: str) -> Store:
        store = request.param(directory, name)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def test_export_import_round_trip_keeps_the_seal(make: Factory, tmp_path: Path) -> None:
    source = make(tmp_path, "source")
    sample = build_sample(source)
    file = tmp_path / "run.json"
    exported = export_subtree(source, sample.root, file)
    assert exported.nodes == 8 and exported.digest == seal(source, sample.root).digest
    for target in (make(tmp_path, "target"), MemoryStore()):
        report = import_subtree(file, target, expected_digest=exported.digest)
        assert (report.imported, report.existing) == (8, 0)
        assert seal(target, sample.root).digest == exported.digest
        assert target.get(sample.model).meta == source.get(sample.model).meta
        # Importing settles the recorded charges into the target's running totals.
        totals = target.totals(sample.root)
        assert (totals["tokens"], totals["steps"]) == (135, 4)
        again = import_subtree(file, target)
        assert (again.imported, again.existing) == (0, 8)


def test_import_refuses_a_conflicting_target_before_writing(make: Factory, tmp_path: Path) -> None:
    source = make(tmp_path, "source")
    sample = build_sample(source)
    file = tmp_path / "run.json"
    export_subtree(source, sample.root, file)
    target = make(tmp_path, "target")
    root = source.get(sample.root)
    target.put(Node.create(NodeKind.ROOT, None, root.payload))
    target.put(
        Node.create(
            NodeKind.MODEL_CALL, root.id, source.get(sample.model).payload, result={"text": "other"}
        )
    )
    with pytest.raises(IntegrityError, match="different result"):
        import_subtree(file, target)
    assert not target.exists(sample.anchor)


def test_an_inner_subtree_needs_its_parent(make: Factory, tmp_path: Path) -> None:
    source = make(tmp_path, "source")
    sample = build_sample(source)
    file = tmp_path / "inner.json"
    assert export_subtree(source, sample.anchor, file).nodes == 4
    with pytest.raises(KeyError, match="not in the target store"):
        import_subtree(file, make(tmp_path, "empty"))
    target = make(tmp_path, "target")
    merge(target, source)
    assert import_subtree(file, target).existing == 4


def test_gc_drops_pruned_subtrees_and_reports_survivor_seals(make: Factory, tmp_path: Path) -> None:
    store = make(tmp_path, "gc")
    sample = build_sample(store)
    before = store.totals(sample.root)
    report = gc(store, "drop-pruned")
    assert report.removed_count == 2 and report.removed_blobs == 0
    assert not store.exists(sample.pruned) and not store.exists(sample.pruned_child)
    assert store.exists(sample.anchor)
    assert report.survivor_seals == {sample.root: seal(store, sample.root).digest}
    assert store.totals(sample.root) == before  # spend is never refunded
    assert gc(store, "drop-pruned").removed_count == 0
    assert gc(store, "compact").survivor_seals == report.survivor_seals
    with pytest.raises(ValueError, match="drop-pruned' or 'compact'"):
        gc(store, "everything")  # type: ignore[arg-type]


def test_compact_removes_blobs_that_only_dropped_nodes_used(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "blobs.db") as store:
        sample = build_sample(store)
        big = Node.create(
            NodeKind.NOTE, sample.pruned_child, {"status": "x" * 4096}, meta={"pruned": True}
        )
        store.put(big)
        assert gc(store, "drop-pruned").removed_count == 3
        assert gc(store, "compact").removed_blobs >= 1
        assert gc(store, "compact").removed_blobs == 0


def test_a_recorded_run_moves_between_stores_with_its_budget(tmp_path: Path) -> None:
    with Runtime(tmp_path / "a.db") as runtime, runtime.run("job", budget=Budget(tokens=10)) as run:
        run.model_call(
            {"model": "m"},
            fn=lambda _p: {"text": "a", "usage": {"input_tokens": 4, "output_tokens": 4}},
        )
        root = run.root_id
        export_subtree(run.store, root, tmp_path / "job.json")
    with Runtime(tmp_path / "b.db") as runtime:
        import_subtree(tmp_path / "job.json", runtime.store)
        assert runtime.store.totals(root)["tokens"] == 8
        resumed = runtime.resume("job", budget=Budget(tokens=10))
        resumed.model_call(
            {"model": "m", "n": 2},
            fn=lambda _p: {"text": "b", "usage": {"input_tokens": 2, "output_tokens": 2}},
        )
        from pollard import BudgetExceeded

        with pytest.raises(BudgetExceeded):
            resumed.model_call({"model": "m", "n": 3}, fn=lambda _p: {"text": "c"})


def test_deep_chains_need_no_recursion(tmp_path: Path) -> None:
    depth = sys.getrecursionlimit() + 500
    store = MemoryStore()
    parent = Node.create(NodeKind.ROOT, None, {"run": "deep"})
    store.put(parent)
    root = parent.id
    for i in range(depth):
        node = Node.create(NodeKind.NOTE, parent.id, {"i": i}, meta={"charges": {"steps": "1"}})
        store.put(node)
        parent = node
    rows = build_view(store.walk(root))
    assert len(rows) == depth + 1 and rows[-1].depth == depth and rows[-1].indent == 0
    assert render_tree(rows).count("\n") == depth
    assert f'"n":{depth + 1},' in render_html(store, root)  # every row in the page's data
    copy = MemoryStore()
    assert merge(copy, store).copied == depth + 1
    report = export_subtree(store, root, tmp_path / "deep.json")
    assert import_subtree(tmp_path / "deep.json", MemoryStore()).imported == depth + 1
    assert json.loads((tmp_path / "deep.json").read_text())["seal"]["digest"] == report.digest


def test_a_pruned_run_is_dropped_whole_and_leaves_the_survivors(
    make: Factory, tmp_path: Path
) -> None:
    store = make(tmp_path, "runs")
    kept = build_sample(store, "kept")
    dropped = build_sample(store, "dropped")
    store.update_meta(dropped.root, {"pruned": True})
    report = gc(store, "drop-pruned")
    assert report.removed_count == 8 + 2
    assert [root.id for root in store.roots()] == [kept.root]
    assert set(report.survivor_seals) == {kept.root}


def test_a_malformed_node_record_is_named_once(tmp_path: Path) -> None:
    store = MemoryStore()
    sample = build_sample(store)
    path = tmp_path / "run.json"
    export_subtree(store, sample.root, path)
    document = json.loads(path.read_text())
    document["nodes"][0]["payload"] = {"run": "triage"}  # an object, not its JSON text
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError) as caught:
        import_subtree(path, MemoryStore())
    message = str(caught.value)
    assert message == (
        "not a valid pollard/subtree/v1 file: nodes[0].payload must be a JSON text string"
    )
