"""merge: verify before writing, idempotent union, conflicts recorded rather than overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollard import IntegrityError, MemoryStore, Node, NodeKind, SQLiteStore
from pollard._edge._merge import merge, union_meta

from ._cli import tamper
from ._trees import build_sample


def _ids(store: MemoryStore) -> set[str]:
    return {node.id for root in store.roots() for node in store.walk(root.id)}


def test_merge_copies_everything_and_is_idempotent() -> None:
    src, dst = MemoryStore(), MemoryStore()
    sample = build_sample(src)
    first = merge(dst, src)
    assert (first.copied, first.existing, first.result_conflicts, first.meta_conflicts) == (
        8,
        0,
        0,
        0,
    )
    assert _ids(dst) == _ids(src)
    for node_id in _ids(src):
        assert dst.get(node_id).meta == src.get(node_id).meta
        assert dst.get(node_id).result == src.get(node_id).result
    second = merge(dst, src)
    assert (second.copied, second.existing) == (0, 8)
    assert dst.get(sample.model).meta == src.get(sample.model).meta


def test_merge_settles_copied_charges_into_the_run_totals() -> None:
    src, dst = MemoryStore(), MemoryStore()
    sample = build_sample(src)
    merge(dst, src)
    merge(dst, src)  # a repeat must not double count
    totals = dst.totals(sample.root)
    assert totals["tokens"] == 135
    assert totals["steps"] == 4


def test_a_different_result_is_recorded_not_overwritten() -> None:
    a, b = MemoryStore(), MemoryStore()
    root = Node.create(NodeKind.ROOT, None, {"run": "r"})
    for store in (a, b):
        store.put(root)
    mine = Node.create(NodeKind.MODEL_CALL, root.id, {"model": "m"}, result={"text": "one"})
    theirs = Node.create(NodeKind.MODEL_CALL, root.id, {"model": "m"}, result={"text": "two"})
    a.put(mine)
    b.put(theirs)
    report = merge(a, b)
    assert report.result_conflicts == 1
    kept = a.get(mine.id)
    assert kept.result == {"text": "one"}
    assert kept.meta["result_conflicts"] == [
        {"result_digest": theirs.result_digest, "result": {"text": "two"}}
    ]
    again = merge(a, b)
    assert a.get(mine.id).meta["result_conflicts"] == kept.meta["result_conflicts"]
    assert again.copied == 0


def test_replay_merge_refuses_a_differing_result_before_writing() -> None:
    a, b = MemoryStore(), MemoryStore()
    root = Node.create(NodeKind.ROOT, None, {"run": "r"})
    a.put(root)
    b.put(root)
    a.put(Node.create(NodeKind.MODEL_CALL, root.id, {"model": "m"}, result={"text": "one"}))
    b.put(Node.create(NodeKind.MODEL_CALL, root.id, {"model": "m"}, result={"text": "two"}))
    extra = Node.create(NodeKind.NOTE, root.id, {"status": "new"})
    b.put(extra)
    with pytest.raises(IntegrityError, match="different result"):
        merge(a, b, replay=True)
    assert not a.exists(extra.id)


def test_metadata_is_unioned_and_scalar_conflicts_keep_the_destination() -> None:
    a, b = MemoryStore(), MemoryStore()
    a.put(
        Node.create(
            NodeKind.ROOT, None, {"run": "r"}, meta={"created_at": "A", "tags": ["x"], "only_a": 1}
        )
    )
    b.put(
        Node.create(
            NodeKind.ROOT,
            None,
            {"run": "r"},
            meta={"created_at": "B", "tags": ["y"], "pruned": True},
        )
    )
    root_id = a.roots()[0].id
    report = merge(a, b)
    assert report.meta_conflicts == 1
    meta = a.get(root_id).meta
    assert meta["created_at"] == "A"
    assert meta["tags"] == ["x", "y"]
    assert meta["only_a"] == 1 and meta["pruned"] is True
    assert meta["merge_conflicts"] == [{"path": "/created_at", "values": ["A", "B"]}]
    merge(a, b)
    assert a.get(root_id).meta == meta


def test_a_tampered_source_stops_the_merge_before_any_write(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "src.db") as src:
        sample = build_sample(src)
    tamper(
        tmp_path / "src.db",
        f"UPDATE nodes SET result = '{{\"queued\":false}}' WHERE id = X'{sample.tool}'",
    )
    dst = MemoryStore()
    with (
        SQLiteStore(tmp_path / "src.db", read_only=True) as src,
        pytest.raises(IntegrityError, match=sample.tool),
    ):
        merge(dst, src)
    assert dst.roots() == []


def test_an_identity_collision_is_refused(tmp_path: Path) -> None:
    src = MemoryStore()
    sample = build_sample(src)
    with SQLiteStore(tmp_path / "dst.db") as dst:
        merge(dst, src)
    tamper(tmp_path / "dst.db", f"UPDATE nodes SET attempt = 7 WHERE id = X'{sample.model}'")
    with SQLiteStore(tmp_path / "dst.db") as dst, pytest.raises(IntegrityError, match="collision"):
        merge(dst, src)


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=8,
)
_meta = st.dictionaries(st.text(max_size=3), _json, max_size=4)


@settings(max_examples=60, deadline=None)
@given(_meta, _meta)
def test_union_never_drops_a_key_and_is_idempotent(dst: dict, src: dict) -> None:
    merged, _ = union_meta(dst, src)
    assert set(merged) == set(dst) | set(src)
    for key, value in dst.items():
        if not isinstance(value, (dict, list)):
            assert merged[key] == value  # the destination wins every scalar
    again, _ = union_meta(merged, src)
    assert again == merged
