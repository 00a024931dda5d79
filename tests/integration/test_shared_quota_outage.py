"""`SharedQuota` when its store goes away and comes back: clear errors, bounded hand-overs.

The hand-over tests stand a store that can be switched off for a PostgreSQL server that stops;
the PostgreSQL tests cut this test's own connections on the shared server, or stop a private
cluster of their own (skipped where the PostgreSQL binaries are not installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
import uuid
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import MemoryStore, PollardError, WindowClaim
from pollard.adapters.pollux import SharedQuota
from pollard.adapters.pollux._quota_redis import RedisWindows
from pollux import APIError, RateLimitError
from pollux.quota import QuotaRequest
from stress._pgcluster import PrivateCluster, binaries
from stress._redisserver import PrivateRedis
from tests.pollard._postgres import drop_store, fresh_store_id


def _lost() -> PollardError:
    """The error `PostgresStore` raises when its server goes away (marked ``connection_lost``)."""
    error = PollardError("lost the connection to the store", hint="it restarted")
    error.connection_lost = True  # type: ignore[attr-defined]
    return error


class SwitchedStore(MemoryStore):
    """A store that refuses every call while ``down``, and notes each reservation it took."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.reserved: list[tuple[list[Decimal | None], float]] = []  # (window amounts, lease)

    def reserve(
        self, claims: Sequence[Any], windows: Sequence[WindowClaim] = (), **kwargs: Any
    ) -> Any:
        if self.down:
            raise _lost()
        self.reserved.append(([w.amount for w in windows], kwargs["lease_seconds"]))
        return super().reserve(claims, windows, **kwargs)

    def release(self, reservation_id: str) -> None:
        if self.down:
            raise _lost()
        super().release(reservation_id)


def _request(deadline: float | None = None) -> QuotaRequest:
    return QuotaRequest("openai", "gpt-5-nano", None, 10, deadline)


async def test_the_local_share_starts_full_for_one_window() -> None:
    # What the fleet drew from the shared window before the outage still counts at the
    # provider: a local share that admitted at once would double the limit for that window.
    store = SwitchedStore()
    with SharedQuota(
        store, requests_per_minute=4, window_s=30, on_unreachable="local", workers=2
    ) as quota:
        for _ in range(4):
            await (await quota.acquire(_request())).settle(10)
        store.down = True
        with pytest.raises(RateLimitError):
            await quota.acquire(_request(deadline=time.monotonic() + 0.05))


async def test_a_worker_back_on_the_store_writes_its_local_share_there_first() -> None:
    store = SwitchedStore()
    window = 1.0
    with SharedQuota(
        store, requests_per_minute=2, window_s=window, on_unreachable="local", workers=2
    ) as quota:
        store.down = True
        # After one window the local share (2 / 2 = 1 a window) admits one attempt.
        await (await quota.acquire(_request())).settle(10)
        # The next waits for the local window; meanwhile the store answers again, and the
        # waiter goes back to it instead of waiting the local window out.
        waiter = asyncio.ensure_future(quota.acquire(_request()))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        store.down = False
        permit = await waiter
        await permit.settle(10)
    # First the local admission, written to the shared window for what is left of its window
    # (never refused: the limit it is held under is unlimited); then the waiter's own (its
    # request, then the one unit of the queue's gate an attempt holds).
    (recorded, lease), (admitted, _) = store.reserved[:2]
    assert recorded == [Decimal(1)] and 0 < lease <= window
    assert admitted[0] == Decimal(1) and len(admitted) <= 2


async def test_a_worker_back_on_redis_writes_its_local_share_there_first(redis_url: str) -> None:
    quota = SharedQuota(
        redis_url,
        requests_per_minute=2,
        window_s=1.0,
        name=f"outage-{uuid.uuid4().hex}",
        on_unreachable="local",
        workers=2,
    )
    redis = quota._redis
    assert redis is not None
    admit, hold = redis.admit, redis.hold
    down = True
    held: list[tuple[int, int, float]] = []

    def switched_admit(*args: Any, **kwargs: Any) -> Any:
        if down:
            raise ConnectionError("Redis went away")
        return admit(*args, **kwargs)

    def noted_hold(scope: str, requests: int, tokens: int, lease_s: float) -> str:
        held.append((requests, tokens, lease_s))
        return hold(scope, requests, tokens, lease_s)

    redis.admit, redis.hold = switched_admit, noted_hold  # type: ignore[method-assign,assignment]
    try:
        await (await quota.acquire(_request())).settle(10)  # the local share, after a window
        down = False
        permit = await quota.acquire(_request())
        assert type(permit).__name__ == "_SharedPermit"
        await permit.settle(10)
    finally:
        quota.close()
    (requests, tokens, lease), *_settled = held
    assert (requests, tokens) == (1, 10) and 0 < lease <= 1.0


async def test_fail_closed_names_the_store_and_reconnects_after_its_connections_die(
    pg_dsn: str,
) -> None:
    import psycopg

    app = f"pollard-quota-test-{uuid.uuid4().hex[:8]}"
    store_id = fresh_store_id("quota-cut")
    separator = "&" if "?" in pg_dsn else "?"
    dsn = f"{pg_dsn}{separator}application_name={app}#{store_id}"
    try:
        with SharedQuota(dsn, requests_per_minute=100, window_s=30) as quota:
            await (await quota.acquire(_request())).settle(10)
            # Only this test's own connections (its application_name) are ended.
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (app,),
                )
            with pytest.raises(APIError) as caught:
                await quota.acquire(_request())
            assert caught.value.error_category == "quota_unavailable"
            assert store_id in str(caught.value) and caught.value.hint
            # The same quota reconnects on its next attempt: no restart of the worker.
            permit = await quota.acquire(_request())
            assert type(permit).__name__ == "_SharedPermit"
            await permit.settle(10)
    finally:
        drop_store(pg_dsn, store_id)


async def test_a_redis_quota_reconnects_after_its_connections_die(redis_url: str) -> None:
    # As on PostgreSQL: a Redis restart (here, its connections killed) needs no worker restart,
    # and the window keeps what was held before the cut.
    import redis

    client_name = f"pollard-quota-test-{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in redis_url else "?"
    name = f"cut-{uuid.uuid4().hex}"
    quota = SharedQuota(
        f"{redis_url}{separator}client_name={client_name}",
        requests_per_minute=2,
        window_s=30,
        name=name,
    )
    admin = redis.Redis.from_url(redis_url)
    try:
        await (await quota.acquire(_request())).settle(10)
        killed = admin.client_kill_filter(_type="normal", skipme=True, client_name=client_name)
        assert killed >= 1
        await (await quota.acquire(_request())).settle(10)  # reconnected: the second of two
        third = asyncio.ensure_future(quota.acquire(_request()))
        await asyncio.sleep(0.3)
        assert not third.done()  # the two held before and after the cut fill the window
        third.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await third
    finally:
        scope = quota._window_keys(_request())[2]
        quota.close()
        admin.delete(*RedisWindows._keys(scope))  # this test's window only; keep Redis tidy
        admin.close()


def _redis_quota(redis_url: str, window_s: float) -> SharedQuota:
    return SharedQuota(
        redis_url, requests_per_minute=3, window_s=window_s, name=f"lost-{uuid.uuid4().hex}"
    )


async def test_a_lost_redis_window_is_held_full_for_one_window(redis_url: str) -> None:
    # A Redis restarted without persistence forgets what the fleet drew in the window: the
    # first worker that remembers the window finds it gone and holds it full for one window,
    # for every worker (a fresh one included), instead of admitting a second window's worth.
    import redis

    first, fresh = _redis_quota(redis_url, 1.5), None
    admin = redis.Redis.from_url(redis_url)
    keys = RedisWindows._keys(first._window_keys(_request())[2])
    try:
        await (await first.acquire(_request())).settle(10)
        assert admin.delete(*keys) >= 3  # the window is lost (holds, amounts, epoch)
        again = asyncio.ensure_future(first.acquire(_request()))
        await asyncio.sleep(0.4)
        assert not again.done()  # held full: the window it drew from may still count
        assert any(m.startswith(b"rebuild:") for m in admin.zrange(keys[0], 0, -1))
        fresh = SharedQuota(
            redis_url, requests_per_minute=3, window_s=1.5, name=first.name
        )  # a worker that never saw the window waits too
        newcomer = asyncio.ensure_future(fresh.acquire(_request()))
        await asyncio.sleep(0.2)
        assert not newcomer.done()
        for waiting in (again, newcomer):  # both admitted once the window has passed
            await (await asyncio.wait_for(waiting, 15)).settle(10)
    finally:
        first.close()
        if fresh is not None:
            fresh.close()
        admin.delete(*keys)
        admin.close()


async def test_a_redis_window_remade_by_a_newcomer_is_held_full_when_a_veteran_asks(
    redis_url: str,
) -> None:
    # After a restart without persistence, a worker that never saw the window (a newcomer)
    # asking first made a new epoch and was admitted on the empty window; the workers that
    # remembered the old epoch then found one, and the fleet drew a second window's worth. A
    # veteran now takes another epoch for a lost window too: the window is held full once.
    import redis

    first_veteran = _redis_quota(redis_url, 1.5)
    name = first_veteran.name
    veterans = [
        first_veteran,
        SharedQuota(redis_url, requests_per_minute=3, window_s=1.5, name=name),
    ]
    newcomer: SharedQuota | None = None
    admin = redis.Redis.from_url(redis_url)
    keys = RedisWindows._keys(veterans[0]._window_keys(_request())[2])
    try:
        for veteran in veterans:
            await (await veteran.acquire(_request())).settle(10)
        assert admin.delete(*keys) >= 3  # the window is lost
        newcomer = SharedQuota(redis_url, requests_per_minute=3, window_s=1.5, name=name)
        admitted = await asyncio.wait_for(newcomer.acquire(_request()), 5.0)
        assert admitted.waited_s == 0  # on the empty window: nothing told it of the loss
        await admitted.settle(10)
        first = asyncio.ensure_future(veterans[0].acquire(_request()))
        await asyncio.sleep(0.4)
        assert not first.done()  # held full: the lost window may still count at the provider
        second = asyncio.ensure_future(veterans[1].acquire(_request()))
        again = asyncio.ensure_future(newcomer.acquire(_request()))
        await asyncio.sleep(0.2)
        assert not second.done() and not again.done()
        rebuilt = [m for m in admin.zrange(keys[0], 0, -1) if m.startswith(b"rebuild:")]
        assert len(rebuilt) == 1  # the second veteran found the window held already
        for waiting in (first, second, again):  # all admitted once the window has passed
            await (await asyncio.wait_for(waiting, 15)).settle(10)
    finally:
        for quota in (*veterans, newcomer):
            if quota is not None:
                quota.close()
        admin.delete(*keys)
        admin.close()


def test_a_redis_admission_sent_twice_holds_once(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py resends a command whose reply was lost (a timeout, a dropped connection), so the
    # admission script can run twice with one hold id: it counted the amounts twice and released
    # them once, leaving the window short of one request for as long as traffic kept it alive.
    import redis

    from pollard.adapters.pollux import _quota_redis

    monkeypatch.setattr(_quota_redis.os, "urandom", lambda n: b"\x07" * n)
    windows, admin = RedisWindows(redis_url, 60), redis.Redis.from_url(redis_url)
    scope = f"twice-{uuid.uuid4().hex}"
    keys = RedisWindows._keys(scope)
    try:
        first, _ = windows.admit(scope, 1, 10, (2, None), 30)
        again, _ = windows.admit(scope, 1, 10, (2, None), 30)  # the resent command
        assert first is not None and again == first
        assert float(admin.hget(keys[1], "=r") or 0) == 1
        assert float(admin.hget(keys[1], "=t") or 0) == 10
        windows.release(scope, first)
        assert float(admin.hget(keys[1], "=r") or 0) == 0  # nothing left behind
    finally:
        windows.close()
        admin.delete(*keys)
        admin.close()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server installed")
async def test_a_quota_rides_out_its_redis_restarting_without_persistence(tmp_path: Path) -> None:
    # A real restart of a private server that keeps nothing: the same worker goes on without a
    # restart of its own, and the window it drew from is held full instead of forgotten.
    server = PrivateRedis(tmp_path)
    server.start()
    quota = _redis_quota(server.url, 1.5)
    try:
        await (await quota.acquire(_request())).settle(10)
        server.stop()
        server.start()  # empty: nothing was persisted
        again = asyncio.ensure_future(quota.acquire(_request()))
        await asyncio.sleep(0.4)
        assert not again.done()
        await (await asyncio.wait_for(again, 15)).settle(10)
    finally:
        quota.close()
        server.stop()


async def test_an_idle_redis_window_that_expires_is_not_taken_for_lost(redis_url: str) -> None:
    import redis

    quota = _redis_quota(redis_url, 0.3)
    admin = redis.Redis.from_url(redis_url)
    keys = RedisWindows._keys(quota._window_keys(_request())[2])
    try:
        await (await quota.acquire(_request())).settle(10)
        for _ in range(100):  # every key ends with the window's last hold
            if not admin.exists(*keys):
                break
            await asyncio.sleep(0.1)
        assert not admin.exists(*keys)
        permit = await asyncio.wait_for(quota.acquire(_request()), 1.0)  # not held full
        await permit.settle(10)
        assert not any(m.startswith(b"rebuild:") for m in admin.zrange(keys[0], 0, -1))
    finally:
        quota.close()
        admin.delete(*keys)
        admin.close()


@pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb) installed")
async def test_a_quota_rides_out_its_postgresql_server_crashing_and_restarting() -> None:
    with PrivateCluster(binaries()) as cluster:  # type: ignore[arg-type]
        cluster.start()
        with SharedQuota(f"{cluster.dsn}#crash", requests_per_minute=100, window_s=30) as quota:
            await (await quota.acquire(_request())).settle(10)
            cluster.stop("immediate")
            for _ in range(2):  # the lost connection, then a refused one
                with pytest.raises(APIError) as caught:
                    await quota.acquire(_request())
                assert caught.value.error_category == "quota_unavailable"
                assert "'crash'" in str(caught.value) and "PostgreSQL" in str(caught.value)
            cluster.start()
            permit = await quota.acquire(_request())
            assert type(permit).__name__ == "_SharedPermit"
            await permit.settle(10)


@pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb) installed")
async def test_holds_taken_just_before_a_postgresql_crash_still_count_after_it() -> None:
    # A hold was acknowledged before its WAL flush: an immediate shutdown right after a burst
    # of 20 admissions lost 10 of them, so the restarted window admitted 20 more calls where
    # the quota of 30 had room for 10 (a third of the quota over, across the fleet).
    with PrivateCluster(binaries()) as cluster:  # type: ignore[arg-type]
        cluster.start()
        with SharedQuota(f"{cluster.dsn}#burst", requests_per_minute=30, window_s=60) as quota:
            permits = [await quota.acquire(_request()) for _ in range(20)]  # calls in flight
            cluster.stop("immediate")
            cluster.start()
            admitted = 0
            while True:
                try:
                    await quota.acquire(_request(time.monotonic() + 0.3))
                except RateLimitError:
                    break  # the window is full
                except APIError as error:
                    assert error.error_category == "quota_unavailable"  # the lost connection
                    continue
                admitted += 1
                assert admitted <= 10
            assert admitted == 10
            for permit in permits:
                await permit.settle(10)


@pytest.mark.skipif(binaries() is None, reason="no PostgreSQL binaries (initdb) installed")
def test_a_refused_window_reservation_costs_no_disk_flush() -> None:
    # The flush of a durable window hold is sent with the reservation, before its answer is
    # known: it wrote WAL and waited for the disk on every refusal too, so each poll of a
    # waiting quota cost a flush (300 refusals: 608 WAL records, 302 syncs). It now writes
    # only for a hold that was written. A private cluster: no other test's WAL in its counters.
    import psycopg

    from pollard.stores.postgres import PostgresStore

    with PrivateCluster(binaries()) as cluster:  # type: ignore[arg-type]
        cluster.start()
        count = "SELECT wal_records FROM pg_stat_wal"
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            window = [WindowClaim("w", "requests", Decimal(1), 60.0, Decimal(1))]
            with PostgresStore(cluster.dsn, durable=True) as store:  # the schema, the hold
                assert store.reserve((), window, lease_seconds=30).reservation_id is not None
            time.sleep(0.5)  # a backend reports its WAL counters as it exits
            (before,) = admin.execute(count).fetchone() or (0,)
            with PostgresStore(cluster.dsn, durable=True) as store:
                for _ in range(100):
                    refused = store.reserve((), window, lease_seconds=30)
                    assert refused.reservation_id is None
            time.sleep(0.5)
            (after,) = admin.execute(count).fetchone() or (0,)
        assert after - before < 50  # two per refusal before (the message and its commit)
