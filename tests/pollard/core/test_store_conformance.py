"""One conformance suite for every Store backend."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from pollard import IntegrityError, Node, NodeKind, Store
from pollard._core._ledger import BudgetClaim, WindowClaim, WindowEvent

from .conftest import FakeClock, StoreFactory


def _root(label: str = "run") -> Node:
    return Node.create("root", None, {"run": label})


def _chain(store: Store, length: int) -> list[Node]:
    root = _root()
    store.put(root)
    nodes = [root]
    for i in range(length):
        node = Node.create("note", nodes[-1].id, {"i": i})
        store.put(node)
        nodes.append(node)
    return nodes


def test_put_get_exists_round_trip(store: Store) -> None:
    root = _root()
    assert store.put(root) is True
    assert store.put(root) is False
    assert store.exists(root.id)
    child = Node.create(
        "model_call",
        root.id,
        {"model": "m", "t": 0.5},
        result={"text": "hi", "p": 0.25},
        meta={"charges": {"steps": "1"}},
    )
    store.put(child)
    got = store.get(child.id)
    assert got == child
    assert isinstance(got.payload["t"], float)
    got.check()
    assert store.find("0" * 64) is None
    with pytest.raises(KeyError):
        store.get("0" * 64)


def test_reads_are_detached(store: Store) -> None:
    root = _root()
    store.put(root)
    got = store.get(root.id)
    got.payload["run"] = "changed"
    got.meta["x"] = 1
    again = store.get(root.id)
    assert again.payload == {"run": "run"} and "x" not in again.meta


def test_put_requires_parent_and_valid_content(store: Store) -> None:
    orphan = Node.create("note", "a" * 64, {"x": 1})
    with pytest.raises(KeyError):
        store.put(orphan)
    root = _root()
    store.put(root)
    forged = Node(id="b" * 64, parent=root.id, kind=NodeKind.NOTE, attempt=0, payload={"x": 1})
    with pytest.raises(IntegrityError):
        store.put(forged)
    good = Node.create("model_call", root.id, {"x": 1}, result={"a": 1})
    tampered = Node(
        id=good.id,
        parent=root.id,
        kind=NodeKind.MODEL_CALL,
        attempt=0,
        payload={"x": 1},
        result={"a": 2},
        result_digest=good.result_digest,
    )
    with pytest.raises(IntegrityError):
        store.put(tampered)


def test_different_result_is_recorded_as_conflict(store: Store) -> None:
    root = _root()
    store.put(root)
    first = Node.create("model_call", root.id, {"q": 1}, result={"text": "a"})
    second = Node.create("model_call", root.id, {"q": 1}, result={"text": "b"})
    store.put(first)
    assert store.put(second) is False
    stored = store.get(first.id)
    assert stored.result == {"text": "a"}
    assert stored.meta["result_conflicts"] == [
        {"result_digest": second.result_digest, "result": {"text": "b"}}
    ]
    assert stored.meta["result_conflict_count"] == 1
    store.put(second)
    assert len(store.get(first.id).meta["result_conflicts"]) == 1


def test_result_conflicts_stay_bounded_when_a_node_is_re_recorded(store: Store) -> None:
    # Regression: every differing re-recording was appended, so a node re-recorded on every run
    # of a script grew (and cost more to rewrite) without bound.
    root = _root()
    store.put(root)
    node = Node.create("model_call", root.id, {"q": 1}, result={"text": "first"})
    store.put(node)
    again = [
        Node.create("model_call", root.id, {"q": 1}, result={"text": f"run {i}"}) for i in range(6)
    ]
    sizes = []
    for other in again:
        assert store.put(other) is False
        sizes.append(len(json.dumps(store.get(node.id).meta)))
    meta = store.get(node.id).meta
    assert store.get(node.id).result == {"text": "first"}
    assert meta["result_conflicts"] == [
        {"result_digest": again[0].result_digest, "result": {"text": "run 0"}},
        {"result_digest": again[-1].result_digest, "result": {"text": "run 5"}},
    ]
    assert meta["result_conflict_count"] == 6
    assert len(set(sizes[1:])) == 1  # constant size once the first and the latest are kept
    store.put(again[-1])  # a kept result again: idempotent
    store.put(again[0])
    assert store.get(node.id).meta == meta


def test_children_sorted_by_kind_then_id(store: Store) -> None:
    root = _root()
    store.put(root)
    made = [
        Node.create(kind, root.id, {"i": i}) for i in range(3) for kind in ("note", "model_call")
    ]
    for node in made:
        store.put(node)
    kids = store.children(root.id)
    assert [(n.kind.value, n.id) for n in kids] == sorted((n.kind.value, n.id) for n in made)
    assert store.children(kids[0].id) == []


def test_update_meta_is_a_shallow_merge(store: Store) -> None:
    root = _root()
    store.put(root)
    store.update_meta(root.id, {"a": {"x": 1}, "b": 2})
    updated = store.update_meta(root.id, {"a": {"y": 2}})
    assert updated.meta["a"] == {"y": 2} and updated.meta["b"] == 2
    assert store.get(root.id).meta == updated.meta
    with pytest.raises(KeyError):
        store.update_meta("c" * 64, {"a": 1})


def test_walk_is_preorder_and_iterative(store: Store) -> None:
    nodes = _chain(store, 3000)  # deeper than the recursion limit
    walked = [n.id for n in store.walk(nodes[0].id)]
    assert walked == [n.id for n in nodes]
    branch = Node.create("note", nodes[1].id, {"side": True})
    store.put(branch)
    order = [n.id for n in store.walk(nodes[0].id)]
    assert order.index(branch.id) > order.index(nodes[1].id)
    assert len(order) == len(nodes) + 1


def test_roots_sorted_by_label_then_id(store: Store) -> None:
    for label in ("b", "a", "c"):
        store.put(_root(label))
    assert [r.payload["run"] for r in store.roots()] == ["a", "b", "c"]


def test_drop_nodes(store: Store) -> None:
    nodes = _chain(store, 3)
    assert store.drop_nodes([nodes[3].id, nodes[2].id, "d" * 64]) == 2
    assert not store.exists(nodes[2].id)
    assert store.children(nodes[1].id) == []
    assert [n.id for n in store.walk(nodes[0].id)] == [nodes[0].id, nodes[1].id]


def test_compact_removes_only_unreferenced_blobs_and_expired_reservations(
    make_store: StoreFactory,
) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    root = _root()
    store.put(root)
    kept = Node.create("note", root.id, {"text": "k" * 3000})
    dropped = Node.create("note", root.id, {"text": "d" * 3000, "more": "e" * 3000})
    store.put(kept)
    store.put(dropped)
    store.drop_nodes([dropped.id])
    interning = bool(getattr(store, "intern_payloads", False))
    # The dropped node's two interned strings go; the kept node's stays and still reads back.
    assert store.compact() == (2 if interning else 0)
    assert store.compact() == 0
    assert store.get(kept.id).payload == {"text": "k" * 3000}
    held = store.reserve([BudgetClaim("s", "steps", Decimal(1), Decimal(1))], lease_seconds=10)
    assert held.reservation_id is not None
    clock.advance(11)
    store.compact()  # sweeps the expired reservation: it can no longer be renewed
    assert store.renew(held.reservation_id, 10) is False


def test_commit_settles_charges_atomically(store: Store) -> None:
    root = _root()
    store.put(root)
    node = Node.create("model_call", root.id, {"q": 1}, result={"text": "a"})
    charges = {"steps": Decimal(1), "usd": Decimal("0.0025")}
    assert store.commit(node, scopes=[root.id, "scope-b"], charges=charges) is True
    assert store.totals(root.id) == charges
    assert store.totals("scope-b") == charges
    assert store.commit(node, scopes=[root.id], charges=charges) is False
    assert store.totals(root.id) == charges  # nothing written on a duplicate id


def test_reserve_refuses_when_exhausted_or_estimate_does_not_fit(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    root = _root()
    store.put(root)
    limit = Decimal(2)
    claim = BudgetClaim(root.id, "steps", limit, Decimal(1))
    first = store.reserve([claim], lease_seconds=60)
    second = store.reserve([claim], lease_seconds=60)
    assert first.ok and second.ok and first.reservation_id and second.reservation_id
    third = store.reserve([claim], lease_seconds=60)
    assert third.shortfall is not None and third.shortfall.remaining == 0
    store.release(second.reservation_id)
    node = Node.create("model_call", root.id, {"q": 1}, result={})
    store.commit(
        node, scopes=[root.id], charges={"steps": Decimal(1)}, reservation_id=first.reservation_id
    )
    assert store.reserve([claim], lease_seconds=60).ok
    node2 = Node.create("model_call", node.id, {"q": 2}, result={})
    store.commit(node2, scopes=[root.id], charges={"steps": Decimal(1)})
    exhausted = store.reserve([BudgetClaim(root.id, "steps", limit, None)], lease_seconds=60)
    assert exhausted.shortfall is not None
    assert exhausted.shortfall.spent == 2 and exhausted.shortfall.requested == 0


def test_leases_expire_and_renew(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    claim = BudgetClaim("scope", "steps", Decimal(1), Decimal(1))
    held = store.reserve([claim], lease_seconds=10)
    assert held.reservation_id is not None
    assert not store.reserve([claim], lease_seconds=10).ok
    clock.advance(8)
    assert store.renew(held.reservation_id, 10)
    clock.advance(8)
    assert not store.reserve([claim], lease_seconds=10).ok
    clock.advance(3)
    assert store.reserve([claim], lease_seconds=10).ok
    assert store.renew(held.reservation_id, 10) is False


def test_queues_keep_arrival_order_renew_and_drop_the_gone(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store: Any = make_store(clock=clock)
    if not hasattr(store, "queue_join"):
        pytest.skip(f"{type(store).__name__} keeps no queues")
    claim = WindowClaim("gate", "queue", Decimal(100), 60, Decimal(1))
    first, second, third = (
        store.reserve([], [claim], lease_seconds=10).reservation_id for _ in range(3)
    )
    assert [store.queue_join("q", rid) for rid in (first, second, third)] == [0, 1, 2]
    assert store.queue_join("q", second) == 1  # joining twice keeps the place
    assert store.queue_join("other", third) == 0  # queues are independent
    store.release(first)  # released: it leaves the line at once
    assert store.queue_position("q", first, 10) is None
    assert store.queue_position("q", third, 10) == 1
    clock.advance(8)
    assert store.queue_position("q", third, 10) == 1  # renewed until 18
    clock.advance(4)  # the second one's lease ended at 10: the third moves up
    assert store.queue_position("q", second, 10) is None
    assert store.queue_position("q", third, 10) == 0
    assert store.renew(third, 10)
    assert store.queue_join("q", "never-reserved") is None


def test_check_without_hold_reserves_nothing(store: Store) -> None:
    claim = BudgetClaim("scope", "steps", Decimal(1), Decimal(1))
    assert store.reserve([claim], lease_seconds=10, hold=False).reservation_id is None
    assert store.reserve([claim], lease_seconds=10).ok


def test_windows_slide(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    root = _root()
    store.put(root)
    window = WindowClaim("k", "requests", Decimal(2), 60, Decimal(1))
    parent = root.id
    for i in range(2):
        admitted = store.reserve([], [window], lease_seconds=30)
        assert admitted.ok
        node = Node.create("model_call", parent, {"i": i}, result={})
        store.commit(
            node,
            scopes=[root.id],
            charges={"requests": Decimal(1)},
            windows=[WindowEvent("k", "requests", Decimal(1))],
            reservation_id=admitted.reservation_id,
        )
        parent = node.id
        clock.advance(10)
    refused = store.reserve([], [window], lease_seconds=30)
    assert refused.shortfall is not None and refused.shortfall.reason == "window"
    assert refused.shortfall.window_seconds == 60
    clock.advance(41)  # the first event is now older than 60 s
    assert store.reserve([], [window], lease_seconds=30).ok


def test_runs_seal_identically_on_every_store(store: Store) -> None:
    from pollard import MemoryStore, Runtime, seal

    def record(target: Store) -> str:
        run = Runtime(target).run("same", budget=None)
        run.note({"status": "start", "weight": 0.5})
        run.model_call({"model": "m", "t": 0.2}, fn=lambda p: {"text": "x" * 2000})
        run.rollback()
        run.tool_call("t", {"a": [1, 2]}, fn=lambda a: {"ok": True})
        return run.root_id

    reference = MemoryStore()
    root = record(reference)
    assert record(store) == root
    assert seal(store, root).digest == seal(reference, root).digest
    assert [n.id for n in store.walk(root)] == [n.id for n in reference.walk(root)]


def test_threads_never_overspend_an_exact_budget(store: Store) -> None:
    import threading

    from pollard import Budget, BudgetExceeded, Runtime

    rt = Runtime(store)
    ran: list[int] = []

    def fn(payload: object) -> dict[str, str]:
        ran.append(1)
        return {"text": "ok"}

    def worker(index: int) -> None:
        run = rt.run("shared", budget=Budget(steps=7))
        for i in range(5):
            try:
                run.model_call({"model": "m", "w": index, "i": i}, fn=fn)
            except BudgetExceeded:
                run.rollback()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ran) == 7
    assert store.totals(rt.run("shared").root_id)["steps"] == 7


def test_claims_have_one_winner_per_key(store: Store) -> None:
    import threading

    assert store.claim("k", "first") == "first"
    assert store.claim("k", "second") == "first"  # taken: the winner is reported
    assert store.claim("other", "second") == "second"  # keys are independent
    winners: list[str] = []
    barrier = threading.Barrier(6)

    def claimer(index: int) -> None:
        barrier.wait()
        winners.append(store.claim("race", f"owner-{index}"))

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 6 and len(set(winners)) == 1  # every claimer sees the same winner
    with pytest.raises(TypeError):
        store.claim("k", 1)  # type: ignore[arg-type]


def test_rollback_and_checkout_follow_the_ancestry(store: Store) -> None:
    from pollard import Runtime

    runtime = Runtime(store)
    run = runtime.run("lineage")
    nodes = [run.note({"i": i}) for i in range(6)]
    assert run.rollback(steps=2).id == nodes[3].id
    branch = run.note({"i": "branch"})
    assert branch.parent == nodes[3].id
    ancestry = getattr(store, "ancestry", None)
    if ancestry is not None:  # the SQL stores' one-query chain
        assert ancestry(branch.id) == [branch.id, *(n.id for n in reversed(nodes[:4])), run.root_id]
    with pytest.raises(ValueError, match="not an ancestor"):
        run.rollback(node_id=nodes[5].id)


def test_checkout_of_a_node_outside_the_run_is_the_documented_value_error(store: Store) -> None:
    from pollard import Runtime

    runtime = Runtime(store)
    run = runtime.run("here")
    tip = run.note({"i": 1})
    other = runtime.run("elsewhere").note({"i": 2})
    for node_id in (other.id, "0" * 64, "not-an-id"):
        # An unknown id was a bare KeyError on every store, unlike a node of another run.
        with pytest.raises(ValueError, match="is not in run 'here'"):
            run.checkout(node_id)
    assert run.cursor_id == tip.id


def test_a_bad_branch_attempt_is_refused_before_the_branch_is_counted(store: Store) -> None:
    from pollard import Runtime

    runtime = Runtime(store)
    run = runtime.run("forks")
    for attempt in ("1", -1, True, 1.0):
        # "1" was a bare `can only concatenate str` TypeError, and -1 shifted later anchors.
        with pytest.raises(ValueError, match="attempt must be an int >= 0"):
            run.branch(attempt=attempt)  # type: ignore[arg-type]
    assert run.branch().cursor.attempt == 0
