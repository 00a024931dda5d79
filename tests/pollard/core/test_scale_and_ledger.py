"""Deep runs without recursion, the ledger invariant, and interning invisibility."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pollard import Budget, BudgetExceeded, MemoryStore, Node, Runtime, SQLiteStore, seal, verify
from pollard._core._ledger import to_decimal


@pytest.mark.slow
def test_a_100000_step_run_needs_no_recursion() -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # anything recursive over depth would fail loudly
    try:
        rt = Runtime(MemoryStore())
        run = rt.run("deep", budget=Budget(steps=100_000))

        def fn(payload: Any) -> dict[str, Any]:
            return {"text": "k"}

        for i in range(100_000):
            run.model_call({"model": "m", "i": i % 7}, fn=fn)
        assert run.depth == 100_000
        with pytest.raises(BudgetExceeded):
            run.model_call({"model": "m"}, fn=fn)
        assert rt.store.totals(run.root_id)["steps"] == 100_000
        assert len(seal(rt.store, run.root_id).entries) == 100_002
        assert rt.resume("deep").depth == 100_001
        assert verify(rt.store, run.cursor_id).nodes == 100_002
    finally:
        sys.setrecursionlimit(limit)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.integers(0, 5), st.integers(0, 5)),
        st.tuples(st.just("fail"), st.just(0), st.just(0)),
        st.tuples(st.just("branch"), st.integers(1, 4), st.just(0)),
        st.tuples(st.just("rollback"), st.just(0), st.just(0)),
        st.tuples(st.just("note"), st.integers(0, 3), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(ops)
def test_ledger_totals_equal_the_sum_of_node_charges(script: list[tuple[str, int, int]]) -> None:
    rt = Runtime(MemoryStore())
    runs = [rt.run("prop", budget=Budget(tokens=40, steps=12))]
    scopes = {runs[0].root_id}
    for op, a, b in script:
        run = runs[-1]
        try:
            if op == "call":
                run.model_call(
                    {"model": "m", "a": a, "b": b},
                    fn=lambda p, a=a, b=b: {"usage": {"input_tokens": a, "output_tokens": b}},
                )
            elif op == "fail":
                with pytest.raises(RuntimeError):
                    run.model_call({"model": "m"}, fn=_boom)
            elif op == "branch":
                child = run.branch(budget=Budget(steps=a))
                scopes.add(child.cursor_id)
                runs.append(child)
            elif op == "rollback" and run.depth > 1:
                run.rollback()
            elif op == "note":
                run.note({"n": a})
        except BudgetExceeded:
            run.rollback()
    store = rt.store
    for scope in scopes:
        expected: dict[str, Decimal] = {}
        for node in store.walk(scope):
            for meter, amount in (node.meta.get("charges") or {}).items():
                expected[meter] = expected.get(meter, Decimal(0)) + to_decimal(amount)
        totals = store.totals(scope)
        if scope == runs[0].root_id or totals:
            assert totals == {k: v for k, v in expected.items() if v}
    assert to_decimal(store.totals(runs[0].root_id).get("steps", 0)) <= 12


def _boom(payload: Any) -> Any:
    raise RuntimeError("failed")


def test_interning_keeps_ids_and_content_identical(tmp_path: Path) -> None:
    big = "x" * 4096
    payloads = [{"model": "m", "system": big, "turn": i, "echo": "é" * 600} for i in range(20)]
    ids = {}
    for name, intern in (("on", True), ("off", False)):
        path = tmp_path / f"{name}.db"
        with SQLiteStore(path, intern_payloads=intern) as store:
            run = Runtime(store).run("intern")
            for payload in payloads:
                run.model_call(payload, fn=lambda p: {"text": big})
            ids[name] = [n.id for n in store.walk(run.root_id)]
            assert store.get(run.cursor_id).payload == payloads[-1]
            assert store.get(run.cursor_id).result == {"text": big}
            assert verify(store).ok
        ids[name + "_size"] = path.stat().st_size  # type: ignore[assignment]
    assert ids["on"] == ids["off"]
    assert ids["on_size"] < ids["off_size"] / 3  # type: ignore[operator]


def test_content_shaped_like_a_ref_is_stored_plainly(tmp_path: Path) -> None:
    tricky = {"__pollard_ref": "0" * 64, "pad": "y" * 2000}
    with SQLiteStore(tmp_path / "t.db", intern_threshold=16) as store:
        root = Node.create("root", None, {"run": "r"})
        store.put(root)
        node = Node.create("note", root.id, {"a": tricky, "b": "z" * 100})
        store.put(node)
        assert store.get(node.id).payload == {"a": tricky, "b": "z" * 100}
        assert store.compact() == 0


def test_growing_histories_share_their_stored_prefix(tmp_path: Path) -> None:
    def build(path: Path, intern: bool) -> tuple[list[str], Any]:
        with SQLiteStore(path, intern_payloads=intern) as store:
            run = Runtime(store).run("history")
            history: list[dict[str, Any]] = []
            for turn in range(60):
                history.append(
                    {
                        "role": "user",
                        "content": f"turn {turn} " + "w" * 1500,
                        "n": [turn, turn * 0.5],
                    }
                )
                run.model_call(
                    {"model": "m", "messages": list(history)}, fn=lambda p: {"text": "ok"}
                )
            ids = [n.id for n in store.walk(run.root_id)]
            last = store.get(run.cursor_id)
            assert last.payload["messages"] == history
            assert isinstance(last.payload["messages"][3]["n"][1], float)
            assert store.compact() == 0  # every chunk and string blob is still referenced
            assert store.get(run.cursor_id).payload["messages"] == history
        return ids, path.stat().st_size

    shared_ids, shared = build(tmp_path / "shared.db", True)
    plain_ids, plain = build(tmp_path / "plain.db", False)
    assert shared_ids == plain_ids
    assert shared * 4 < plain


def test_compact_removes_blobs_of_dropped_histories(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "gc.db") as store:
        run = Runtime(store).run("gc")
        history = [{"role": "user", "content": f"m{i} " + "z" * 1200} for i in range(20)]
        node = run.model_call({"model": "m", "messages": history}, fn=lambda p: {"text": "ok"})
        assert store.drop_nodes([node.id]) == 1
        assert store.compact() > 0


def test_very_long_lists_pack_their_chunk_refs_too(tmp_path: Path) -> None:
    from pollard.stores._sql import CHUNK

    items = [{"i": i, "text": f"message {i}"} for i in range(CHUNK * CHUNK * 2 + 5)]
    with SQLiteStore(tmp_path / "deep.db") as store:
        run = Runtime(store).run("deep-list")
        node = run.model_call({"model": "m", "messages": items}, fn=lambda p: {"text": "ok"})
        longer = run.model_call(
            {"model": "m", "messages": [*items, {"i": -1}]}, fn=lambda p: {"text": "ok"}
        )
        assert store.get(node.id).payload["messages"] == items
        assert store.get(longer.id).payload["messages"][-1] == {"i": -1}
        assert store.compact() == 0
        assert verify(store).ok
        store.drop_nodes([longer.id, node.id])
        assert store.compact() > 0
