"""A runtime created inline (never bound to a name) stays open while its runs are used."""

from __future__ import annotations

import gc
from pathlib import Path

from pollard import AsyncRuntime, Runtime, seal


def test_a_run_outlives_the_with_block_of_an_inline_runtime(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with Runtime(path).run("triage") as run:
        run.note({"status": "ready"})
    gc.collect()
    # The seed's Export Seals pattern: the run's store is still readable after the block.
    assert len(seal(run.store, run.root_id).entries) == 2
    resumed = Runtime(path).resume("triage")
    gc.collect()
    assert resumed.note({"status": "again"}).parent == run.cursor_id
    del run, resumed
    gc.collect()  # closed without a ResourceWarning (filterwarnings = error)


async def test_an_inline_async_runtime_stays_open(tmp_path: Path) -> None:
    async with AsyncRuntime(tmp_path / "runs.db").run("triage") as run:
        gc.collect()
        await run.note({"status": "ready"})
        branch = await run.branch()
        gc.collect()
        node = await branch.note({"status": "branched"})
    gc.collect()
    assert run.store.get(node.id).payload == {"status": "branched"}
    del run, branch
    gc.collect()
