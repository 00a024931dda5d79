"""Runtime semantics: budgets before steps, refusals, modes, branches, failures, streaming."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import (
    Budget,
    BudgetExceeded,
    MemoryStore,
    MissingRecording,
    NodeKind,
    Runtime,
    SQLiteStore,
    Store,
    WindowMeter,
    recompute_charges,
)
from pollard._core._canon import payload_digest
from pollard.meters import CostMeter, StepMeter, TokenMeter

from .conftest import FakeClock, StoreFactory


def usage_fn(tokens_in: int = 2, tokens_out: int = 2) -> Any:
    calls: list[Any] = []

    def fn(payload: Any) -> dict[str, Any]:
        calls.append(payload)
        return {"text": "ok", "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}

    fn.calls = calls  # type: ignore[attr-defined]
    return fn


def test_refuses_once_spent_reaches_limit_and_records_refusal(store: Store) -> None:
    fn = usage_fn()
    run = Runtime(store).run("t", budget=Budget(tokens=8))
    run.model_call({"model": "m", "i": 0}, fn=fn)
    run.model_call({"model": "m", "i": 1}, fn=fn)
    with pytest.raises(BudgetExceeded) as info:
        run.model_call({"model": "m", "i": 2}, fn=fn)
    assert len(fn.calls) == 2  # refused before running
    refusal = store.get(info.value.refusal_id)
    assert refusal.kind is NodeKind.REFUSAL and run.cursor_id == refusal.id
    assert refusal.payload == {
        "reason": "budget",
        "meter": "tokens",
        "requested": "0",
        "remaining": "0",
        "blocked_kind": "model_call",
        "blocked_payload_digest": payload_digest({"model": "m", "i": 2}),
    }
    assert info.value.meter == "tokens"
    # An exhausted meter says what was spent ("requested 0, remaining 0" explained nothing).
    assert str(info.value) == "tokens budget refused a model_call: 8 of 8 already spent"
    assert run.report()["spent"]["tokens"] == 8


def test_overshooting_actual_stands_and_later_steps_are_refused(store: Store) -> None:
    run = Runtime(store).run("t", budget=Budget(tokens=5))
    run.model_call({"model": "m"}, fn=usage_fn(2, 2))
    node = run.model_call({"model": "m", "n": 2}, fn=usage_fn(2, 2))
    assert node.meta["charges"]["tokens"] == 4
    assert store.totals(run.root_id)["tokens"] == 8
    with pytest.raises(
        BudgetExceeded, match=r"^tokens budget refused a model_call: 8 of 5 already"
    ):
        run.model_call({"model": "m", "n": 3}, fn=usage_fn())


def test_exact_step_estimate_refuses_before_overspending(store: Store) -> None:
    run = Runtime(store).run("t", budget=Budget(steps=2))
    run.model_call({"model": "m", "i": 1}, fn=usage_fn())
    run.tool_call("lookup", {"q": 1}, fn=lambda payload: {"hits": payload["args"]["q"]})
    with pytest.raises(BudgetExceeded) as info:
        run.model_call({"model": "m", "i": 3}, fn=usage_fn())
    assert store.get(info.value.refusal_id).payload["meter"] == "steps"


def test_estimated_refusal_is_marked() -> None:
    class Estimator:
        def estimate_input_tokens(self, payload: Any) -> int:
            return 10

    rt = Runtime(meters=[StepMeter(), TokenMeter(Estimator(), reserved_output_tokens=5)])
    run = rt.run("t", budget=Budget(tokens=12))
    with pytest.raises(BudgetExceeded) as info:
        run.model_call({"model": "m"}, fn=usage_fn())
    payload = rt.store.get(info.value.refusal_id).payload
    assert payload["estimated"] == "true" and payload["requested"] == "15"
    assert payload["remaining"] == "12"
    assert str(info.value) == "tokens budget refused a model_call: requested 15, remaining 12 of 12"


def test_meters_argument_never_drops_token_accounting() -> None:
    rt = Runtime(meters=[WindowMeter("requests", 10, 60)])
    names = {m.name for m in rt.meters}
    assert {"requests", "steps", "tokens"} <= names
    run = rt.run("t")
    node = run.model_call({"model": "m"}, fn=usage_fn(3, 4))
    assert node.meta["charges"]["tokens"] == 7


def test_budget_without_meter_is_rejected() -> None:
    with pytest.raises(ValueError, match="usd"):
        Runtime().run("t", budget=Budget(usd=1))


def test_depth_limit_is_absolute_tree_depth() -> None:
    run = Runtime().run("t", budget=Budget(depth=2))
    run.note({"a": 1})
    run.model_call({"model": "m"}, fn=usage_fn())
    with pytest.raises(BudgetExceeded) as info:
        run.note({"b": 2})
    assert info.value.meter == "depth"


def test_window_works_on_every_store(make_store: StoreFactory) -> None:
    clock = FakeClock()
    store = make_store(clock=clock)
    rt = Runtime(store, meters=[WindowMeter("requests", 2, 60)])
    run = rt.run("t")
    run.model_call({"model": "m", "i": 1}, fn=usage_fn())
    run.model_call({"model": "m", "i": 2}, fn=usage_fn())
    with pytest.raises(BudgetExceeded) as info:
        run.model_call({"model": "m", "i": 3}, fn=usage_fn())
    refusal = store.get(info.value.refusal_id).payload
    assert refusal["reason"] == "window" and refusal["window_seconds"] == 60
    clock.advance(61)
    other = rt.run("other")  # the default window is shared by every run of the store
    other.model_call({"model": "m"}, fn=usage_fn())


def test_cost_meter_is_exact_and_fails_closed() -> None:
    prices = {"m": {"input_per_1m": "2.50", "output_per_1m": "10"}}
    rt = Runtime(meters=[CostMeter(prices)])
    run = rt.run("t", budget=Budget(usd="1"))
    node = run.model_call({"model": "m"}, fn=usage_fn(1000, 100))
    assert node.meta["charges"]["usd"] == 0.0035
    assert run.report()["spent"]["usd"] == 0.0035
    with pytest.raises(ValueError, match="no price"):
        run.model_call({"model": "unknown"}, fn=usage_fn())


def test_failed_dispatch_is_recorded_and_charged(store: Store) -> None:
    run = Runtime(store).run("t", budget=Budget(steps=5))

    def boom(payload: Any) -> Any:
        raise TimeoutError("provider timed out")

    with pytest.raises(TimeoutError):
        run.model_call({"model": "m"}, fn=boom)
    with pytest.raises(TimeoutError):
        run.model_call({"model": "m"}, fn=boom)
    notes = [n for n in store.children(run.root_id) if n.kind is NodeKind.NOTE]
    assert len(notes) == 2  # two dispatches, two records
    assert {n.payload["event"] for n in notes} == {"call_failed"}
    assert all(n.meta["charges"]["steps"] == 1 for n in notes)
    assert store.totals(run.root_id)["steps"] == 2
    assert run.cursor_id == run.root_id


def test_a_repeated_dispatch_in_record_mode_is_the_same_node_and_still_charged(
    store: Store,
) -> None:
    rt = Runtime(store)
    run = rt.run("t")
    fn = usage_fn()
    first = run.model_call({"model": "m"}, fn=fn)
    run.rollback()
    second = run.model_call({"model": "m"}, fn=fn)
    assert len(fn.calls) == 2  # record mode executes every dispatch
    assert second.id == first.id and second.attempt == 0 and run.cursor_id == first.id
    assert store.totals(run.root_id)["tokens"] == 8  # both dispatches are charged
    assert run.report()["spent"]["tokens"] == 8
    repeats = [n for n in store.children(run.root_id) if n.payload.get("event") == "call_repeated"]
    assert len(repeats) == 1 and repeats[0].payload["node"] == first.id
    assert repeats[0].meta["charges"]["tokens"] == 4
    audit = recompute_charges(store, run.root_id)  # the tree accounts for every dispatch
    assert (audit["steps"], audit["tokens"]) == (2, 8)  # numbers, like run.report()


def test_hybrid_serves_and_persists_avoided(store: Store) -> None:
    fn = usage_fn()
    Runtime(store).run("t").model_call({"model": "m"}, fn=fn)
    run = Runtime(store, mode="hybrid").run("t")
    node = run.model_call({"model": "m"}, fn=fn)
    assert len(fn.calls) == 1
    # Avoided equals what the recorded step was charged (seconds included, when it took any).
    # (a report lists every meter, at zero when nothing was charged to it)
    avoided = run.report()["avoided"]
    assert avoided == dict.fromkeys(avoided, 0) | node.meta["charges"]
    assert avoided["steps"] == 1 and avoided["tokens"] == 4
    assert set(run.report()["spent"]) == {"depth", "seconds", "steps", "tokens"}
    assert not any(run.report()["spent"].values())
    assert avoided == dict.fromkeys(avoided, 0) | store.get(node.id).meta["avoided"]
    new = run.model_call({"model": "m", "next": True}, fn=fn)
    assert len(fn.calls) == 2 and new.parent == node.id


def test_replay_never_calls_fn_never_writes_and_explains_misses(tmp_path: Path) -> None:
    path = tmp_path / "rec.db"
    with Runtime(path) as rt:
        run = rt.run("t")
        run.note({"status": "start"})
        run.model_call({"model": "m", "messages": ["hello"], "temperature": 0.2}, fn=usage_fn())
    before = path.stat().st_size

    def never(payload: Any) -> Any:
        raise AssertionError("replay must not call fn")

    with Runtime(SQLiteStore(path, read_only=True), mode="replay") as rt:
        run = rt.run("t")
        run.note({"status": "start"})
        node = run.model_call({"model": "m", "messages": ["hello"], "temperature": 0.2}, fn=never)
        assert node.result["text"] == "ok"
        assert run.report()["avoided"]["tokens"] == 4
        assert not any(run.report()["spent"].values())
        run.rollback()
        with pytest.raises(MissingRecording) as info:
            run.model_call({"model": "m", "messages": ["bye"], "temperature": 0.2}, fn=never)
        assert "$.messages[0]" in str(info.value)
        assert "model=m" in info.value.payload_summary
        with pytest.raises(MissingRecording):
            rt.run("missing")
    rt.store.close()
    assert path.stat().st_size == before


def test_replay_replays_recorded_refusals() -> None:
    store = MemoryStore()
    run = Runtime(store).run("t", budget=Budget(steps=1))
    run.model_call({"model": "m"}, fn=usage_fn())
    with pytest.raises(BudgetExceeded):
        run.model_call({"model": "m", "i": 2}, fn=usage_fn())
    replay = Runtime(store, mode="replay").run("t")
    replay.model_call({"model": "m"}, fn=usage_fn())
    with pytest.raises(BudgetExceeded, match="replay"):
        replay.model_call({"model": "m", "i": 2}, fn=usage_fn())


def test_branches_are_distinct_and_keep_the_parent_cursor() -> None:
    rt = Runtime()
    run = rt.run("t")
    run.model_call({"model": "m"}, fn=usage_fn())
    cursor = run.cursor_id
    a, b = run.branch(), run.branch()
    assert a.cursor_id != b.cursor_id and run.cursor_id == cursor
    assert a.cursor.payload == {"branch": True}
    anchors = (a.cursor_id, b.cursor_id)
    x = a.model_call({"model": "m", "q": "x"}, fn=usage_fn())
    y = b.model_call({"model": "m", "q": "x"}, fn=usage_fn())
    assert x.id != y.id
    # A re-run (hybrid) finds the same anchors in the same order.
    again = Runtime(rt.store, mode="hybrid").run("t")
    again.model_call({"model": "m"}, fn=usage_fn())
    assert (again.branch().cursor_id, again.branch().cursor_id) == anchors


def test_branch_budget_is_an_extra_scope() -> None:
    run = Runtime().run("t", budget=Budget(steps=10))
    branch = run.branch(budget=Budget(steps=1))
    branch.model_call({"model": "m"}, fn=usage_fn())
    with pytest.raises(BudgetExceeded):
        branch.model_call({"model": "m", "i": 2}, fn=usage_fn())
    run.model_call({"model": "m", "i": 3}, fn=usage_fn())
    assert run.store.totals(run.root_id)["steps"] == 2


def test_rollback_checkout_prune_and_resume() -> None:
    rt = Runtime()
    run = rt.run("t")
    a = run.note({"n": "a"})
    b = run.note({"n": "b"})
    c = run.note({"n": "c"})
    assert run.rollback(steps=2).id == a.id and run.depth == 1
    with pytest.raises(ValueError):
        run.rollback(c.id)
    side = run.note({"n": "side"})
    assert run.checkout(c.id).id == c.id and run.depth == 3
    pruned = run.prune()
    assert pruned.meta["pruned"] is True and run.cursor_id == b.id
    resumed = rt.resume("t")
    # Deepest unpruned leaves are b (its child is pruned) and side; ties go to the smaller id.
    assert resumed.cursor_id == min(b.id, side.id) and resumed.depth == 2
    with pytest.raises(KeyError):
        rt.resume("nope")
    with pytest.raises(ValueError):
        rt.run("t").prune()


def test_streaming_forwards_keeps_and_reemits_chunks() -> None:
    def stream(payload: Any) -> Iterator[dict[str, Any]]:
        yield {"delta": {"text": "Hel"}}
        yield {"delta": {"text": "lo"}}
        yield {"delta": {"usage": {"input_tokens": 1, "output_tokens": 2}}}

    seen: list[Any] = []
    rt = Runtime()
    run = rt.run("t")
    node = run.model_call({"model": "m"}, fn=stream, on_delta=seen.append, keep_chunks=True)
    assert node.result["text"] == "Hello" and len(node.result["chunks"]) == 3
    assert node.meta["charges"]["tokens"] == 3 and len(seen) == 3
    replayed: list[Any] = []
    again = Runtime(rt.store, mode="replay").run("t")
    again.model_call({"model": "m"}, fn=stream, on_delta=replayed.append, keep_chunks=True)
    assert replayed == seen


def test_fn_receives_a_detached_copy() -> None:
    def mutate(payload: Any) -> Any:
        payload["model"] = "changed"
        return {"text": "x"}

    node = Runtime().run("t").model_call({"model": "m"}, fn=mutate)
    assert node.payload == {"model": "m"}


def test_on_node_fires_for_new_nodes_and_errors_become_warnings() -> None:
    seen: list[str] = []
    rt = Runtime(on_node=lambda n: seen.append(n.kind.value))
    run = rt.run("t")
    run.model_call({"model": "m"}, fn=usage_fn())
    assert seen == ["root", "model_call"]

    def bad(node: Any) -> None:
        raise RuntimeError("hook failed")

    with pytest.warns(RuntimeWarning, match="hook failed"):
        Runtime(on_node=bad).run("u")


def test_report_uses_exact_decimal_strings() -> None:
    rt = Runtime(meters=[CostMeter({"m": {"input_per_1m": "0.1", "output_per_1m": "0.2"}})])
    run = rt.run("t")
    for _ in range(3):
        run.model_call({"model": "m", "i": _}, fn=usage_fn(1, 1))
    assert run.report()["spent"]["usd"] == 0.0000009
    assert run.report(exact=True)["total"]["usd"] == "0.0000009"


def test_an_inline_runtime_stays_open_while_its_run_is_used(tmp_path: Path) -> None:
    import gc

    with Runtime(tmp_path / "inline.db").run("triage", budget=Budget(tokens=100)) as run:
        gc.collect()
        node = run.model_call({"model": "m"}, fn=usage_fn())
        branch = run.branch()
        gc.collect()
        branch.note({"still": "open"})
    assert node.result["text"] == "ok"
    del run, branch
    gc.collect()  # the runtime and its SQLite connections are closed without a ResourceWarning


def test_recorded_dry_run_is_served_only_to_dry_runs_and_replay() -> None:
    from pollard._step._effects import drive_sync

    rt = Runtime()
    run = rt.run("dry")
    payload = {"tool": "send", "args": {"to": "a"}}
    dry = drive_sync(run._state.record_dry_run("tool_call", payload))
    assert dry.meta["dry_run"] is True and dry.result is None
    assert rt.store.totals(run.root_id)["steps"] == 1
    calls: list[Any] = []
    replay = Runtime(rt.store, mode="replay").run("dry")
    assert replay.tool_call("send", {"to": "a"}, fn=calls.append).id == dry.id
    hybrid = Runtime(rt.store, mode="hybrid").run("dry")
    real = hybrid.tool_call("send", {"to": "a"}, fn=lambda a: calls.append(a) or {"sent": True})
    assert calls == [payload] and real.attempt == 1 and real.result == {"sent": True}
