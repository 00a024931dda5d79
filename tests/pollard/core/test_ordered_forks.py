"""`AsyncRun.ordered_forks`: a fan-out's admissions in index order, pipelined on the store.

Fork ``i`` queues its reservation as soon as fork ``i - 1`` queued its own; the order must stay
exactly that of one admission at a time, also when a reservation comes back short and its step
waits for room (the reservations queued behind it are not made, and wait their turn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, BudgetExceeded
from pollard.meters import StepMeter


class _Estimated:
    """A meter charging 1 token per step, holding the payload's ``est`` until it settles."""

    name = "tokens"

    def precheck_estimate(self, kind: str, payload: Any) -> int:
        return int(payload["est"])

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> int:
        return 1


@pytest.mark.parametrize("where", ["memory", "sqlite"])
async def test_a_step_budget_refuses_the_last_forks(tmp_path: Path, where: str) -> None:
    store = None if where == "memory" else tmp_path / "runs.db"
    async with AsyncRuntime(store) as rt:
        run = rt.run("fan", budget=Budget(steps=3))
        forks = run.ordered_forks(6)
        called: list[int] = []

        async def one(i: int) -> str:
            async def model(payload: Any) -> dict[str, Any]:
                called.append(i)
                await asyncio.sleep(0.01)
                return {"i": i}

            try:
                fork = await forks.fork(i)
                await fork.model_call({"i": i}, fn=model)
                return "ok"
            except BudgetExceeded:
                return "refused"
            finally:
                forks.done(i)

        outcomes = await asyncio.gather(*(one(i) for i in reversed(range(6))))
        assert outcomes[::-1] == ["ok"] * 3 + ["refused"] * 3
        assert sorted(called) == [0, 1, 2]
        assert run.report()["spent"]["steps"] == 3


@pytest.mark.parametrize("where", ["memory", "sqlite"])
async def test_a_fork_waiting_for_room_keeps_its_place(tmp_path: Path, where: str) -> None:
    # Holds 5 + 5 of 12; fork 2 (8) must wait for them to settle (at 1 each). Forks 3 and 4
    # (1 each) would fit at once beside the holds, but one-at-a-time admission admits them
    # after fork 2: their pipelined reservations are not made, and wait their turn.
    store = None if where == "memory" else tmp_path / "runs.db"
    sizes = [5, 5, 8, 1, 1]
    async with AsyncRuntime(store, meters=[StepMeter(), _Estimated()]) as rt:
        run = rt.run("room", budget=Budget(tokens=12))
        forks = run.ordered_forks(len(sizes))
        called: list[int] = []

        async def one(i: int) -> None:
            async def model(payload: Any) -> dict[str, Any]:
                called.append(i)
                await asyncio.sleep(0.05 if i < 2 else 0)
                return {"i": i}

            try:
                fork = await forks.fork(i)
                await fork.model_call({"i": i, "est": sizes[i]}, fn=model)
            finally:
                forks.done(i)

        await asyncio.gather(*(one(i) for i in range(len(sizes))))
        assert called == [0, 1, 2, 3, 4]
        assert run.report()["spent"]["tokens"] == 5
        # Every hold settled: the whole budget is free again beside the 5 spent.
        probe = await run.fork().model_call({"i": 9, "est": 7}, fn=lambda payload: {"i": 9})
        assert probe.result == {"i": 9}


async def test_a_fork_that_never_reaches_admission_lets_the_next_go() -> None:
    async with AsyncRuntime() as rt:
        run = rt.run("skip", budget=Budget(steps=5))
        forks = run.ordered_forks(3)
        forks.done(0)  # fork 0 gave up before its step (served, or failed earlier)
        fork = await asyncio.wait_for(forks.fork(1), 1)
        node = await fork.model_call({"i": 1}, fn=lambda payload: {"ok": True})
        forks.done(1)
        assert node.parent == run.cursor_id
