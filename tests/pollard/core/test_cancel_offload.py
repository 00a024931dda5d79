"""Cancelling a step while its store I/O runs in a worker thread, then closing the store.

Regression tests for a crash: `AsyncRuntime` offloads store I/O to a thread; a step cancelled
during that I/O used to finish at once while the thread kept going, so the runtime closed the
SQLite connection under it (a segfault) and a reservation the thread created was left behind
until its lease expired. Scenarios that could crash run in a subprocess so the suite survives.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, PollardError, SQLiteStore


class GatedStore(SQLiteStore):
    """Blocks inside reserve's write transaction until ``gate`` is set.

    Every operation goes to the store's I/O thread (as under contention for the write lock):
    run at once on the event loop, the gate would block the loop.
    """

    _at_once = False

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def _lock_ledger(self, cursor: Any, keys: Any) -> None:
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"


def _reservations(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM reservations").fetchone()[0])
    finally:
        conn.close()


async def _model(payload: Any) -> dict[str, Any]:
    return {"text": "ok"}


async def test_cancel_during_offloaded_reserve_waits_and_releases(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = GatedStore(path)
    try:
        async with AsyncRuntime(store) as rt:
            run = rt.run("cancelled", budget=Budget(steps=5))
            task = asyncio.ensure_future(run.model_call({"model": "m"}, fn=_model))
            assert await asyncio.to_thread(store.entered.wait, 10)
            task.cancel()
            for _ in range(20):  # let the loop deliver the cancellation
                await asyncio.sleep(0)
            # The worker thread is still inside reserve: the step must not have ended yet.
            assert not task.done()
            store.gate.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The reservation the thread created was released, not left to its lease.
            assert _reservations(path) == 0
            # The cancelled step recorded nothing and the run still works.
            assert [n.kind.value for n in store.children(run.root_id)] == []
            node = await run.model_call({"model": "m", "n": 2}, fn=_model)
            assert node.result == {"text": "ok"}
        assert _reservations(path) == 0
    finally:
        store.close()


def test_close_waits_for_an_operation_in_another_thread(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    script = textwrap.dedent(
        f"""
        import sys, threading
        from decimal import Decimal
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_cancel_offload import GatedStore
        from pollard import PollardError
        from pollard._core._ledger import BudgetClaim

        store = GatedStore({str(path)!r})
        out = {{}}

        def reserve():
            try:
                claim = BudgetClaim("scope", "steps", Decimal(5), Decimal(1), False)
                out["admission"] = store.reserve([claim], lease_seconds=60)
            except BaseException as exc:
                out["error"] = exc

        worker = threading.Thread(target=reserve)
        worker.start()
        assert store.entered.wait(10)
        closer = threading.Thread(target=store.close)
        closer.start()
        closer.join(0.3)
        assert closer.is_alive(), "close() returned while a transaction was running"
        store.gate.set()
        worker.join(10)
        closer.join(10)
        assert not closer.is_alive()
        assert "error" not in out, repr(out.get("error"))
        assert out["admission"].reservation_id is not None
        try:
            store.roots()
        except PollardError as exc:
            assert "is closed" in str(exc), exc
        else:
            raise AssertionError("a closed store accepted an operation")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
    assert _reservations(path) == 1  # committed by the worker before close finished


_STRESS = """
import asyncio, random, sqlite3, sys
from pollard import AsyncRuntime, Budget

random.seed(7)

async def model(payload):
    await asyncio.sleep(0)
    return {"text": "ok"}

async def once(path, i, await_first):
    big = "x" * 100_000  # interned: store I/O takes long enough to be cancelled mid-way
    async with AsyncRuntime(path) as rt:
        run = rt.run(f"r{i}", budget=Budget(steps=1000))
        tasks = [
            asyncio.ensure_future(run.model_call({"model": "m", "big": big, "k": k}, fn=model))
            for k in range(4)
        ]
        await asyncio.sleep(random.random() * 0.01)
        for task in tasks:
            task.cancel()
        if await_first:
            await asyncio.gather(*tasks, return_exceptions=True)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:  # a step either finished or was cancelled; nothing else
        if isinstance(outcome, BaseException) and not isinstance(
            outcome, asyncio.CancelledError
        ):
            raise outcome
    conn = sqlite3.connect(path)
    left = conn.execute("SELECT count(*) FROM reservations").fetchone()[0]
    conn.close()
    assert left == 0, f"run {i}: {left} reservations left behind"

async def main(folder):
    for i in range(int(sys.argv[2])):
        await once(f"{folder}/s{i}.db", i, await_first=i % 2 == 0)
    print("ok")

asyncio.run(main(sys.argv[1]))
"""


def test_cancel_then_close_in_a_loop_does_not_crash(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", _STRESS, str(tmp_path), "40"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    assert done.stdout.strip() == "ok"
    assert "never retrieved" not in done.stderr, done.stderr[-3000:]


def test_a_closed_store_refuses_operations_with_a_clear_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    assert store.roots() == []
    store.close()
    store.close()  # idempotent
    for operation in (store.roots, lambda: store.totals("x"), lambda: store.release("r")):
        with pytest.raises(PollardError, match="is closed") as info:
            operation()
        assert "open a new SQLiteStore" in str(info.value.hint)


def test_close_while_a_walk_is_paused(tmp_path: Path) -> None:
    with AsyncRuntime(tmp_path / "runs.db") as rt:
        store = rt.store
        run = rt.run("walk")
        asyncio.run(run.note({"n": 1}))
        walk = store.walk(run.root_id)
        next(walk)  # a walk paused between nodes holds no connection
        store.close()
        with pytest.raises(PollardError, match="is closed"):
            next(walk)


async def test_closing_the_runtime_before_a_cancelled_step_ends_leaves_no_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, gate = threading.Event(), threading.Event()

    def gated(self: SQLiteStore, cursor: Any, keys: Any) -> None:
        entered.set()
        assert gate.wait(10), "the test never opened the gate"

    path = tmp_path / "runs.db"
    rt = AsyncRuntime(path)  # opens (and so closes) its own SQLiteStore
    run = rt.run("closed-early", budget=Budget(steps=5))
    monkeypatch.setattr(SQLiteStore, "_lock_ledger", gated)
    monkeypatch.setattr(SQLiteStore, "_at_once", False)  # the gate would block the loop
    task = asyncio.ensure_future(run.model_call({"model": "m"}, fn=_model))
    assert await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    closer = threading.Thread(target=rt.close)  # close() waits for the reserve in flight
    closer.start()
    gate.set()
    await asyncio.to_thread(closer.join, 10)
    assert not closer.is_alive()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _reservations(path) == 0


async def test_a_cancelled_reserve_is_released_on_the_store_io_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The release of a reservation that a cancelled step never saw runs on the store's own I/O
    # thread right after the reserve (so a runtime closed meanwhile, which waits for that
    # thread, never finds it still to do); it used to be sent back to a default worker thread,
    # racing the close ("cleanup after a cancelled store operation failed ... is closed").
    entered, gate = threading.Event(), threading.Event()
    released_on: list[str] = []
    reserve, release = SQLiteStore.reserve, SQLiteStore.release

    def gated(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert gate.wait(10), "the test never opened the gate"
        return reserve(self, *args, **kwargs)

    def recorded(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
        released_on.append(threading.current_thread().name)
        return release(self, *args, **kwargs)

    path = tmp_path / "runs.db"
    async with AsyncRuntime(path) as rt:
        run = rt.run("released", budget=Budget(steps=5))
        monkeypatch.setattr(SQLiteStore, "reserve", gated)
        monkeypatch.setattr(SQLiteStore, "_at_once", False)  # the gate would block the loop
        monkeypatch.setattr(SQLiteStore, "release", recorded)
        task = asyncio.ensure_future(run.model_call({"model": "m"}, fn=_model))
        assert await asyncio.to_thread(entered.wait, 10)
        task.cancel()  # cancels the future the step awaits at once, before the reserve returns
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _reservations(path) == 0
    assert released_on == [f"pollard-sqlite-io:{path.name}"]
