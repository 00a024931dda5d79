"""The SQLite store's I/O thread: one connection, queued operations committed as one batch.

`AsyncRuntime` runs a `SQLiteStore`'s I/O on the store's own thread (`SQLiteStore.io_executor`);
what is queued while the thread is busy runs as one transaction, each operation a savepoint, and
every operation is acknowledged only after that transaction committed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, Budget, Node, PollardError, SQLiteStore, verify
from pollard.stores._io_thread import IoThread, run_each

ONE = {"steps": Decimal(1)}


def _gate(store: SQLiteStore) -> tuple[threading.Event, threading.Event, Future[Any]]:
    """Occupy the store's I/O thread until the returned ``release`` event is set."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        assert release.wait(10), "the test never released the I/O thread"

    held = store.io_executor.submit(hold)
    assert started.wait(10)
    return started, release, held


def test_operations_queued_behind_a_busy_thread_commit_as_one_batch(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        root = Node.create("root", None, {"run": "batch"})
        store.put(root)
        _, release, held = _gate(store)
        batches: list[int] = []
        run_batch = store._run_batch  # observe how the thread batches

        def observed(operations: Any) -> Any:
            batches.append(len(operations))
            return run_batch(operations)

        store._io._run_batch = observed  # type: ignore[union-attr]
        nodes = [Node.create("model_call", root.id, {"i": i}, result={"i": i}) for i in range(3)]
        orphan = Node.create("model_call", "f" * 64, {"orphan": True}, result={})
        futures = [
            store.io_executor.submit(store.commit, node, scopes=[root.id], charges=ONE)
            for node in (nodes[0], orphan, nodes[1], nodes[2])
        ]
        assert not any(f.done() for f in futures)  # queued behind the busy thread
        release.set()
        held.result(10)
        assert [f.result(10) for f in (futures[0], futures[2], futures[3])] == [True] * 3
        with pytest.raises(KeyError, match="is not stored"):
            futures[1].result(10)  # undone alone; the others of its batch are committed
        assert batches == [4]
        assert store.totals(root.id) == {"steps": Decimal(3)}
        assert [n.id for n in store.children(root.id)] == sorted(n.id for n in nodes)


class FailingInside(SQLiteStore):
    """Fails one commit inside its transaction, after its node row was written."""

    fail_node: str | None = None

    def _lock_ledger(self, cursor: Any, keys: Any) -> None:
        if self.fail_node is not None and self._last == self.fail_node:
            raise RuntimeError("the ledger failed")

    def commit(self, node: Node, **kwargs: Any) -> bool:
        self._last = node.id
        return super().commit(node, **kwargs)


def test_a_failing_operation_of_a_batch_is_undone_alone(tmp_path: Path) -> None:
    with FailingInside(tmp_path / "runs.db") as store:
        root = Node.create("root", None, {"run": "undo"})
        store.put(root)
        nodes = [Node.create("model_call", root.id, {"i": i}, result={"i": i}) for i in range(3)]
        store.fail_node = nodes[1].id
        _, release, held = _gate(store)
        futures = [
            store.io_executor.submit(store.commit, node, scopes=[root.id], charges=ONE)
            for node in nodes
        ]
        release.set()
        held.result(10)
        assert futures[0].result(10) is True and futures[2].result(10) is True
        with pytest.raises(RuntimeError, match="the ledger failed"):
            futures[1].result(10)
        # The failed commit's node row (written before the failure) was rolled back with it.
        assert store.find(nodes[1].id) is None
        assert store.totals(root.id) == {"steps": Decimal(2)}


def test_close_runs_what_is_queued_then_stops_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    root = Node.create("root", None, {"run": "close"})
    store.put(root)
    _, release, _ = _gate(store)
    nodes = [Node.create("note", root.id, {"i": i}) for i in range(20)]
    futures = [
        store.io_executor.submit(store.commit, n, scopes=[root.id], charges=ONE) for n in nodes
    ]
    thread = store._io.thread  # type: ignore[union-attr]
    assert thread is not None
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # close waits for the queued operations
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert all(f.result(0) is True for f in futures)
    assert not thread.is_alive()
    with pytest.raises(PollardError, match="is closed"):
        store.io_executor.submit(store.roots)
    with SQLiteStore(path, read_only=True) as reopened:
        assert reopened.totals(root.id) == {"steps": Decimal(20)}
        assert len(reopened.children(root.id)) == 20


async def _model(payload: Any) -> dict[str, Any]:
    await asyncio.sleep(0.001 * (payload["i"] % 5))
    return {"text": f"answer {payload['i']}", "usage": {"input_tokens": 2, "output_tokens": 1}}


async def test_concurrent_async_steps_are_all_durable_after_close(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    seen: set[str] = set()

    class Watched(SQLiteStore):
        def commit(self, node: Node, **kwargs: Any) -> bool:
            seen.add(threading.current_thread().name)
            return super().commit(node, **kwargs)

    store = Watched(path)
    async with AsyncRuntime(store) as rt:
        run = rt.run("many", budget=Budget(steps=200))
        forks = [run.fork() for _ in range(200)]
        nodes = await asyncio.gather(
            *(f.model_call({"model": "m", "i": i}, fn=_model) for i, f in enumerate(forks))
        )
        root_id = run.root_id
        thread = store._io.thread  # type: ignore[union-attr]
    store.close()
    # Uncontended, each commit ran at once on the loop's thread (the store's thread was idle).
    assert seen <= {"MainThread", "pollard-sqlite-io:runs.db"}
    assert thread is None or not thread.is_alive()
    with SQLiteStore(path, read_only=True) as store:
        assert store.totals(root_id)["steps"] == Decimal(200)
        assert {n.id for n in store.children(root_id)} == {n.id for n in nodes}
        assert store.node_count() == 201
        assert verify(store).ok


async def test_an_exact_budget_holds_under_concurrent_steps_on_the_io_thread(
    tmp_path: Path,
) -> None:
    from pollard import BudgetExceeded

    async with AsyncRuntime(tmp_path / "runs.db") as rt:
        run = rt.run("exact", budget=Budget(steps=50))
        forks = [run.fork() for _ in range(120)]
        outcomes = await asyncio.gather(
            *(f.model_call({"model": "m", "i": i}, fn=_model) for i, f in enumerate(forks)),
            return_exceptions=True,
        )
        refused = [o for o in outcomes if isinstance(o, BudgetExceeded)]
        assert len(refused) == 70 and len(outcomes) - len(refused) == 50
        assert rt.store.totals(run.root_id)["steps"] == Decimal(50)


def test_the_thread_retires_when_idle_and_starts_again() -> None:
    io = IoThread(run_each, closed_error=lambda: PollardError("closed"), idle_seconds=0.05)
    assert io.submit(lambda: 1).result(5) == 1
    first = io.thread
    deadline = time.monotonic() + 5
    while io.thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert io.thread is None and first is not None and not first.is_alive()
    assert io.submit(lambda: 2).result(5) == 2  # a new thread
    io.shutdown()
    assert io.thread is None
    with pytest.raises(PollardError, match="closed"):
        io.submit(lambda: 3)


_CRASH = """
import asyncio, sys
from pollard import AsyncRuntime, Budget

async def model(payload):
    await asyncio.sleep(0.002)
    return {"text": "ok"}

async def step(run, i):
    node = await run.fork().model_call({"model": "m", "i": i}, fn=model)
    print(node.id, flush=True)  # acknowledged: the step returned

async def main(path):
    rt = AsyncRuntime(path)
    run = rt.run("crash", budget=Budget(steps=100_000))
    print(run.root_id, flush=True)
    i = 0
    while True:  # until killed
        await asyncio.gather(*(step(run, i + k) for k in range(16)))
        i += 16

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.slow
def test_a_kill_mid_batch_loses_only_unacknowledged_steps(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASH, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    root_id = proc.stdout.readline().strip()
    acknowledged = [proc.stdout.readline().strip() for _ in range(300)]
    os.kill(proc.pid, signal.SIGKILL)  # while later batches are in flight
    proc.wait(10)
    proc.stdout.close()
    with SQLiteStore(path) as store:  # recovers the WAL like any later writer
        stored = {n.id for n in store.children(root_id) if n.kind.value == "model_call"}
        assert set(acknowledged) <= stored
        # No batch is torn: every stored step has its charge, and no charge lacks its step.
        assert store.totals(root_id)["steps"] == Decimal(len(stored))
        assert verify(store).ok


def test_a_read_only_store_serves_reads_on_its_thread(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        root = Node.create("root", None, {"run": "ro"})
        store.put(root)
    with SQLiteStore(path, read_only=True) as store:
        futures = [store.io_executor.submit(store.find, root.id) for _ in range(10)]
        assert all(f.result(5) == root for f in futures)


def test_compact_refuses_to_run_inside_a_batch(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        _, release, held = _gate(store)
        futures = [store.io_executor.submit(store.roots), store.io_executor.submit(store.compact)]
        release.set()
        held.result(10)
        assert futures[0].result(10) == []
        with pytest.raises(PollardError, match="compact"):
            futures[1].result(10)
        assert store.compact() == 0  # directly, it runs


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_an_io_thread_of_its_own(tmp_path: Path) -> None:
    script = f"""
import os, sys
from pollard import Node, SQLiteStore
store = SQLiteStore({str(tmp_path / "fork.db")!r})
root = Node.create("root", None, {{"run": "fork"}})
assert store.io_executor.submit(store.put, root).result(10) is True  # the parent's thread runs
pid = os.fork()
if pid == 0:
    note = Node.create("note", root.id, {{"child": True}})
    ok = store.io_executor.submit(store.put, note).result(10)  # hangs if the thread is the parent's
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert len(store.children(root.id)) == 1
store.close()
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


async def test_a_runtime_on_a_closed_store_refuses_its_first_operation(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store.close()
    rt = AsyncRuntime(store)  # no error yet: as on every store, the first operation raises
    with pytest.raises(PollardError, match="is closed"):
        rt.run("late")


async def test_a_cancelling_shutdown_cancels_what_never_ran(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    started, release = threading.Event(), threading.Event()
    io = IoThread(run_each, closed_error=lambda: PollardError("closed"))
    io.submit(lambda: (started.set(), release.wait(10)))
    assert started.wait(10)
    queued = io.run_soon(loop, lambda: "never")
    io.shutdown(wait=False, cancel_futures=True)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await queued.waiter
    assert queued.outcome is not None and not queued.outcome[0]


def test_checkpoints_run_beside_the_io_thread_not_in_its_commits(tmp_path: Path) -> None:
    # A checkpoint (two fsyncs) inside a commit would hold up every step queued behind it: the
    # thread's own commits never checkpoint, and every `_checkpoint_every` operations a
    # checkpoint copies the WAL into the database from a thread of its own.
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    store._checkpoint_every = 10**9
    root = Node.create("root", None, {"label": "c"})
    io = store.io_executor
    io.submit(store.put, root).result()
    for i in range(20):
        io.submit(store.put, Node.create("note", root.id, {"i": i})).result()
    assert store._io_conn is not None
    assert store._io_conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    assert store._checkpointer is None
    before = path.stat().st_size
    store._checkpoint_every = 4
    for i in range(20, 24):
        io.submit(store.put, Node.create("note", root.id, {"i": i})).result()
    checkpointer = store._checkpointer
    assert checkpointer is not None
    checkpointer.join(10)
    assert path.stat().st_size > before  # the WAL's pages are in the database file now
    store.close()
    with SQLiteStore(path) as again:
        assert len(again.children(root.id)) == 24


class _Watched(SQLiteStore):
    """Records the thread each commit ran on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.threads: list[str] = []

    def commit(self, node: Node, **kwargs: Any) -> bool:
        self.threads.append(threading.current_thread().name)
        return super().commit(node, **kwargs)

    def lease_writer(self, writer: str, lease_seconds: float, **kwargs: Any) -> None:
        self.threads.append(f"lease on {threading.current_thread().name}")
        super().lease_writer(writer, lease_seconds, **kwargs)


async def test_an_idle_store_runs_each_operation_at_once_on_the_loop(tmp_path: Path) -> None:
    # Two thread hand-offs per operation are saved when the I/O thread has nothing queued: the
    # operation runs at once, in its own transaction, and is as durable as the thread's.
    store = _Watched(tmp_path / "runs.db")
    async with AsyncRuntime(store) as rt:
        run = rt.run("now", budget=Budget(steps=5))
        for i in range(3):
            await run.model_call({"model": "m", "i": i}, fn=_model)
        assert store._io is not None and store._io.thread is None  # never needed
    assert set(store.threads) == {"lease on MainThread", "MainThread"}
    assert store.threads.count("MainThread") == 3
    store.close()
    with SQLiteStore(tmp_path / "runs.db", read_only=True) as again:
        assert again.totals(run.root_id)["steps"] == Decimal(3)
        assert verify(again).ok


async def test_a_write_lock_held_elsewhere_never_blocks_the_loop(tmp_path: Path) -> None:
    # Another connection holds SQLite's write lock: the operation is not run at once (that
    # would wait for the lock on the event loop) but queued for the I/O thread, which waits.
    path = tmp_path / "runs.db"
    store = _Watched(path)
    async with AsyncRuntime(store) as rt:
        run = rt.run("busy", budget=Budget(steps=5))
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        step = asyncio.ensure_future(run.model_call({"model": "m", "i": 0}, fn=_model))
        ticks = 0
        for _ in range(20):  # the loop keeps running while the step waits for the lock
            await asyncio.sleep(0.005)
            ticks += 1
        assert not step.done() and ticks == 20
        other.execute("COMMIT")
        other.close()
        node = await asyncio.wait_for(step, 30)
        assert node.result is not None and node.result["text"] == "answer 0"
    # The step's first write (its writer's lease) met the lock and waited on the I/O thread.
    assert store.threads[0] == f"lease on pollard-sqlite-io:{path.name}"
    store.close()
