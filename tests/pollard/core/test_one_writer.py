"""Issue 25: one writer per run (a lease with a fencing token, checked at commit).

Two runtimes (two processes, as far as the store can tell) at the same cursor of one run, its
root included, must not both append under it: the second is refused with `WriterConflict`
before its step runs. Workers that each start their own lines under one label open the run
with ``shared=True``; one runtime's concurrent fan-out is one writer; a writer that stopped (or
crashed, once its lease ended) lets another take over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pollard import AsyncRuntime, MemoryStore, Runtime, SQLiteStore, Store, WriterConflict

from .conftest import FakeClock


def _answer(payload: Any) -> dict[str, Any]:
    return {"text": "ok"}


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[tuple[Store, Store]]:
    """Two store handles on one ledger, as two processes have."""
    if request.param == "memory":  # one in-process store, two runtimes (two writers)
        memory = MemoryStore(clock=clock)
        yield memory, memory
        return
    if request.param == "sqlite":
        stores: tuple[Store, Store] = (
            SQLiteStore(tmp_path / "w.db", clock=clock),
            SQLiteStore(tmp_path / "w.db", clock=clock),
        )
        yield stores
        for store in stores:
            store.close()
        return
    from pollard import PostgresStore
    from tests.pollard._postgres import drop_store, fresh_store_id

    dsn = request.getfixturevalue("pg_dsn")
    store_id = fresh_store_id("writer")
    pg = (
        PostgresStore(dsn, store_id=store_id, clock=clock),
        PostgresStore(dsn, store_id=store_id, clock=clock),
    )
    yield pg
    for store in pg:
        store.close()
    drop_store(dsn, store_id)


def test_two_writers_at_one_cursor_cannot_fork_the_run(
    two_stores: tuple[Store, Store], clock: FakeClock
) -> None:
    a_store, b_store = two_stores
    with Runtime(a_store) as setup:
        setup.run("agent").model_call({"step": 0}, fn=_answer)
    first, second = Runtime(a_store), Runtime(b_store)
    a, b = first.resume("agent"), second.resume("agent")  # both on the same leaf
    assert a.cursor_id == b.cursor_id
    leaf = a.cursor_id
    a.model_call({"step": 1, "by": "a"}, fn=_answer)
    ran: list[str] = []
    with pytest.raises(WriterConflict, match="another writer") as info:
        b.model_call({"step": 1, "by": "b"}, fn=lambda p: ran.append("b") or _answer(p))
    assert ran == [] and info.value.node_id == leaf
    assert "one process" in (info.value.hint or "")
    a.model_call({"step": 2, "by": "a"}, fn=_answer)  # the first writer goes on
    assert [n.payload.get("by") for n in a_store.children(leaf)] == ["a"]
    # A writer that stopped (closed, or crashed and its lease ended) lets another take over.
    first.close()
    b.model_call({"step": 1, "by": "b"}, fn=_answer)
    second.close()


def test_a_crashed_writer_is_taken_over_after_its_lease(
    two_stores: tuple[Store, Store], clock: FakeClock
) -> None:
    a_store, b_store = two_stores
    # A long lease: its renewal thread (every lease / 3) never runs during the test, as a
    # crashed process's would not.
    crashed = Runtime(a_store, reservation_lease_seconds=300)
    run = crashed.run("agent")
    run.model_call({"step": 0}, fn=_answer)
    leaf = run.cursor_id  # the crashed writer committed it and never closed
    with Runtime(b_store, reservation_lease_seconds=300) as other:
        late = other.resume("agent")
        with pytest.raises(WriterConflict):
            late.model_call({"step": 1}, fn=_answer)
        clock.advance(301)  # the crashed writer's lease ends
        late.model_call({"step": 1}, fn=_answer)
        assert [n.payload["step"] for n in b_store.children(leaf)] == [1]
    crashed.close()


def test_two_writers_at_one_run_root_cannot_both_append(
    two_stores: tuple[Store, Store], clock: FakeClock
) -> None:
    a_store, b_store = two_stores
    first, second = Runtime(a_store), Runtime(b_store)
    a, b = first.run("label"), second.run("label")  # two processes, one label, same cursor
    a.model_call({"by": "a", "i": 0}, fn=_answer)
    ran: list[str] = []
    with pytest.raises(WriterConflict) as info:
        b.model_call({"by": "b"}, fn=lambda p: ran.append("b") or _answer(p))
    assert ran == [] and info.value.node_id == a.root_id
    assert "run 'label'" in str(info.value) and "another process" in str(info.value)
    assert "shared=True" in (info.value.hint or "")
    # Nothing of the second writer was recorded under the root, not even a refusal.
    assert [n.payload.get("by") for n in a_store.children(a.root_id)] == ["a"]
    # The first writer's other cursors (here a second run object) are the same writer.
    first.run("label").model_call({"by": "a", "i": 1}, fn=_answer)
    first.close()  # a closed writer lets the next one take the run over
    b.model_call({"by": "b"}, fn=_answer)
    with Runtime(a_store) as third, pytest.raises(WriterConflict):
        third.run("label").model_call({"by": "c"}, fn=_answer)
    second.close()


def test_a_crashed_writer_of_a_run_root_is_taken_over_after_its_lease(
    two_stores: tuple[Store, Store], clock: FakeClock
) -> None:
    a_store, b_store = two_stores
    crashed = Runtime(a_store, reservation_lease_seconds=300)  # never renewed during the test
    crashed.run("label").model_call({"i": 0}, fn=_answer)
    with Runtime(b_store, reservation_lease_seconds=300) as other:
        run = other.run("label")
        with pytest.raises(WriterConflict):
            run.model_call({"i": 1}, fn=_answer)
        clock.advance(301)  # the crashed writer's lease ends
        run.model_call({"i": 1}, fn=_answer)
        assert sorted(n.payload["i"] for n in b_store.children(run.root_id)) == [0, 1]
    crashed.close()


def test_shared_runs_let_many_workers_append_under_one_root(
    two_stores: tuple[Store, Store],
) -> None:
    a_store, b_store = two_stores
    with Runtime(a_store) as one, Runtime(b_store) as two:
        x, y = one.run("team", shared=True), two.run("team", shared=True)
        mine = x.model_call({"w": "x"}, fn=_answer)
        y.model_call({"w": "y"}, fn=_answer)
        assert sorted(n.payload["w"] for n in a_store.children(x.root_id)) == ["x", "y"]
        # Below the root each line still has one writer.
        on_x = two.run("team", shared=True)
        on_x.checkout(mine.id)
        with pytest.raises(WriterConflict):
            on_x.model_call({"w": "y", "on": "x's line"}, fn=_answer)


def test_workers_share_a_label_and_a_fan_out_is_one_writer(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    with Runtime(db) as one, Runtime(db) as two:
        # shared=True: both at the root of one label, each worker starts its own line there
        x, y = one.run("shared", shared=True), two.run("shared", shared=True)
        x.model_call({"w": "x", "i": 0}, fn=_answer)
        y.model_call({"w": "y", "i": 0}, fn=_answer)
        x.model_call({"w": "x", "i": 1}, fn=_answer)  # each on its own line
        y.model_call({"w": "y", "i": 1}, fn=_answer)

    async def fan_out() -> int:
        async with AsyncRuntime(db) as rt:
            run = rt.resume("shared")

            async def call(i: int) -> None:
                await run.fork().model_call({"fan": i}, fn=_answer)

            await asyncio.gather(*(call(i) for i in range(6)))
            return len(rt.store.children(run.cursor_id))

    assert asyncio.run(fan_out()) == 6

    async def fan_out_at_a_root() -> int:  # an exclusive run's concurrent steps: one writer
        async with AsyncRuntime(db) as rt:
            run = rt.run("exclusive")
            await asyncio.gather(*(run.fork().model_call({"i": i}, fn=_answer) for i in range(6)))
            return len(rt.store.children(run.root_id))

    assert asyncio.run(fan_out_at_a_root()) == 6


_KILLED_WRITER = """
import os, signal, sys
from pollard import PostgresStore, Runtime, SQLiteStore
where, label = sys.argv[1], sys.argv[2]
frozen = lambda: 1_000_000.0  # the test's clock: the lease ends when the test says so
if where.startswith("postgresql://"):
    dsn, _, store_id = where.rpartition("#")
    store = PostgresStore(dsn, store_id=store_id, clock=frozen)
else:
    store = SQLiteStore(where, clock=frozen)
rt = Runtime(store, reservation_lease_seconds=60)
rt.run(label).model_call({"i": 0}, fn=lambda p: {"text": "ok"})
print("committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_sigkilled_writer_lets_a_resume_take_over_once_its_lease_ends(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> None:
    import subprocess
    import sys

    from pollard import PostgresStore

    if backend == "sqlite":
        where = str(tmp_path / "killed.db")
        store: Store = SQLiteStore(where, clock=clock)
    else:
        from tests.pollard._postgres import drop_store, fresh_store_id

        dsn = request.getfixturevalue("pg_dsn")
        store_id = fresh_store_id("killed")
        where = f"{dsn}#{store_id}"
        store = PostgresStore(dsn, store_id=store_id, clock=clock)
    try:
        child = subprocess.run(
            [sys.executable, "-c", _KILLED_WRITER, where, "job"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert child.returncode == -9 and "committed" in child.stdout, child.stderr
        with Runtime(store) as resumed:
            run = resumed.run("job")
            with pytest.raises(WriterConflict):  # its lease has not ended: it may be alive
                run.model_call({"i": 1}, fn=_answer)
            clock.advance(61)  # the killed writer's lease ends
            run.model_call({"i": 1}, fn=_answer)
            assert sorted(n.payload["i"] for n in store.children(run.root_id)) == [0, 1]
    finally:
        store.close()
        if backend == "postgres":
            drop_store(dsn, store_id)
