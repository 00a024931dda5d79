"""Issue 25: one writer per run (a lease with a fencing token, checked at commit).

Two runtimes (two processes, as far as the store can tell) at the same cursor of one run, its
root included, must not both append under it: the second is refused with `WriterConflict`
before its step runs. Workers that each start their own lines under one label open the run
with ``shared=True``; one runtime's concurrent fan-out is one writer; a writer that stopped (or
crashed, once its lease ended) lets another take over. A writer that died on this host (a
SIGKILL) is taken over at once; one on another host, or of an older pollard, after its lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import (
    AsyncRuntime,
    Budget,
    BudgetExceeded,
    MemoryStore,
    Runtime,
    SQLiteStore,
    Store,
    WriterConflict,
)
from pollard._core._ledger import BudgetClaim

from .conftest import FakeClock

# Telling that a holder is gone needs the process table (/proc); elsewhere leases only expire.
needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/stat"), reason="needs /proc to tell a process is gone"
)


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
    if os.path.exists("/proc/self/stat"):  # the holder is named: here, this very process
        assert (info.value.pid, info.value.alive) == (os.getpid(), True)
        assert "this very process" in str(info.value)
        assert "close this process's other runtime" in (info.value.hint or "")
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


_WRITER_CHILD = """
import os, signal, sys
from pollard import PostgresStore, Runtime, SQLiteStore
where, label, then = sys.argv[1], sys.argv[2], sys.argv[3]
frozen = lambda: 1_000_000.0  # the test's clock: the lease ends only when the test says so
if where.startswith("postgresql://"):
    dsn, _, store_id = where.rpartition("#")
    store = PostgresStore(dsn, store_id=store_id, clock=frozen)
else:
    store = SQLiteStore(where, clock=frozen)
rt = Runtime(store, reservation_lease_seconds=3600)  # never renewed while the test runs
run = rt.run(label)
step = run.model_call({"i": 0}, fn=lambda p: {"text": "ok"})
if then == "elsewhere":  # the same writer, as if its process ran on another host
    writer = step.meta["writer"]
    holder = dict(store.append_holder(run.root_id)["holder"], host="elsewhere.example")
    store.lease_writer(writer, 3600, holder=holder)
print("committed", flush=True)
if then == "sleep":
    sys.stdin.read()  # alive until the test closes its stdin or kills it
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_spec(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[tuple[str, Store]]:
    """A ledger another process opens (its spec) and this test's store on it (its clock)."""
    if request.param == "sqlite":
        where = str(tmp_path / "killed.db")
        store: Store = SQLiteStore(where, clock=clock)
        yield where, store
        store.close()
        return
    from pollard import PostgresStore
    from tests.pollard._postgres import drop_store, fresh_store_id

    dsn = request.getfixturevalue("pg_dsn")
    store_id = fresh_store_id("killed")
    store = PostgresStore(dsn, store_id=store_id, clock=clock)
    yield f"{dsn}#{store_id}", store
    store.close()
    drop_store(dsn, store_id)


def _writer(where: str, then: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER_CHILD, where, "job", then],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _killed(where: str, then: str = "die") -> int:
    """Run a writer that commits one step under run 'job' and is SIGKILLed; its pid."""
    child = _writer(where, then)
    out, err = child.communicate(timeout=120)
    assert child.returncode == -9 and "committed" in out, err
    return child.pid


@needs_proc
def test_a_sigkilled_writer_on_this_host_is_taken_over_at_once(
    shared_spec: tuple[str, Store],
) -> None:
    where, store = shared_spec
    _killed(where)
    # Its lease has an hour to run on a clock that never moves: only its death lets this in.
    with Runtime(store) as resumed:
        run = resumed.run("job")
        step = run.model_call({"i": 1}, fn=_answer)
        assert sorted(n.payload["i"] for n in store.children(run.root_id)) == [0, 1]
        # Fencing: the node changed hands with the next token; the dead writer's is refused
        # (what its commit would meet, had it only stalled).
        (first,) = [n for n in store.children(run.root_id) if n.payload["i"] == 0]
        dead, alive = first.meta["writer"], step.meta["writer"]
        assert store.take_append(run.root_id, dead) == 0
        assert store.take_append(run.root_id, alive) == 2


@needs_proc
def test_a_live_holder_on_this_host_is_still_refused(
    shared_spec: tuple[str, Store],
) -> None:
    where, store = shared_spec
    child = _writer(where, "sleep")
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "committed"
        with Runtime(store) as other:
            run = other.run("job")
            with pytest.raises(WriterConflict) as info:
                run.model_call({"i": 1}, fn=_answer)
            error = info.value
            assert (error.pid, error.host, error.alive) == (child.pid, socket.gethostname(), True)
            assert f"pid {child.pid} on this host, still running" in str(error)
            assert f"wait for process {child.pid} to finish" in (error.hint or "")
            child.kill()  # now it is gone: taken over at once, no lease to wait for
            child.wait(timeout=60)
            run.model_call({"i": 1}, fn=_answer)
            assert sorted(n.payload["i"] for n in store.children(run.root_id)) == [0, 1]
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=60)


def test_a_holder_on_another_host_keeps_its_lease(
    shared_spec: tuple[str, Store], clock: FakeClock
) -> None:
    where, store = shared_spec
    pid = _killed(where, "elsewhere")
    with Runtime(store) as resumed:
        run = resumed.run("job")
        with pytest.raises(WriterConflict) as info:  # it may be alive there: this host can't tell
            run.model_call({"i": 1}, fn=_answer)
        error = info.value
        assert (error.pid, error.host, error.alive) == (pid, "elsewhere.example", None)
        assert f"pid {pid} on host 'elsewhere.example'" in str(error)
        assert "lease ends" in (error.hint or "")
        clock.advance(3601)  # its lease ends
        run.model_call({"i": 1}, fn=_answer)
        assert sorted(n.payload["i"] for n in store.children(run.root_id)) == [0, 1]


@needs_proc
def test_a_gone_holder_is_taken_over_at_once_and_its_token_fenced(
    two_stores: tuple[Store, Store],
) -> None:
    a_store, b_store = two_stores
    first = Runtime(a_store, reservation_lease_seconds=300)  # never renewed during the test
    run = first.run("label")
    step = run.model_call({"i": 0}, fn=_answer)
    writer = step.meta["writer"]
    found = a_store.append_holder(run.root_id)
    assert found is not None and found["writer"] == writer
    me = found["holder"]
    assert me["pid"] == os.getpid() and me["host"] == socket.gethostname()
    # As if this pid were now another process (started at another time): the holder is gone.
    a_store.lease_writer(writer, 300, holder=dict(me, start=me["start"] + 1))
    with Runtime(b_store, reservation_lease_seconds=300) as other:
        took = other.run("label").model_call({"i": 1}, fn=_answer)
        assert sorted(n.payload["i"] for n in b_store.children(run.root_id)) == [0, 1]
        assert b_store.take_append(run.root_id, writer) == 0  # the old writer is fenced out
        assert b_store.take_append(run.root_id, took.meta["writer"]) == 2
    first.close()


def _recorded_root(store: Store) -> str:
    """The root of run 'label', with one step recorded under it by a runtime now closed."""
    with Runtime(store) as setup:
        root = setup.run("label").model_call({"i": 0}, fn=_answer).parent
    assert root is not None
    return root


def test_a_lease_without_a_holder_keeps_the_expiry_rule(
    two_stores: tuple[Store, Store], clock: FakeClock
) -> None:
    a_store, b_store = two_stores
    root = _recorded_root(a_store)
    # A writer of the previous pollard: a lease, no process recorded.
    a_store.lease_writer("old-writer", 300)
    assert a_store.take_append(root, "old-writer") == 2
    with Runtime(b_store, reservation_lease_seconds=300) as other:
        run = other.run("label")
        with pytest.raises(WriterConflict, match="recorded no process identity") as info:
            run.model_call({"i": 1}, fn=_answer)
        assert (info.value.pid, info.value.host, info.value.alive) == (None, None, None)
        clock.advance(301)
        run.model_call({"i": 1}, fn=_answer)


_HOLDING_CHILD = """
import os, signal, sys
from pollard import Budget, PostgresStore, Runtime, SQLiteStore
where = sys.argv[1]
frozen = lambda: 1_000_000.0  # the test's clock: the hold's lease ends only when it says so
if where.startswith("postgresql://"):
    dsn, _, store_id = where.rpartition("#")
    store = PostgresStore(dsn, store_id=store_id, clock=frozen)
else:
    store = SQLiteStore(where, clock=frozen)
run = Runtime(store, reservation_lease_seconds=3600).run("job", budget=Budget(steps=2))
run.model_call({"i": 0}, fn=lambda p: {"text": "ok"})
print("committed", flush=True)
# Killed during its second call: the step's hold (one step) is never settled nor released.
run.model_call({"i": 1}, fn=lambda p: os.kill(os.getpid(), signal.SIGKILL))
"""


@needs_proc
def test_the_holds_of_a_writer_killed_on_this_host_are_released_at_once(
    shared_spec: tuple[str, Store],
) -> None:
    where, store = shared_spec
    child = subprocess.run(
        [sys.executable, "-c", _HOLDING_CHILD, where], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == -9 and "committed" in child.stdout, child.stderr
    # One step spent, one held by the dead process, on a clock that never moves: a resume
    # whose wait for holds is short would be refused if the dead hold were kept.
    with Runtime(store, reservation_lease_seconds=0.2) as resumed:
        run = resumed.run("job", budget=Budget(steps=2))
        run.model_call({"i": 1}, fn=_answer)
        assert store.totals(run.root_id)["steps"] == 2
        with pytest.raises(BudgetExceeded):  # the budget itself still holds
            run.model_call({"i": 2}, fn=_answer)


def test_the_holds_of_a_live_or_unknown_owner_are_kept(
    two_stores: tuple[Store, Store], clock: FakeClock
) -> None:
    a_store, b_store = two_stores
    root = _recorded_root(a_store)
    claim = [BudgetClaim(root, "steps", Decimal(100), Decimal(1))]
    me = a_store.append_holder(root)
    assert me is not None and me["holder"] is not None
    a_store.lease_writer("live", 60, holder=me["holder"])  # this very process: alive
    a_store.lease_writer("far", 60, holder=dict(me["holder"], host="elsewhere.example"))
    a_store.lease_writer("dead", 60, holder=dict(me["holder"], start=-1))
    held = {
        who: a_store.reserve(claim, lease_seconds=60, owner=who).reservation_id
        for who in ("live", "far", "dead", None)
    }
    assert all(held.values())
    expected = 1 if os.path.exists("/proc/self/stat") else 0
    assert b_store.release_gone() == expected  # only the dead owner's hold
    assert b_store.renew(held["dead"] or "", 60) is (expected == 0)
    assert all(b_store.renew(held[who] or "", 60) for who in ("live", "far", None))


_STALLED_WRITER = """
import sys, time
from pollard import Runtime, SQLiteStore, WriterConflict
rt = Runtime(SQLiteStore(sys.argv[1]), reservation_lease_seconds=0.6)
run = rt.run("job")
run.model_call({"i": 0}, fn=lambda p: {"text": "ok"})
print("committed", flush=True)
sys.stdin.readline()  # stopped (SIGSTOP) here while another writer takes the run over
time.sleep(0.5)  # its lease keeper renews meanwhile, as a process resumed from a pause does
try:
    run.model_call({"i": "late"}, fn=lambda p: {"text": "ok"})
    print("appended", flush=True)
except WriterConflict:
    print("refused", flush=True)
rt.close()
"""


def test_a_stalled_writer_whose_lease_ended_is_fenced_when_it_resumes(tmp_path: Path) -> None:
    db = str(tmp_path / "stalled.db")
    child = subprocess.Popen(
        [sys.executable, "-c", _STALLED_WRITER, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "committed"
        os.kill(child.pid, signal.SIGSTOP)  # alive, stalled: never taken over as gone
        time.sleep(1.0)  # past its 0.6 s lease (not an assertion: the lease must end)
        with Runtime(SQLiteStore(db), reservation_lease_seconds=0.6) as other:
            run = other.resume("job")  # at the stalled writer's leaf, where it appends next
            leaf = run.cursor_id
            run.model_call({"i": 1}, fn=_answer)  # its lease ended: taken over
            os.kill(child.pid, signal.SIGCONT)
            child.stdin.write("go\n")
            child.stdin.flush()
            # Its renewal after the pause must not make it trust the node it no longer holds.
            assert child.stdout.readline().strip() == "refused"
            assert [n.payload["i"] for n in other.store.children(leaf)] == [1]
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
        child.communicate(timeout=60)


def _forked(body: Any) -> str:
    """Run ``body()`` in a forked child; what it returned, or its exception's class name."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            outcome = str(body())
        except BaseException as exc:
            outcome = type(exc).__name__
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        outcome = pipe.read()
    assert os.waitpid(pid, 0)[1] == 0
    return outcome


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_a_writer_of_its_own(shared_spec: tuple[str, Store]) -> None:
    # A child inherits its parent's runtime, writer id included: with that id it could append
    # at the parent's cursor as "the same writer" and fork the run unnoticed.
    _, store = shared_spec
    rt = Runtime(store)
    run = rt.run("job")
    run.model_call({"step": 0}, fn=_answer)
    leaf = run.cursor_id
    with warnings.catch_warnings():  # 3.12+ warns about fork() when any other thread runs
        warnings.simplefilter("ignore", DeprecationWarning)
        at_cursor = _forked(lambda: run.model_call({"step": 1, "by": "child"}, fn=_answer).id)
        at_root = _forked(lambda: rt.run("job").model_call({"by": "child"}, fn=_answer).id)
        elsewhere = _forked(lambda: rt.run("other").model_call({"by": "child"}, fn=_answer).id)
    assert at_cursor == "WriterConflict" and at_root == "WriterConflict"
    assert store.children(leaf) == []
    # A run of its own is the child's to write, under its own writer id.
    mine = store.get(elsewhere)
    parents = {n.meta.get("writer") for n in store.walk(run.root_id) if "writer" in n.meta}
    assert mine.meta["writer"] not in parents and len(parents) == 1
    run.model_call({"step": 1, "by": "parent"}, fn=_answer)  # the parent goes on
    assert [n.payload["by"] for n in store.children(leaf)] == ["parent"]
    rt.close()


def test_compact_drops_the_rows_of_writers_whose_lease_ended_long_ago(
    two_stores: tuple[Store, Store], clock: FakeClock
) -> None:
    # Every runtime ever opened leaves its lease and process rows; compact() prunes those of
    # writers gone for an hour, and keeps a live writer's, so the kv table does not grow forever.
    store, _ = two_stores
    me = {"host": "h", "pid": 1, "start": 1}
    for writer in ("gone", "recent", "live"):
        store.lease_writer(writer, 10, holder=me)
        assert store.take_append(f"n-{writer}", writer) == 1
    clock.advance(3000)
    store.lease_writer("recent", 0)  # closed 3,000 s after its lease started: kept an hour
    clock.advance(700)
    store.lease_writer("live", 10)  # still renewed
    store.compact()
    holders = {w: store.append_holder(f"n-{w}") for w in ("gone", "recent", "live")}
    assert {w: (h or {}).get("holder") for w, h in holders.items()} == {
        "gone": None,
        "recent": me,
        "live": me,
    }
    # A pruned writer reads as one whose lease ended: its node is taken over, the token fenced.
    assert store.take_append("n-gone", "next") == 2
    assert store.take_append("n-live", "next") == 0
