"""A cancelled `governed_run_many` resumed: the ledger serves what finished, nothing is charged
twice, and the budget the cancelled call used is reused by its resume, not refused."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollard import AsyncRuntime, Budget, Node, SQLiteStore
from pollard.adapters.pollux import governed_run_many
from pollux import Config, RetryPolicy
from pollux.testing import Emulator, Latency, RecordedRequest

PROMPTS = ["first?", "second?", "slow third?", "fourth?"]


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _config(emu: Emulator, concurrency: int) -> Config:
    return Config(
        provider="local",
        model="m",
        base_url=emu.base_url("local"),
        retry=RetryPolicy(max_attempts=1),
        request_concurrency=concurrency,
    )


def _prompt_of(request: RecordedRequest) -> str:
    return str(request.json["messages"][-1]["content"])


async def _cancel_when(path: Path, emu: Emulator, concurrency: int, answered: int) -> None:
    """Run the fan-out until ``answered`` answers are stored and the slow call is in flight
    (held by the emulator without blocking it), then cancel the fan-out."""
    arrived = threading.Event()

    def handler(request: RecordedRequest) -> Latency | None:
        if "slow" in _prompt_of(request):
            arrived.set()
            return Latency(60)
        return None

    emu.on("local.chat", handler)
    stored = asyncio.Event()
    count = 0

    def on_node(node: Node) -> None:
        nonlocal count
        count += node.kind.value == "model_call"
        if count == answered:
            stored.set()

    loop = asyncio.get_running_loop()
    async with AsyncRuntime(path, on_node=on_node) as rt:
        run = rt.run("fan", budget=Budget(steps=len(PROMPTS)))
        task = asyncio.ensure_future(
            governed_run_many(run, PROMPTS, config=_config(emu, concurrency))
        )
        await stored.wait()
        assert await loop.run_in_executor(None, arrived.wait, 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    emu.on("local.chat", None)


def _ledger(path: Path) -> tuple[dict[str, int], list[Node]]:
    with SQLiteStore(path) as store:
        (root,) = store.roots()
        return {k: int(v) for k, v in store.totals(root.id).items()}, store.children(root.id)


async def test_a_cancelled_fan_out_resumes_without_charging_twice(
    tmp_path: Path, emu: Emulator
) -> None:
    path = tmp_path / "runs.db"
    await _cancel_when(path, emu, concurrency=4, answered=3)
    totals, children = _ledger(path)
    events = [n.payload.get("event") for n in children if n.kind.value == "note"]
    # The call cancelled in flight was sent: charged one step, as a call_cancelled note.
    assert totals["steps"] == 4 and events == ["call_cancelled"]

    emu.clear_requests()
    async with AsyncRuntime(path) as rt:
        run = rt.run("fan", budget=Budget(steps=len(PROMPTS)))  # no room left, but a resume
        answers = await governed_run_many(run, PROMPTS, config=_config(emu, 4))
        report = run.report()
    assert answers.status == "ok", [o.diagnostics.raw for o in answers.outputs]
    # Only the cancelled prompt is asked again; the three answers come from the ledger.
    assert [_prompt_of(r) for r in emu.requests_for("local.chat")] == ["slow third?"]
    assert report["avoided"]["steps"] == 3 and report["spent"].get("steps", 0) == 0
    totals, children = _ledger(path)
    assert totals["steps"] == 4  # four prompts, four calls charged
    calls = [n for n in children if n.kind.value == "model_call"]
    assert len(calls) == 4
    assert not any(n.payload.get("event") == "call_repeated" for n in children)
    (third,) = [n for n in calls if "slow" in json.dumps(n.payload)]
    assert third.meta["credited"]["steps"] == 1 and "steps" not in third.meta["charges"]


async def test_calls_cancelled_before_they_were_sent_are_not_charged(
    tmp_path: Path, emu: Emulator
) -> None:
    # One call at a time: the slow third is in flight, the fourth never reached the provider.
    path = tmp_path / "runs.db"
    await _cancel_when(path, emu, concurrency=1, answered=2)
    totals, children = _ledger(path)
    assert totals["steps"] == 3  # two answers and the cancelled third; the fourth: nothing
    assert [n.payload.get("event") for n in children if n.kind.value == "note"] == [
        "call_cancelled"
    ]
