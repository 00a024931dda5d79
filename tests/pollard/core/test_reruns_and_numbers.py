"""Programs a new user writes: re-runs replay, charges are numbers, replay of a missing store.

Each test is an ordinary script against the public API (issue 13's regressions).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import (
    Budget,
    MissingRecording,
    Node,
    PollardError,
    Runtime,
    SQLiteStore,
    recompute_charges,
    verify,
)
from pollard.meters import CostMeter, StepMeter, TokenMeter

PRICES = {"mock-1": {"input_per_1m": "0.1", "output_per_1m": "0.3"}}


class Model:
    """A fake model client that counts live calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, payload: Any) -> dict[str, Any]:
        self.calls += 1
        turn = payload["messages"][-1]["content"]
        return {"text": f"re: {turn}", "usage": {"input_tokens": 600, "output_tokens": 500}}


def script(rt: Runtime, model: Model) -> list[str]:
    """Ask, roll back, ask the same again, then go on: the ids of the path walked."""
    run = rt.run("triage", budget=Budget(tokens=100_000))
    ask = {"model": "mock-1", "messages": [{"role": "user", "content": "summarize"}]}
    first = run.model_call(ask, fn=model)
    run.rollback()
    again = run.model_call(ask, fn=model)  # the same call under the same parent
    follow = {"model": "mock-1", "messages": [{"role": "user", "content": "shorter"}]}
    last = run.model_call(follow, fn=model)
    return [first.id, again.id, last.id]


def test_record_rollback_reissue_then_replay_runs_to_the_end_with_no_live_call(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    recording = Model()
    with Runtime(path) as rt:
        recorded = script(rt, recording)
    assert recording.calls == 3
    assert recorded[0] == recorded[1]  # the re-issued call is the same node

    replaying = Model()
    with Runtime(path, mode="replay") as rt:
        assert script(rt, replaying) == recorded
    assert replaying.calls == 0


def test_running_a_script_twice_against_one_store_still_replays(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    model = Model()
    with Runtime(path) as rt:
        once = script(rt, model)
    with Runtime(path) as rt:  # the same script again, in record mode
        twice = script(rt, model)
    assert twice == once and model.calls == 6  # record mode executes every dispatch
    with SQLiteStore(path, read_only=True) as store:
        root = store.get(once[0]).parent
        assert root is not None
        # Every dispatch is charged: six calls of 1,100 tokens, none lost, none double-noded.
        assert store.totals(root)["tokens"] == 6 * 1_100
        assert recompute_charges(store, root, exact=True)["tokens"] == "6600"
        assert verify(store).ok

    replaying = Model()
    with Runtime(path, mode="replay") as rt:
        assert script(rt, replaying) == once
    assert replaying.calls == 0


def test_a_script_re_run_with_a_differing_result_keeps_the_node_bounded(tmp_path: Path) -> None:
    # Regression: each re-run whose result differed (a duration in the output, say) appended to
    # meta["result_conflicts"], so the node grew with every run and its rewrite cost more.
    path = tmp_path / "runs.db"
    ask = {"model": "mock-1", "messages": [{"role": "user", "content": "now?"}]}
    sizes = []
    for i in range(6):
        with Runtime(path) as rt:
            node = rt.run("clock").model_call(ask, fn=lambda payload, i=i: {"text": f"t{i}"})
        with SQLiteStore(path, read_only=True) as store:
            stored = store.get(node.id)
            sizes.append(len(json.dumps(stored.meta)))
    assert stored.result == {"text": "t0"}  # the first result stands
    assert [c["result"] for c in stored.meta["result_conflicts"]] == [
        {"text": "t1"},
        {"text": "t5"},
    ]
    assert stored.meta["result_conflict_count"] == 5
    assert len(set(sizes[2:])) == 1, sizes


def test_hybrid_serves_the_branch_it_records(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    model = Model()
    with Runtime(path, mode="hybrid") as rt:
        first = script(rt, model)
    assert model.calls == 2  # the re-issued call was served from the node just recorded
    with Runtime(path, mode="hybrid") as rt:
        assert script(rt, model) == first
    assert model.calls == 2
    with Runtime(path, mode="replay") as rt:
        assert script(rt, Model()) == first


def test_a_retry_after_a_failure_records_the_call_where_replay_finds_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    attempts = {"n": 0}

    def flaky(payload: Any) -> dict[str, Any]:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise ConnectionError("provider hiccup")
        return {"text": "ok", "usage": {"input_tokens": 1, "output_tokens": 1}}

    def agent(rt: Runtime, fn: Any) -> str:
        run = rt.run("retry")
        for _ in range(2):
            try:
                return run.model_call({"model": "mock-1", "q": "x"}, fn=fn).id
            except ConnectionError:
                continue
        raise AssertionError("unreachable")

    with Runtime(path) as rt:
        recorded = agent(rt, flaky)
        siblings = rt.store.children(rt.store.get(recorded).parent or "")
        events = [n.payload.get("event") for n in siblings if n.kind.value == "note"]
        assert events == ["call_failed"]
    with Runtime(path, mode="replay") as rt:
        assert agent(rt, Model()) == recorded


def test_charges_and_reports_are_numbers_users_can_compare_sum_and_serialize() -> None:
    rt = Runtime(meters=[StepMeter(), TokenMeter(), CostMeter(PRICES)])
    run = rt.run("numbers")
    model = Model()
    node = run.model_call({"model": "mock-1", "messages": [{"content": "a"}]}, fn=model)
    run.model_call({"model": "mock-1", "messages": [{"content": "b"}]}, fn=model)

    tokens = node.meta["charges"]["tokens"]
    assert type(tokens) is int and tokens > 1000
    usd = node.meta["charges"]["usd"]
    assert type(usd) is float and usd == pytest.approx(0.00021)
    report = run.report()
    assert report["spent"]["tokens"] == 2_200 and report["spent"]["steps"] == 2
    assert sum(report["spent"].values()) > 2_200
    assert json.loads(json.dumps(report)) == report
    # The exact form for audits: exact decimal strings, equal to the tree's own sum.
    exact = run.report(exact=True)
    assert exact["spent"]["usd"] == "0.00042"
    assert exact["total"] == recompute_charges(run.store, run.root_id, exact=True)
    rt.close()


def test_an_amount_a_float_cannot_hold_keeps_its_exact_text(tmp_path: Path) -> None:
    amount = Decimal("0.1234567890123456789")  # more digits than a float holds

    class Exact:
        name = "usd"

        def charge(self, kind: str, payload: Any, result: Any, meta: Any) -> Decimal:
            return amount

        def precheck_estimate(self, kind: str, payload: Any) -> None:
            return None

    with Runtime(tmp_path / "exact.db", meters=[Exact()]) as rt:
        run = rt.run("exact", budget=Budget(usd=1))
        node = run.model_call({"model": "m"}, fn=lambda p: {"text": "x"})
        node = run.store.get(node.id)
        assert isinstance(node.meta["charges"]["usd"], float)
        assert node.meta["charges_exact"] == {"usd": "0.1234567890123456789"}
        assert run.report(exact=True)["total"]["usd"] == "0.1234567890123456789"
        assert (
            recompute_charges(run.store, run.root_id, exact=True)["usd"] == "0.1234567890123456789"
        )
        assert verify(run.store).ok


def test_a_store_with_charges_written_as_strings_still_loads_and_audits(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:  # the earlier format: charges as exact decimal strings
        root = Node.create(
            "root", None, {"run": "old"}, meta={"created_at": "2026-01-01T00:00:00Z"}
        )
        store.put(root)
        meta = {"charges": {"steps": "1", "tokens": "5", "usd": "0.0000009"}}
        node = Node.create("model_call", root.id, {"model": "m"}, result={"text": "hi"}, meta=meta)
        charges = {"steps": Decimal(1), "tokens": Decimal(5), "usd": Decimal("0.0000009")}
        store.commit(node, scopes=[root.id], charges=charges)

    with Runtime(path, mode="hybrid", meters=[StepMeter(), TokenMeter(), CostMeter(PRICES)]) as rt:
        run = rt.run("old")
        served = run.model_call({"model": "m"}, fn=Model())
        assert served.id == node.id
        assert run.report()["avoided"] == {"steps": 1, "tokens": 5, "usd": 0.0000009}
        assert run.report(exact=True)["avoided"]["usd"] == "0.0000009"
        assert recompute_charges(run.store, run.root_id, exact=True)["usd"] == "0.0000009"
        assert verify(run.store).ok


def test_replaying_from_a_path_without_a_store_raises_missing_recording_and_creates_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "nothing-here" / "runs.db"
    with pytest.raises(MissingRecording) as caught, Runtime(path, mode="replay") as rt:
        rt.run("triage")
    assert "no store exists" in str(caught.value) and str(path) in str(caught.value)
    assert caught.value.hint
    assert not path.exists() and not path.parent.exists()


def test_a_responses_object_without_output_falls_back_to_output_text() -> None:
    from pollard.adapters.openai import normalize_response

    class Bare:
        def __init__(self) -> None:
            self.output_text = "the answer"
            self.usage = {"input_tokens": 3, "output_tokens": 2}

    result = normalize_response(Bare())
    assert result["text"] == "the answer"
    assert result["usage"]["input_tokens"] == 3

    class Dumped:
        def model_dump(self) -> dict[str, Any]:
            return {
                "output": [
                    {"type": "message", "content": [{"type": "output_text", "text": "dumped"}]}
                ],
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }

    assert normalize_response(Dumped())["text"] == "dumped"

    with pytest.raises(PollardError, match="neither `output` nor `output_text`") as caught:
        normalize_response(object())
    assert caught.value.hint


def test_the_tree_view_names_repeated_and_failed_dispatches(tmp_path: Path) -> None:
    from pollard._edge._view import build_view

    def broken(payload: Any) -> dict[str, Any]:
        raise RuntimeError("down")

    with Runtime(tmp_path / "runs.db") as rt:
        run = rt.run("labels")
        run.model_call({"model": "mock-1", "q": "a"}, fn=lambda p: {"text": "x"})
        run.rollback()
        run.model_call({"model": "mock-1", "q": "a"}, fn=lambda p: {"text": "x"})
        with pytest.raises(RuntimeError):
            run.model_call({"model": "mock-1", "q": "b"}, fn=broken)
        labels = sorted(row.label for row in build_view(run.store.walk(run.root_id)))
    assert "call_repeated model_call" in labels and "call_failed model_call" in labels


async def test_the_async_shell_reuses_the_node_and_replays_the_rerun(tmp_path: Path) -> None:
    from pollard import AsyncRuntime

    calls: list[Any] = []

    async def model(payload: Any) -> dict[str, Any]:
        calls.append(payload)
        return {"text": "ok", "usage": {"input_tokens": 2, "output_tokens": 1}}

    async def agent(rt: AsyncRuntime) -> list[str]:
        run = rt.run("async")
        first = await run.model_call({"model": "mock-1"}, fn=model)
        run.rollback()
        again = await run.model_call({"model": "mock-1"}, fn=model)
        return [first.id, again.id, json.dumps(run.report())]

    path = tmp_path / "async.db"
    async with AsyncRuntime(path) as rt:
        first, again, report = await agent(rt)
    assert first == again and len(calls) == 2
    spent = json.loads(report)["spent"]
    assert (spent["steps"], spent["tokens"]) == (2, 6)  # both dispatches charged, as numbers
    async with AsyncRuntime(path, mode="replay") as rt:
        assert (await agent(rt))[:2] == [first, again]
    assert len(calls) == 2
