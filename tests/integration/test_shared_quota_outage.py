"""`SharedQuota` when its store goes away and comes back: clear errors, bounded hand-overs.

The hand-over tests stand a store that can be switched off for a PostgreSQL server that stops;
the PostgreSQL tests cut this test's own connections on the shared server, or stop a private
cluster of their own (skipped where the PostgreSQL binaries are not installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest

from pollard import MemoryStore, PollardError, WindowClaim
from pollard.adapters.pollux import SharedQuota
from pollard.adapters.pollux._quota_redis import RedisWindows
from pollux import APIError, RateLimitError
from pollux.quota import QuotaRequest
from stress._pgcluster import PrivateCluster, binaries
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
