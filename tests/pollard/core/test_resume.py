"""Resumed steps (``model_call(..., resume=True)``, and hybrid mode): a stored answer is served,
a cancelled dispatch's charge is reused rather than added to, and a cancelled step's finished
commit counts in the run's ``spent``."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, BudgetExceeded, Runtime, SQLiteStore

PAYLOAD = {"model": "m", "input": "Who were the twins?"}


def _answer(_payload: Any) -> dict[str, Any]:
    return {"text": "Castor and Pollux", "usage": {"input_tokens": 3, "output_tokens": 2}}


def _interrupted(_payload: Any) -> dict[str, Any]:
    raise KeyboardInterrupt  # Ctrl-C while the call was in flight


def _events(rt: Runtime, root: str) -> list[Any]:
    return [n.payload.get("event") for n in rt.store.children(root) if n.kind.value == "note"]


@pytest.mark.parametrize("mode", ["record", "hybrid"])
def test_a_resumed_call_reuses_the_charge_of_its_cancelled_dispatch(mode: str) -> None:
    with Runtime(mode=mode) as rt:
        run = rt.run("r", budget=Budget(steps=1))
        with pytest.raises(KeyboardInterrupt):
            run.model_call(PAYLOAD, fn=_interrupted)
        assert rt.store.totals(run.root_id)["steps"] == 1  # it was sent: charged
        # The budget is used up by the cancelled dispatch, yet its resume is admitted: the
        # charge is the same call's.
        calls = []
        resumed = rt.run("r", budget=Budget(steps=1))

        def answer(payload: Any) -> dict[str, Any]:
            calls.append(payload)
            return _answer(payload)

        node = resumed.model_call(PAYLOAD, fn=answer, resume=mode == "record")
        assert len(calls) == 1 and node.result is not None
        assert node.meta["credited"]["steps"] == 1
        assert "steps" not in node.meta.get("charges", {})
        assert rt.store.totals(run.root_id)["steps"] == 1
        # Resumed again: the stored answer is served, nothing is sent or charged.
        again = rt.run("r", budget=Budget(steps=1))
        served = again.model_call(PAYLOAD, fn=answer, resume=mode == "record")
        assert served.id == node.id and len(calls) == 1
        assert again.report()["spent"].get("steps", 0) == 0
        assert _events(rt, run.root_id) == ["call_cancelled"]
        # Any other call still meets the exhausted budget.
        with pytest.raises(BudgetExceeded):
            again.model_call({"model": "m", "input": "another"}, fn=answer, resume=True)


def test_a_resume_cancelled_again_is_not_charged_again_and_failures_are() -> None:
    with Runtime() as rt:
        run = rt.run("r", budget=Budget(steps=5))
        for _ in range(2):
            with pytest.raises(KeyboardInterrupt):
                rt.run("r", budget=Budget(steps=5)).model_call(
                    PAYLOAD, fn=_interrupted, resume=True
                )
        assert rt.store.totals(run.root_id)["steps"] == 1  # two cancellations, one charge

        def fail(_payload: Any) -> dict[str, Any]:
            raise RuntimeError("the provider answered 500")

        with pytest.raises(RuntimeError):
            rt.run("r", budget=Budget(steps=5)).model_call(PAYLOAD, fn=fail, resume=True)
        assert rt.store.totals(run.root_id)["steps"] == 2  # a failed call is a call of its own
        node = rt.run("r", budget=Budget(steps=5)).model_call(PAYLOAD, fn=_answer, resume=True)
        assert node.meta["credited"]["steps"] == 1
        assert rt.store.totals(run.root_id)["steps"] == 2


def test_without_resume_record_mode_charges_a_repeat() -> None:
    # The default stays: in record mode an identical call is dispatched and charged again.
    with Runtime() as rt:
        run = rt.run("r")
        run.model_call(PAYLOAD, fn=_answer)
        rt.run("r").model_call(PAYLOAD, fn=_answer)
        assert rt.store.totals(run.root_id)["steps"] == 2
        assert _events(rt, run.root_id) == ["call_repeated"]


class _HeldCommit(SQLiteStore):
    """A SQLite store whose commits wait until the test lets them finish (on its I/O thread)."""

    _at_once = False  # run at once on the event loop, the wait would block the loop

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = threading.Event()
        self.go = threading.Event()

    def commit(self, *args: Any, **kwargs: Any) -> bool:
        self.entered.set()
        self.go.wait(30)
        return super().commit(*args, **kwargs)


async def test_a_step_cancelled_during_its_commit_counts_what_the_ledger_charged(
    tmp_path: Path,
) -> None:
    store = _HeldCommit(tmp_path / "runs.db")
    loop = asyncio.get_running_loop()
    async with AsyncRuntime(store) as rt:
        run = rt.run("r", budget=Budget(steps=5))
        task = asyncio.ensure_future(run.model_call(PAYLOAD, fn=_answer))
        assert await loop.run_in_executor(None, store.entered.wait, 30)
        task.cancel()
        store.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        ledger = {k: str(v) for k, v in rt.store.totals(run.root_id).items()}
        assert ledger["steps"] == "1"
        spent = run.report(exact=True)["spent"]
        # One figure, the ledger's (report() also lists the meters still at zero).
        assert {k: v for k, v in spent.items() if Decimal(v)} == ledger
