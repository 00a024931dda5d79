"""`SharedQuota`: many worker processes, one provider quota, kept in a pollard store.

Each worker is its own process with its own Session, connections and store connection, as
separate hosts would have; they share only the store and the emulator that enforces the
provider's limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pollux
from pollard import MemoryStore
from pollard.adapters.pollux import SharedQuota, governed_run_many
from pollard.adapters.pollux._quota_redis import RedisWindows
from pollux import Config, ConfigurationError, RateLimitError, RetryPolicy
from pollux.quota import QuotaRequest
from pollux.testing import Emulator, EmulatorQuota
from tests.pollard._postgres import drop_store, fresh_store_id

WINDOW_S = 0.4
LIMIT = 4

WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys
    import pollux
    from pollard.adapters.pollux import SharedQuota

    async def main():
        quota = SharedQuota(
            os.environ["QUOTA_STORE"], requests_per_minute=int(os.environ["QUOTA_LIMIT"]),
            window_s=float(os.environ["QUOTA_WINDOW"]), name="shared-test",
        )
        config = pollux.Config(
            provider="openai", model="gpt-5-nano", api_key="k", quota=quota,
            retry=pollux.RetryPolicy(max_attempts=1, max_elapsed_s=None),
        )
        out = await pollux.run_many(
            [f"w{sys.argv[1]} q{i}?" for i in range(int(os.environ["QUOTA_PROMPTS"]))],
            config=config,
        )
        quota.close()
        print(json.dumps([o.diagnostics.error is None for o in out.outputs]))

    asyncio.run(main())
    """
)


def run_workers(emu: Emulator, store: str, workers: int, prompts: int) -> list[list[bool]]:
    env = dict(
        os.environ,
        OPENAI_BASE_URL=emu.base_url("openai"),
        QUOTA_STORE=store,
        QUOTA_LIMIT=str(LIMIT),
        QUOTA_WINDOW=str(WINDOW_S),
        QUOTA_PROMPTS=str(prompts),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(n)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(workers)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        import json

        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(quotas={"openai": EmulatorQuota(requests=LIMIT, window_s=WINDOW_S)}) as emulator:
        yield emulator


def test_worker_processes_on_one_sqlite_quota_draw_no_429(emu: Emulator, tmp_path: Path) -> None:
    results = run_workers(emu, str(tmp_path / "quota.db"), workers=2, prompts=4)
    assert [all(r) for r in results] == [True, True]
    assert emu.rate_limited("openai") == 0
    assert len([r for r in emu.requests if r.route == "openai.responses.create"]) == 8


def test_worker_processes_on_one_postgres_quota_draw_no_429(emu: Emulator, pg_dsn: str) -> None:
    store_id = fresh_store_id("quota")
    try:
        results = run_workers(emu, f"{pg_dsn}#{store_id}", workers=2, prompts=3)
    finally:
        drop_store(pg_dsn, store_id)
    assert [all(r) for r in results] == [True, True]
    assert emu.rate_limited("openai") == 0


def test_worker_processes_on_one_redis_quota_draw_no_429(emu: Emulator, redis_url: str) -> None:
    results = run_workers(emu, redis_url, workers=2, prompts=3)
    assert [all(r) for r in results] == [True, True]
    assert emu.rate_limited("openai") == 0


async def test_a_redis_quota_is_exact_across_workers_and_cluster_ready(redis_url: str) -> None:
    import redis

    name = f"t-{os.urandom(4).hex()}"
    with (
        SharedQuota(redis_url, requests_per_minute=2, tokens_per_minute=500, name=name) as a,
        SharedQuota(redis_url, requests_per_minute=2, tokens_per_minute=500, name=name) as b,
    ):
        first = await a.acquire(_request())
        await b.acquire(_request())
        with pytest.raises(RateLimitError):
            await b.acquire(_request(deadline=time.monotonic() + 0.05))
        # A settlement records what was used; a pause fills the window for every worker.
        await first.settle(3)
        # The waiter's ticket is given up on b's quota thread, not awaited (so a cancelled
        # waiter leaves too): the next call on that thread runs after it.
        await b._call(lambda: None)
        client = redis.Redis.from_url(redis_url)
        scope = a._window_keys(_request())[2]
        keys = sorted(k.decode() for k in client.keys(f"pollard:{{pollard-quota:{scope[:32]}}}:*"))
        client.close()
        # Every key of a window (its holds, and the queue the refused attempt waited in)
        # carries one hash tag, so a cluster keeps them in one slot.
        tag = f"{{pollard-quota:{scope[:32]}}}"
        every = {f"pollard:{tag}:{part}" for part in RedisWindows.PARTS}
        assert {f"pollard:{tag}:amounts", f"pollard:{tag}:holds"} <= set(keys) <= every
        # The waiter that gave up left the queue.
        assert f"pollard:{tag}:queue" not in keys
        other = f"{name}-paused"
        with SharedQuota(redis_url, requests_per_minute=5, name=other) as c:
            await c.pause(_request(), 30)
            with pytest.raises(RateLimitError):
                await c.acquire(_request(deadline=time.monotonic() + 0.05))


def _request(model: str = "gpt-5-nano", deadline: float | None = None) -> QuotaRequest:
    return QuotaRequest("openai", model, None, 10, deadline)


async def test_a_429_told_to_one_worker_slows_every_worker(tmp_path: Path) -> None:
    path = str(tmp_path / "quota.db")
    with (
        SharedQuota(path, requests_per_minute=100, name="q") as told,
        SharedQuota(path, requests_per_minute=100, name="q") as other,
        SharedQuota(path, requests_per_minute=100, name="another") as unrelated,
    ):
        await told.pause(_request(), 30)
        with pytest.raises(RateLimitError) as caught:
            await other.acquire(_request(deadline=time.monotonic() + 0.05))
        assert "deadline" in str(caught.value) and caught.value.hint
        # Another quota name, and another model under per="model", are not slowed.
        await (await unrelated.acquire(_request())).settle(12)
        await (await other.acquire(_request(model="gpt-5"))).settle(12)


async def test_an_unreachable_store_fails_closed_by_default(tmp_path: Path) -> None:
    with Emulator() as emu:
        # A store that cannot be opened (its folder is missing, as on a mount that is down)
        # stands for a server that is down.
        quota = SharedQuota(str(tmp_path / "down" / "quota.db"), requests_per_minute=10)
        config = Config(
            provider="openai",
            model="gpt-5-nano",
            api_key="k",
            quota=quota,
            retry=RetryPolicy(max_attempts=1),
        )
        os.environ["OPENAI_BASE_URL"] = emu.base_url("openai")
        try:
            outputs = await pollux.run_many(["Hi?"], config=config)
        finally:
            del os.environ["OPENAI_BASE_URL"]
            quota.close()
        error = outputs.outputs[0].diagnostics.error
        assert error is not None and error["error_category"] == "quota_unavailable"
        assert "on_unreachable='local'" in error["hint"]
        assert emu.requests == []


async def test_an_unreachable_store_can_fall_back_to_a_bounded_local_share(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    quota = SharedQuota(
        str(tmp_path / "down" / "quota.db"),
        requests_per_minute=8,
        window_s=2,  # short: the local share starts full for one window
        on_unreachable="local",
        workers=4,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="pollard.adapters.pollux.quota"):
            permits = [await quota.acquire(_request()) for _ in range(2)]
            for permit in permits:
                await permit.settle(10)
            # This worker's share is 8 / 4 = 2 a window: the third waits past its deadline.
            with pytest.raises(RateLimitError):
                await quota.acquire(_request(deadline=time.monotonic() + 0.05))
    finally:
        quota.close()
    assert any("1/4 of the limits" in r.getMessage() for r in caplog.records)


def test_bad_shared_quota_settings_are_refused_with_hints(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    for kwargs in (
        {},
        {"requests_per_minute": 0},
        {"requests_per_minute": 5, "per": "region"},
        {"requests_per_minute": 5, "on_unreachable": "local"},
        {"requests_per_minute": 5, "on_unreachable": "ignore"},
    ):
        with pytest.raises(ConfigurationError) as caught:
            SharedQuota(path, **kwargs)  # type: ignore[arg-type]
        assert caught.value.hint


async def test_a_governed_fan_out_under_a_shared_quota_replays_without_conflicts(
    tmp_path: Path,
) -> None:
    from pollard import AsyncRuntime

    store = MemoryStore()
    with SharedQuota(str(tmp_path / "q.db"), requests_per_minute=2, window_s=0.2) as quota:
        config = Config(provider="openai", model="gpt-5-nano", use_mock=True, quota=quota)
        for _ in range(2):
            async with AsyncRuntime(store).run("quota fan-out") as run:
                outputs = await governed_run_many(run, ["A?", "B?", "C?"], config=config)
            assert len(outputs.answers) == 3
    calls = [node for node in store.walk(store.roots()[0].id) if node.kind == "model_call"]
    assert len(calls) == 3
    assert all("result_conflicts" not in node.meta for node in calls)
    assert all("quota" not in node.result["output"]["diagnostics"] for node in calls)


def test_the_emulator_enforces_a_quota_in_a_child_process_too() -> None:
    with Emulator(process=True, quotas={"openai": EmulatorQuota(requests=1, window_s=30)}) as emu:

        async def two() -> list[str | None]:
            config = Config(
                provider="openai",
                model="gpt-5-nano",
                api_key="k",
                retry=RetryPolicy(max_attempts=1),
            )
            os.environ["OPENAI_BASE_URL"] = emu.base_url("openai")
            try:
                out = await pollux.run_many(["a?", "b?"], config=config)
            finally:
                del os.environ["OPENAI_BASE_URL"]
            return [(o.diagnostics.error or {}).get("error_category") for o in out.outputs]

        assert sorted(asyncio.run(two()), key=str) == [None, "rate_limit"]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_a_shared_quota_holds_its_window_for_a_call_only_media_put_above_it(
    backend: str, tmp_path: Path, redis_url: str
) -> None:
    # As LocalQuota: a worst case that only media bytes put above the token limit holds the
    # whole window (it was refused as "never admitted"); one above it without them is refused.
    store = str(tmp_path / "q.db") if backend == "sqlite" else redis_url
    name = f"media-{os.getpid()}-{time.monotonic_ns()}"
    with SharedQuota(store, tokens_per_minute=20_000, window_s=30, name=name) as quota:
        image = QuotaRequest("openai", "gpt-5-nano", None, 30_000, None, media_tokens=25_000)
        permit = await quota.acquire(image)
        assert permit.tokens_held == 20_000  # type: ignore[attr-defined]
        with pytest.raises(RateLimitError):  # the window is full until the answer settles it
            await quota.acquire(dataclasses.replace(image, deadline=time.monotonic() + 0.2))
        await permit.settle(900)
        prompt = QuotaRequest("openai", "gpt-5-nano", None, 30_000, None, media_tokens=5_000)
        with pytest.raises(pollux.APIError, match="25,000 tokens besides its media"):
            await quota.acquire(prompt)
