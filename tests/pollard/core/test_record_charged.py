"""`Run.record_charged`: caller-stated charges, admitted before fn runs, committed exactly once
(on every store backend)."""

from __future__ import annotations

import asyncio

import pytest

from pollard import (
    AsyncRuntime,
    Budget,
    BudgetExceeded,
    PollardError,
    Runtime,
    Store,
    recompute_charges,
    verify,
)
from pollard.errors import MissingRecording
from pollard.meters import CostMeter


def test_charges_are_admitted_before_fn_and_a_settlement_credits_once(store: Store) -> None:
    calls: list[object] = []

    def submit(payload: object) -> dict[str, object]:
        calls.append(payload)
        return {"job": "j1"}

    rt = Runtime(store, meters=[CostMeter({"m": {"input_per_1m": 1, "output_per_1m": 1}})])
    run = rt.run("r", budget=Budget(usd=1, tokens=1000))
    with pytest.raises(BudgetExceeded) as refused:
        run.record_charged("model_call", {"job": 1}, charges={"usd": 2, "tokens": 1}, fn=submit)
    assert refused.value.meter == "usd" and calls == []
    job = run.record_charged(
        "model_call", {"job": 2}, charges={"steps": 1, "usd": "0.5", "tokens": 800}, fn=submit
    )
    assert calls == [{"job": 2}] and job.result == {"job": "j1"}
    assert run.cursor_id == job.id
    assert run.report(exact=True)["total"] == {"steps": "1", "tokens": "800", "usd": "0.5"}

    credit = {"usd": "-0.4", "tokens": -700}
    first = run.record_charged("note", {"settle": job.id}, charges=credit, parent=job.id)
    second = run.record_charged("note", {"settle": job.id}, charges=credit, parent=job.id)
    assert first.id == second.id and first.parent == job.id
    assert run.cursor_id == job.id  # a record beside the cursor leaves it
    assert run.report(exact=True)["total"] == {"steps": "1", "tokens": "100", "usd": "0.1"}
    # the audit sums the nodes' own charges, credits included, to the same totals
    assert recompute_charges(store, run.root_id, exact=True) == {
        "steps": "1",
        "tokens": "100",
        "usd": "0.1",
    }
    assert verify(store).ok

    run.rollback()  # back to the root: the same call under the same parent is the same node
    again = run.record_charged("model_call", {"job": 2}, charges={"usd": "0.5"}, fn=submit)
    assert again.id == job.id and len(calls) == 1  # already stored: not run, not charged
    assert run.report(exact=True)["total"]["usd"] == "0.1"
    rt.close()


def test_a_parent_outside_the_run_and_unknown_limited_charges_are_refused() -> None:
    with Runtime(meters=[CostMeter({"m": {"input_per_1m": 1, "output_per_1m": 1}})]) as rt:
        other = rt.run("other")
        note = other.note({"x": 1})
        run = rt.run("r", budget=Budget(usd=1))
        with pytest.raises(ValueError, match="not in run"):
            run.record_charged("note", {"s": 1}, charges={}, parent=note.id)
        with pytest.raises(PollardError, match="usd budget"):
            run.record_charged(
                "model_call", {"job": 1}, charges={"steps": 1}, fn=dict, unknown=("usd",)
            )
        unlimited = rt.run("free")
        node = unlimited.record_charged(
            "model_call", {"job": 1}, charges={"steps": 1}, fn=lambda p: {}, unknown=("usd",)
        )
        assert node.meta["unknown_charges"] == ["usd"]


def test_async_replay_serves_a_recorded_node_and_raises_for_a_missing_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "runs.db")

    async def main() -> None:
        async with AsyncRuntime(db) as rt:
            run = rt.run("r")
            await run.record_charged("model_call", {"j": 1}, charges={"steps": 1}, fn=dict)
        async with AsyncRuntime(db, mode="replay") as rt:
            run = rt.run("r")
            node = await run.record_charged(
                "model_call", {"j": 1}, charges={"steps": 1}, fn=lambda p: 1 / 0
            )
            assert node.result == {"j": 1}
            assert {k: v for k, v in run.report()["avoided"].items() if v} == {"steps": 1}
            with pytest.raises(MissingRecording):
                await run.record_charged("model_call", {"j": 2}, charges={}, fn=dict)

    asyncio.run(main())
