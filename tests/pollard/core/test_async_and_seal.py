"""The async shell (same core) and seal/verify."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pollard import (
    AsyncRuntime,
    Budget,
    BudgetExceeded,
    MissingRecording,
    Node,
    Runtime,
    SQLiteStore,
    Store,
    seal,
    verify,
)


async def amodel(payload: Any) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"text": "ok", "usage": {"input_tokens": 1, "output_tokens": 1}}


async def test_async_run_with_async_fn_stream_and_callbacks(tmp_path: Path) -> None:
    async def stream(payload: Any) -> AsyncIterator[dict[str, Any]]:
        for part in ("a", "b"):
            await asyncio.sleep(0)
            yield {"delta": {"text": part}}
        yield {"delta": {"usage": {"input_tokens": 1, "output_tokens": 1}}}

    seen: list[Any] = []

    async def on_delta(chunk: Any) -> None:
        seen.append(chunk)

    async with AsyncRuntime(tmp_path / "a.db") as rt:
        assert rt.offload_store_io is True
        async with rt.run("t", budget=Budget(steps=2)) as run:
            node = await run.model_call({"model": "m"}, fn=stream, on_delta=on_delta)
            assert node.result["text"] == "ab" and len(seen) == 3
            tool = await run.tool_call("sum", {"a": 1}, fn=lambda payload: payload["args"]["a"] + 1)
            assert tool.result == {"value": 2}
            branch = await run.branch()
            assert branch.cursor_id != run.cursor_id
            with pytest.raises(BudgetExceeded):
                await run.amodel_call({"model": "m", "i": 2}, fn=amodel)
            assert run.report()["spent"]["steps"] == 2


async def test_async_replay_and_failures() -> None:
    rt = AsyncRuntime()
    run = rt.run("t")
    await run.model_call({"model": "m"}, fn=amodel)

    async def boom(payload: Any) -> Any:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await run.model_call({"model": "m", "i": 2}, fn=boom)
    failures = [n for n in rt.store.children(run.cursor_id) if n.kind.value == "note"]
    assert failures[0].payload["event"] == "call_failed"
    replay = AsyncRuntime(rt.store, mode="replay").run("t")
    node = await replay.model_call({"model": "m"}, fn=boom)
    assert node.result["text"] == "ok"
    with pytest.raises(MissingRecording):
        await replay.note({"x": 1})


def test_sync_runtime_rejects_async_functions() -> None:
    run = Runtime().run("t")
    with pytest.raises(TypeError, match="AsyncRuntime"):
        run.model_call({"model": "m"}, fn=amodel)
    notes = [n for n in run.store.children(run.root_id) if n.kind.value == "note"]
    assert notes and notes[0].payload["error"] == "TypeError"


async def test_cancellation_is_recorded_and_charged() -> None:
    rt = AsyncRuntime()
    run = rt.run("t", budget=Budget(steps=3))
    started = asyncio.Event()

    async def slow(payload: Any) -> Any:
        started.set()
        await asyncio.sleep(30)

    task = asyncio.create_task(run.model_call({"model": "m"}, fn=slow))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    notes = [n for n in rt.store.children(run.root_id) if n.kind.value == "note"]
    assert notes[0].payload["event"] == "call_cancelled"
    assert rt.store.totals(run.root_id)["steps"] == 1


def _recorded(store: Store) -> str:
    run = Runtime(store).run("audit")
    run.note({"status": "ready"})
    run.model_call({"model": "m", "t": 0.5}, fn=lambda p: {"text": "hi"})
    run.rollback()
    run.tool_call("x", {"a": [1, 2]}, fn=lambda a: {"ok": True})
    return run.root_id


def test_seal_is_deterministic_across_backends(tmp_path: Path) -> None:
    from pollard import MemoryStore

    memory = MemoryStore()
    root = _recorded(memory)
    with SQLiteStore(tmp_path / "s.db") as sqlite_store:
        assert _recorded(sqlite_store) == root
        assert seal(memory, root).digest == seal(sqlite_store, root).digest
    report = seal(memory, root)
    assert report.algorithm == "sha256:pollard/v1:seal"
    assert [e.index for e in report.entries] == list(range(4))
    assert report.to_dict()["digest"] == report.digest
    memory.update_meta(root, {"note": "meta is not sealed"})
    assert seal(memory, root).digest == report.digest


def test_verify_detects_tampering(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "v.db"
    with SQLiteStore(path) as store:
        root = _recorded(store)
        assert verify(store).ok and verify(store).nodes == 4
        leaf = next(n for n in store.walk(root) if n.kind.value == "model_call")
        assert verify(store, leaf.id).ok
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE nodes SET result = ? WHERE id = ?",
            ('{"text":"forged"}', bytes.fromhex(leaf.id)),
        )
    conn.close()
    with SQLiteStore(path) as store:
        report = verify(store, leaf.id)
        assert not report.ok and report.findings[0].node_id == leaf.id
        assert not verify(store).ok
        assert not verify(store, root, subtree=True).ok
        from pollard import IntegrityError

        with pytest.raises(IntegrityError):
            seal(store, root)
        with pytest.raises(IntegrityError):
            run = Runtime(store, mode="replay").run("audit")
            run.note({"status": "ready"})
            run.model_call({"model": "m", "t": 0.5}, fn=lambda p: {"text": "x"})


def test_node_type_is_exported() -> None:
    assert Node.create("root", None, {"run": "x"}).kind.value == "root"


def test_a_failed_stream_is_closed_recorded_and_charged() -> None:
    closed: list[str] = []

    def stream(payload: Any) -> Any:
        try:
            yield {"delta": {"text": "a"}}
            yield {"delta": {"text": "b"}}
        finally:
            closed.append("sync")

    def bad_delta(chunk: Any) -> None:
        raise ValueError("consumer failed")

    run = Runtime().run("t", budget=Budget(steps=3))
    with pytest.raises(ValueError, match="consumer failed"):
        run.model_call({"model": "m"}, fn=stream, on_delta=bad_delta)
    assert closed == ["sync"]
    note = run.store.children(run.root_id)[0]
    assert note.payload["event"] == "call_failed" and note.meta["charges"]["steps"] == 1


async def test_a_failed_async_stream_is_closed() -> None:
    closed: list[str] = []

    async def stream(payload: Any) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"delta": {"text": "a"}}
            yield {"delta": {"text": "b"}}
        finally:
            closed.append("async")

    async def bad_delta(chunk: Any) -> None:
        raise ValueError("consumer failed")

    run = AsyncRuntime().run("t")
    with pytest.raises(ValueError):
        await run.model_call({"model": "m"}, fn=stream, on_delta=bad_delta)
    assert closed == ["async"]


async def test_async_on_node_hook_sees_every_new_node() -> None:
    seen: list[str] = []

    async def hook(node: Node) -> None:
        seen.append(node.kind.value)

    rt = AsyncRuntime(on_node=hook)
    run = rt.run("hooked")
    await run.model_call({"model": "m"}, fn=amodel)
    await asyncio.sleep(0)  # let the root's scheduled hook run
    assert sorted(seen) == ["model_call", "root"]


def test_recompute_charges_matches_the_ledger() -> None:
    from decimal import Decimal

    from pollard import recompute_charges

    rt = Runtime()
    run = rt.run("audit", budget=Budget(steps=10))
    for i in range(3):
        run.model_call(
            {"model": "m", "i": i},
            fn=lambda p: {"text": "x", "usage": {"input_tokens": 2, "output_tokens": 1}},
        )
    recomputed = recompute_charges(rt.store, run.root_id, exact=True)
    assert {k: Decimal(v) for k, v in recomputed.items()} == rt.store.totals(run.root_id)
    assert recomputed["tokens"] == "9"
    numbers = recompute_charges(rt.store, run.root_id)
    # Plain numbers, as report() gives (the measured seconds vary, so only their type is fixed).
    assert {k: numbers[k] for k in ("steps", "tokens")} == {"steps": 3, "tokens": 9}
    assert all(type(v) in (int, float) for v in numbers.values())
