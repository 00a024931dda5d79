"""Issue 25, pollard side: holds are released on every exit path, and a step that ran is kept.

Every store (memory, SQLite, PostgreSQL) returns its reserved-but-unsettled amount to exactly 0
after a run (success, provider error, cancellation, mid-stream abort) and after a crash plus
lease expiry; a step whose PostgreSQL commit lost the connection keeps its hold until it is
recorded, so a one-step budget never admits a second call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, BudgetExceeded, MemoryStore, Runtime, SQLiteStore, Store
from pollard._core._ledger import BudgetClaim
from pollard.meters import StepMeter, TokenMeter

from .conftest import FakeClock


class FourCharsPerToken:
    def estimate_input_tokens(self, payload: Any) -> int:
        return len(str(payload.get("prompt", ""))) // 4


METERS = [StepMeter(), TokenMeter(FourCharsPerToken(), reserved_output_tokens=10)]


def reserved(store: Store, scope: str, meter: str) -> Decimal:
    """The unexpired amount held against ``scope``'s ``meter`` (read through the admission rule)."""
    big = Decimal(10**12)
    admission = store.reserve([BudgetClaim(scope, meter, big, big)], lease_seconds=1, hold=False)
    if admission.shortfall is None:
        return Decimal(0)
    return big - admission.shortfall.spent - admission.shortfall.remaining


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def make(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Any]:
    made: list[Store] = []
    pg: tuple[str, str] | None = None
    if request.param == "postgres":
        from tests.pollard._postgres import fresh_store_id

        pg = (request.getfixturevalue("pg_dsn"), fresh_store_id("once"))

    def factory() -> Store:
        store: Store
        if pg is not None:
            from pollard import PostgresStore

            store = PostgresStore(pg[0], store_id=pg[1], clock=clock)
        elif request.param == "memory":
            store = made[0] if made else MemoryStore(clock=clock)
        else:
            store = SQLiteStore(tmp_path / "once.db", clock=clock)
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()
    if pg is not None:
        from tests.pollard._postgres import drop_store

        drop_store(*pg)


def _answer(payload: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 3, "output_tokens": 2}}


def test_every_exit_path_returns_the_held_amount_to_zero(make: Any) -> None:
    store = make()

    def failing(payload: Any) -> dict[str, Any]:
        raise RuntimeError("provider error")

    def aborted(payload: Any) -> Iterator[dict[str, Any]]:
        yield {"delta": {"text": "par"}}
        raise ConnectionError("stream dropped")

    async def main() -> str:
        async with AsyncRuntime(store, meters=METERS) as rt:
            run = rt.run("paths", budget=Budget(tokens=1_000, steps=10))
            await run.model_call({"prompt": "x" * 40}, fn=_answer)  # success
            with pytest.raises(RuntimeError):
                await run.model_call({"prompt": "fails"}, fn=failing)
            with pytest.raises(ConnectionError):
                await run.model_call({"prompt": "aborts"}, fn=aborted)
            started = asyncio.Event()

            async def slow(payload: Any) -> dict[str, Any]:
                started.set()
                await asyncio.Event().wait()
                raise AssertionError("unreachable")

            task = asyncio.ensure_future(run.model_call({"prompt": "cancelled"}, fn=slow))
            await started.wait()
            assert reserved(store, run.root_id, "tokens") == 12  # 2 input + 10 output
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return run.root_id

    root = asyncio.run(main())
    assert reserved(store, root, "tokens") == 0
    assert reserved(store, root, "steps") == 0
    assert store.totals(root)["steps"] == 4  # every dispatch charged once


def test_a_crashed_process_hold_expires_with_its_lease(make: Any, clock: FakeClock) -> None:
    store = make()
    runtime = Runtime(store, meters=METERS, reservation_lease_seconds=30)
    run = runtime.run("crash", budget=Budget(tokens=24, steps=5))
    # A process that reserved and then died: its hold is in the store and nobody settles it.
    held = store.reserve(
        [BudgetClaim(run.root_id, "tokens", Decimal(24), Decimal(20))], lease_seconds=30
    )
    assert held.reservation_id is not None
    assert reserved(store, run.root_id, "tokens") == 20
    clock.advance(31)
    assert reserved(store, run.root_id, "tokens") == 0
    run.model_call({"prompt": "y" * 40}, fn=_answer)  # the whole budget is free again
    assert reserved(store, run.root_id, "tokens") == 0
    runtime.close()


def test_a_hard_budget_refuses_a_call_it_cannot_bound_before_it_runs(make: Any) -> None:
    store = make()
    ran: list[int] = []
    with Runtime(store, meters=[StepMeter(), TokenMeter(FourCharsPerToken())]) as runtime:
        run = runtime.run("unbounded", budget=Budget(tokens=1_000))
        with pytest.raises(BudgetExceeded, match="cannot be bounded") as info:
            run.model_call({"prompt": "hi"}, fn=lambda p: ran.append(1) or _answer(p))
        assert info.value.reason == "unbounded" and "max_tokens" in (info.value.hint or "")
        assert store.get(info.value.refusal_id).payload["reason"] == "unbounded"
        # The call's own cap bounds it: reserved 0 + 5, settled at 5.
        node = run.model_call({"prompt": "hi", "max_tokens": 5}, fn=_answer)
        assert node.meta["charges"]["tokens"] == 5
        # Unbudgeted runs are not affected.
        runtime.run("free").model_call({"prompt": "hi"}, fn=_answer)
    assert ran == []


@pytest.mark.postgres
def test_a_commit_that_lost_the_connection_keeps_a_one_step_budget_exact(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from pollard import PollardError, PostgresStore
    from tests.pollard._postgres import drop_store, fresh_store_id

    store_id = fresh_store_id("once")
    ran: list[str] = []
    store = PostgresStore(pg_dsn, store_id=store_id)
    commit = store._commit
    down = {"on": False}

    def flaky(*args: Any, **kwargs: Any) -> bool:
        if down["on"]:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return commit(*args, **kwargs)

    monkeypatch.setattr(store, "_commit", flaky)

    def killed(payload: Any) -> dict[str, Any]:
        ran.append(payload["q"])
        pid = store._local.conn.info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as admin:  # the server drops this session
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        down["on"] = True  # ... and does not answer the reconnect either
        return _answer(payload)

    try:
        with Runtime(store) as runtime:
            run = runtime.run("one", budget=Budget(steps=1))
            with pytest.raises(PollardError, match="during a commit"):
                run.model_call({"q": "first"}, fn=killed)
            assert reserved(store, run.root_id, "steps") == 1  # the hold is kept
            # While the store is still down, no second call is admitted.
            with pytest.raises(PollardError):
                run.model_call({"q": "second"}, fn=lambda p: ran.append(p["q"]) or _answer(p))
            down["on"] = False  # the server is back: the first step is recorded, then refused
            with pytest.raises(BudgetExceeded):
                run.model_call({"q": "third"}, fn=lambda p: ran.append(p["q"]) or _answer(p))
            assert ran == ["first"]
            assert store.totals(run.root_id)["steps"] == 1
            assert reserved(store, run.root_id, "steps") == 0
            recorded = [n.payload.get("q") for n in store.walk(run.root_id)]
            assert "first" in recorded
    finally:
        store.close()
        drop_store(pg_dsn, store_id)
