"""Issue 25: one writer per node of a run (a lease with a fencing token, checked at commit).

Two runtimes (two processes, as far as the store can tell) that resumed the same run at the same
cursor must not both append under it: the second is refused with `WriterConflict` before its
step runs. Workers may still start their own lines under a shared run label, one runtime's
concurrent fan-out is one writer, and a writer that stopped lets another take over.
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


def test_workers_share_a_label_and_a_fan_out_is_one_writer(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    with Runtime(db) as one, Runtime(db) as two:
        x, y = one.run("shared"), two.run("shared")  # both at the root: a shared namespace
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
