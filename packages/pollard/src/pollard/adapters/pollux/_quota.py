"""`SharedQuota`: one provider quota for many workers and hosts, kept in a pollard store.

Every worker that opens a `SharedQuota` on the same store (a PostgreSQL ``store_id`` or a Redis
server for many hosts, a SQLite file for one machine) with the same ``name`` draws on one window.
It is built on the store's reservations, the same leased holds that make a pollard budget exact
across workers (a Redis server keeps the same holds in one Lua script per decision):

* An attempt is **admitted** by ``store.reserve`` with two window claims (one request, and its
  worst case in tokens), judged atomically against everything held inside the window by every
  worker. The hold's lease is the window's length: it counts for exactly one window and then
  expires on its own, so a worker that crashes leaks nothing.
* A refused attempt **waits in line**: it takes a ticket in a first-in, first-out queue kept in
  the same store, and is admitted when it heads the queue and the window has room, so the
  attempt that has waited longest, on whichever host, is served next. The head asks the window
  again about once per request's spacing; the others renew their ticket and read their place,
  less often the further back they are, and are admitted only when the window also has room
  for everyone ahead of them. While anyone waits, a first attempt does not overtake the line:
  it queues at the back (or fits behind everyone waiting). A ticket is a lease renewed while its
  attempt waits: it is released on every way out (admitted, past the deadline, cancelled, an
  error), and the ticket of a waiter that died (its process killed, its connection lost) ends
  with its lease, so the ones behind it move up. An attempt that finds room and nobody waiting
  costs one round trip, as before: the queue is touched only after a refusal.
* When the answer arrives the hold is **settled**: replaced by one holding the tokens the
  provider reported, for what is left of the window (written before the worst case is dropped,
  so the window never counts less than it used).
* A **429** fills the window for the pause the provider asked for, so every worker slows down,
  not only the one that was told.

When the store cannot be reached the quota fails closed (``on_unreachable="fail"``, the default:
the attempt fails with a retryable `pollux.APIError` naming the store), or with
``on_unreachable="local"`` falls back to a bounded local share: the limits divided by the
declared ``workers``, in this process only, until the store answers again. It never silently
becomes N times the limit, and the hand-overs do not double it either: the local share starts
full for one window (what the fleet drew from the shared window before the outage still
counts), a waiter on the local share asks the store again every few seconds, and a worker back
on the shared window first writes there what it drew locally within the last window.

Only an outage counts as unreachable (``_quota_errors.store_unreachable``: a lost or
refused connection, a SQLite file that cannot be opened or is locked, a network error). Any
other failure of the store (a bug, a damaged ledger, an unknown store format, a read-only
store) is a fault that waiting does not fix: whatever ``on_unreachable`` says, the attempt is not
sent and fails with a non-retryable `pollux.APIError` (``error_category="quota_store_error"``)
naming the error, and the local share is never engaged for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import random
import re
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from pollard import PollardError, WindowClaim
from pollard.stores import StoreSpec, parse_store_spec
from pollux import APIError, ConfigurationError, LocalQuota, RateLimitError
from pollux.quota import (
    DEFAULT_OUTPUT_TOKENS,
    QuotaPermit,
    QuotaRequest,
    check_limit,
    check_output_tokens,
    check_window,
    fit_to_limit,
    past_deadline,
)

from ._quota_errors import describe, store_unreachable
from ._quota_redis import RedisWindows, is_redis_url

if TYPE_CHECKING:
    from pollard import Store

__all__ = ["SharedQuota"]

_LOG = logging.getLogger("pollard.adapters.pollux.quota")

# The limit a settlement or a pause is held under: it must always be admitted (it records what
# was already used, it asks for nothing).
_UNLIMITED = Decimal(10) ** 15
# How long a local share lasts before the shared store is tried again (at most half a window).
_RECHECK_S = 5.0
# What a waiting ticket holds on its queue's gate window. A first attempt claims one unit
# under a limit of exactly this much, so it fits only while no ticket is held: nobody waits.
_GATE = Decimal(10) ** 12
# The limit a ticket's own hold is judged under (it must always be admitted).
_GATE_ROOM = Decimal(10) ** 24

Scope = Literal["model", "provider", "key"]
_STORE_HINT = (
    "Pass a SQLite path, a postgresql://...#store_id DSN, a redis:// URL or a pollard Store."
)


def _spec(store: Store | str | os.PathLike[str]) -> StoreSpec | None:
    """The parsed store argument (None for a `Store` object or a Redis URL).

    Raises:
        ConfigurationError: An object that is not a store, or a text that names none (a URL of
            another scheme).
    """
    if not isinstance(store, (str, os.PathLike)):
        for method in ("reserve", "release"):
            if not callable(getattr(store, method, None)):
                raise ConfigurationError(
                    f"SharedQuota needs a pollard Store, got {type(store).__name__}",
                    hint=_STORE_HINT,
                )
        return None
    if isinstance(store, str) and is_redis_url(store):
        return None
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", store) if isinstance(store, str) else None
    if scheme is not None and scheme.group(1).lower() not in ("postgresql", "postgres"):
        # Said here: the store parser's own advice is the runtime's, which takes no Redis URL.
        raise ConfigurationError(
            f"SharedQuota store: unsupported URL scheme {scheme.group(1)!r}", hint=_STORE_HINT
        )
    try:
        # The one parser of ``Runtime(...)`` and the command line: a ``postgresql://`` URL or a
        # libpq keyword DSN is PostgreSQL (never a SQLite file named after the DSN).
        spec = parse_store_spec(store)
    except ValueError as exc:
        raise ConfigurationError(f"SharedQuota store: {exc}", hint=_STORE_HINT) from None
    path = spec.path
    if path is not None and path.exists() and not path.is_file():
        # A folder, device or FIFO never becomes a SQLite file: a setting to fix now, not an
        # outage to wait out at the first call (and a FIFO must never be opened).
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise ConfigurationError(
            f"SharedQuota store {spec.label!r} is {kind}",
            hint="Pass the path of a SQLite file (created when missing) in an existing folder.",
        )
    return spec


def _open(store: Store | str | os.PathLike[str], spec: StoreSpec | None) -> tuple[Store, bool]:
    if spec is None:
        return cast("Store", store), False
    if spec.kind == "sqlite":
        from pollard import SQLiteStore

        # Not `open_spec`: a file that cannot be opened stays sqlite3's error, which the quota
        # reads as an outage (a lost mount), where `open_spec` would make it a fault.
        return SQLiteStore(cast(Path, spec.path)), True
    try:
        from pollard import PostgresStore

        return PostgresStore(spec.dsn(), store_id=spec.store_id), True
    except ImportError as exc:  # a setting to fix, as for Redis: neither outage nor fault
        raise ConfigurationError(
            f"a PostgreSQL quota store needs psycopg ({exc})",
            hint='pip install "pollard[pg]"',
        ) from None


class _Queues(Protocol):
    """The queue methods of pollard's stores (`SQLiteStore`, `PostgresStore`, `MemoryStore`)."""

    def queue_join(self, queue: str, reservation_id: str) -> int | None: ...

    def queue_position(
        self, queue: str, reservation_id: str, lease_seconds: float
    ) -> int | None: ...


class _Ticket:
    """A waiting attempt's place in its window's queue (touched only on the quota's thread)."""

    __slots__ = ("ahead", "id", "renewed")

    def __init__(self, ticket_id: str, ahead: int, renewed: float) -> None:
        self.id = ticket_id
        self.ahead = ahead  # how many waiters were ahead at the last look
        self.renewed = renewed  # time.monotonic() of the last renewal of its lease


class _SharedPermit:
    __slots__ = ("_quota", "_request", "_reservation", "tokens_held", "waited_s")

    def __init__(
        self, quota: SharedQuota, request: QuotaRequest, reservation: str | None, waited_s: float
    ) -> None:
        self._quota = quota
        self._request = request
        self._reservation = reservation
        self.tokens_held = request.tokens  # after `fit_to_limit`: what the window counts
        self.waited_s = waited_s

    async def settle(self, tokens: int | None) -> None:
        reservation, self._reservation = self._reservation, None
        if tokens is None or reservation is None:
            return  # the worst case stays held until its lease ends
        try:
            await self._quota._call(self._quota._settle, self._request, reservation, tokens)
        except Exception as exc:
            # Best effort, whatever failed: the answer is in (raising would throw it away), and
            # the worst case stays held until its lease ends (safe, only conservative). A fault
            # is logged as a warning, and the next admission fails on it.
            self._quota._left_to_lease("the settlement kept the worst case", exc)


class _LocalUse:
    """One attempt the local share admitted: its request, and when it answered (None: not yet)."""

    __slots__ = ("answered", "request")

    def __init__(self, request: QuotaRequest) -> None:
        self.request = request
        self.answered: float | None = None


class _LocalSharePermit:
    __slots__ = ("_inner", "_use", "waited_s")

    def __init__(self, inner: QuotaPermit, use: _LocalUse) -> None:
        self._inner = inner
        self._use = use
        self.waited_s = inner.waited_s

    async def settle(self, tokens: int | None) -> None:
        # Like a settled hold, it counts for one window from its answer.
        self._use.answered = time.monotonic()
        await self._inner.settle(tokens)


class SharedQuota:
    """A provider quota shared by every worker on one pollard store.

    Pass it as ``pollux.Config(quota=...)``: every attempt of every call made with that config
    (``run``, ``run_many``, ``stream``, the bridge's governed calls, the ``pollux`` command)
    waits for room in the shared window, then dispatches. Attempts that find the window full
    wait in line, first come, first served across every worker and host: the one that has
    waited longest goes next, a newcomer does not overtake the line, and a waiter that dies
    leaves it when its ticket's lease (``queue_lease_s``) ends.

    Args:
        store: The store the window lives in: a ``postgresql://...#store_id`` DSN or a libpq
            keyword DSN (``host=db dbname=quota#store_id``) for many hosts, a
            ``redis://host:6379/0`` URL (many hosts, where a Redis server or cluster is already
            run; needs ``pollard[redis]``), a SQLite path (one machine), or a `pollard.Store`. A
            store opened from a string is closed by :meth:`close`.
        requests_per_minute: The most attempts dispatched inside any window, summed over every
            worker (None: no limit).
        tokens_per_minute: The most tokens inside any window (input estimate plus output cap
            while in flight, the reported tokens once answered; None: no limit).
        name: The quota's name: workers with the same store and name share one window.
        per: What one window covers: ``"model"`` (default, one window per provider and model),
            ``"provider"`` (all models of a provider) or ``"key"`` (per API key, by a digest of
            the key; the key itself never reaches the store).
        window_s: The window length in seconds (60 for per-minute limits).
        default_output_tokens: The output cap held for a call without ``max_tokens``.
        on_unreachable: ``"fail"`` (default): an attempt that cannot reach the store fails
            (retryable); ``"local"``: fall back to this process's share, the limits divided by
            ``workers``, until the store answers again. Only an outage counts (a lost or
            refused connection, a SQLite file that cannot be opened or is locked); any other
            store failure (a bug, a damaged ledger, a read-only store) fails the attempt
            either way, not retryable (``error_category="quota_store_error"``).
        workers: How many workers share the quota (required with ``on_unreachable="local"``).
        poll_s: The longest pause of the queue's pacing: the head of the queue asks the window
            four times per pause (one request's spacing, at most ``poll_s``), a waiter that
            could be admitted with everyone ahead of it as often divided by its place, and the
            rest read their place every pause times their place (see the guide).
        queue_lease_s: The lease of a waiting attempt's ticket, renewed while it waits: a
            waiter that dies stops the queue for at most this long. A store given as an
            object without queues (``queue_join`` and ``queue_position``) falls back to
            jittered polling without arrival order.

    Raises:
        pollux.ConfigurationError: A bad limit, scope, window or fallback.

    Example:
        >>> import asyncio, tempfile, os
        >>> from pollux import Config, run_many
        >>> path = os.path.join(tempfile.mkdtemp(), "quota.db")
        >>> quota = SharedQuota(path, requests_per_minute=600, tokens_per_minute=100_000)
        >>> config = Config(provider="openai", model="gpt-5-nano", use_mock=True, quota=quota)
        >>> len(asyncio.run(run_many(["A?", "B?"], config=config)).answers)
        2
        >>> quota.close()
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        name: str = "default",
        per: Scope = "model",
        window_s: float = 60.0,
        default_output_tokens: int = DEFAULT_OUTPUT_TOKENS,
        on_unreachable: Literal["fail", "local"] = "fail",
        workers: int | None = None,
        poll_s: float = 0.25,
        queue_lease_s: float = 5.0,
    ) -> None:
        self.requests_per_minute = check_limit(
            "requests_per_minute", requests_per_minute, owner="SharedQuota "
        )
        self.tokens_per_minute = check_limit(
            "tokens_per_minute", tokens_per_minute, owner="SharedQuota "
        )
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ConfigurationError(
                "SharedQuota needs requests_per_minute, tokens_per_minute or both",
                hint="Pass the provider's limits, e.g. requests_per_minute=500.",
            )
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                "SharedQuota name must be a non-empty string", hint="Pass name='openai-prod'."
            )
        if per not in ("model", "provider", "key"):
            raise ConfigurationError(
                f"SharedQuota per must be 'model', 'provider' or 'key', got {per!r}",
                hint="per='model' keeps one window per provider and model.",
            )
        if on_unreachable not in ("fail", "local"):
            raise ConfigurationError(
                f"on_unreachable must be 'fail' or 'local', got {on_unreachable!r}",
                hint="'fail' refuses calls while the store is down; 'local' uses this "
                "worker's share of the limits.",
            )
        self.workers = check_limit("workers", workers, owner="SharedQuota ")
        if on_unreachable == "local" and self.workers is None:
            raise ConfigurationError(
                "on_unreachable='local' needs workers=N (the local share is the limit / N)",
                hint="Declare how many workers share the quota, e.g. workers=8.",
            )
        self.name = name
        self.per: Scope = per
        self.window_s = check_window(window_s)
        self.default_output_tokens = check_output_tokens(default_output_tokens)
        self.on_unreachable = on_unreachable
        self.poll_s = check_window(poll_s, "poll_s")
        self.queue_lease_s = check_window(queue_lease_s, "queue_lease_s")
        self._store_arg = store
        self._spec = _spec(store)
        self._store: Store | None = None
        self._owned = False
        self._redis = (
            RedisWindows(store, self.window_s)
            if isinstance(store, str) and is_redis_url(store)
            else None
        )
        # One thread owns the store's connection; store calls never block the event loop.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="pollard-quota"
        )
        self._closed = False
        self._local: LocalQuota | None = None
        self._local_until = 0.0
        # Whether this worker is on its local share, and what that share admitted (when, and
        # the request), to be written to the shared window once the store answers again.
        self._on_local = False
        self._local_admitted: list[_LocalUse] = []
        self._keys: dict[tuple[str, str | None, str | None], tuple[str, str, str, str]] = {}
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        # Waiters queue in the store unless it is an object without queues (then one waiter
        # of this process polls at a time, jittered).
        self._fifo = (
            self._redis is not None
            or isinstance(store, (str, os.PathLike))
            or all(
                callable(getattr(store, method, None))
                for method in ("queue_join", "queue_position")
            )
        )

    # -- the store side (runs on the quota's thread) ------------------------------------------

    def _open_store(self) -> Store:
        if self._store is None:
            self._store, self._owned = _open(self._store_arg, self._spec)
        return self._store

    def _window_keys(self, request: QuotaRequest) -> tuple[str, str, str, str]:
        """The window's request and token keys, its scope digest (for Redis) and queue key."""
        scope = (
            request.key_id
            if self.per == "key"
            else (request.model if self.per == "model" else None)
        )
        cache_key = (request.provider, scope, self.per)
        keys = self._keys.get(cache_key)
        if keys is None:
            base = f"pollard/v1:quota\n{self.name}\n{request.provider}\n{self.per}\n{scope or ''}"
            keys = (
                hashlib.sha256((base + "\nrequests").encode()).hexdigest(),
                hashlib.sha256((base + "\ntokens").encode()).hexdigest(),
                hashlib.sha256(base.encode()).hexdigest(),
                hashlib.sha256((base + "\nqueue").encode()).hexdigest(),
            )
            self._keys[cache_key] = keys
        return keys

    def _claims(
        self, request: QuotaRequest, requests: int, tokens: int, limited: bool, ahead: int = 0
    ) -> list[WindowClaim] | None:
        """The window claims of an attempt; None when they cannot fit.

        A waiter with ``ahead`` waiters before it is judged against the limits less their
        share (one request and as many tokens as this attempt, each), so it is admitted only
        when the window also has room for everyone ahead of it: none of them waits longer.
        """
        request_key, token_key, _scope, _queue = self._window_keys(request)
        claims: list[WindowClaim] = []
        if self.requests_per_minute is not None:
            limit = Decimal(self.requests_per_minute - ahead) if limited else _UNLIMITED
            if limit < 1:
                return None
            claims.append(
                WindowClaim(request_key, "quota.requests", limit, self.window_s, Decimal(requests))
            )
        if self.tokens_per_minute is not None:
            limit = (
                Decimal(self.tokens_per_minute - ahead * request.tokens) if limited else _UNLIMITED
            )
            if limit < tokens:
                return None
            claims.append(
                WindowClaim(
                    token_key,
                    "quota.tokens",
                    limit,
                    self.window_s,
                    Decimal(tokens),
                    approximate=True,
                )
            )
        return claims

    def _attempt(
        self, request: QuotaRequest, slot: list[_Ticket | None]
    ) -> tuple[bool, str | None]:
        """Ask once: admitted and the hold's id, or refused (``slot`` holds the ticket, if any).

        Without a ticket this is a first attempt: admitted when the window has room and
        nobody waits, else queued. With one, its holder renews it (reading its place) and is
        admitted when the window has room for it and everyone ahead of it.
        """
        if self._redis is not None:
            return self._attempt_redis(request, slot)
        store = self._open_store()
        # In flight for up to one window, then one more window once answered (see _settle); a
        # worker that crashes mid-call leaks its hold for at most two windows.
        lease = 2 * self.window_s
        claims = self._claims(request, 1, request.tokens, True)
        assert claims is not None  # too_large refused what can never fit
        if not self._fifo:
            admission = store.reserve((), claims, lease_seconds=lease)
            return admission.ok, admission.reservation_id
        queue = self._window_keys(request)[3]
        ticket = slot[0]
        now = time.monotonic()
        if ticket is not None and (
            ticket.ahead > 0 or now - ticket.renewed >= self.queue_lease_s / 3
        ):
            ahead = cast("_Queues", store).queue_position(queue, ticket.id, self.queue_lease_s)
            if ahead is None:  # its lease ended: a new ticket, at the back
                slot[0] = ticket = None
            else:
                ticket.ahead, ticket.renewed = int(ahead), now
        if ticket is None:
            gate = WindowClaim(queue, "quota.queue", _GATE, self.window_s, Decimal(1))
            admission = store.reserve((), [*claims, gate], lease_seconds=lease)
            if admission.ok:
                return True, admission.reservation_id
            slot[0] = ticket = self._join(store, queue, now)
            short = admission.shortfall
            if ticket is None or short is None or short.meter != "quota.queue":
                return False, None  # the window is full: no use asking again at once
            # Refused only because others wait: it may fit behind them.
        mine = self._claims(request, 1, request.tokens, True, ticket.ahead)
        if mine is None:
            return False, None
        admission = store.reserve((), mine, lease_seconds=lease)
        if not admission.ok:
            return False, None
        slot[0] = None
        try:  # after the hold is written: the gate never opens early
            store.release(ticket.id)
        except Exception as exc:
            # Best effort: admitted all the same, and the ticket ends with its lease (the queue
            # behind it waits at most that long). A fault is logged as a warning.
            self._left_to_lease("the ticket was left to its lease", exc)
        return True, admission.reservation_id

    def _join(self, store: Store, queue: str, now: float) -> _Ticket | None:
        """Take a ticket at the back of ``queue``: a leased hold on its gate, then its place."""
        hold = WindowClaim(queue, "quota.queue", _GATE_ROOM, self.window_s, _GATE)
        ticket = store.reserve((), [hold], lease_seconds=self.queue_lease_s).reservation_id
        if ticket is None:
            return None
        ahead = cast("_Queues", store).queue_join(queue, ticket)
        if ahead is None:  # its lease ended already: asks again without a place
            store.release(ticket)
            return None
        return _Ticket(ticket, int(ahead), now)

    def _attempt_redis(
        self, request: QuotaRequest, slot: list[_Ticket | None]
    ) -> tuple[bool, str | None]:
        # One script per attempt: it reads the ticket's place, renews it, and admits when the
        # window has room for it and everyone ahead (a first attempt is queued when refused).
        assert self._redis is not None
        ticket = slot[0]
        fresh = ticket is None
        ticket_id = os.urandom(12).hex() if ticket is None else ticket.id
        held, ahead = self._redis.admit(
            self._window_keys(request)[2],
            1,
            request.tokens,
            (self.requests_per_minute, self.tokens_per_minute),
            2 * self.window_s,
            ticket=ticket_id,
            waiting=not fresh,
            ticket_lease_s=self.queue_lease_s,
        )
        if held is not None or ahead < 0:
            slot[0] = None  # admitted (the script took it off the queue), or its lease ended
        elif ticket is None:
            slot[0] = _Ticket(ticket_id, ahead, time.monotonic())
        else:
            ticket.ahead, ticket.renewed = ahead, time.monotonic()
        return held is not None, held

    def _leave(self, request: QuotaRequest, slot: list[_Ticket | None]) -> None:
        """Release the ticket a waiter still holds (runs after its last attempt, in order)."""
        ticket, slot[0] = slot[0], None
        if ticket is None:
            return
        try:
            if self._redis is not None:
                self._redis.release(self._window_keys(request)[2], ticket.id)
            else:
                self._open_store().release(ticket.id)
        except Exception as exc:
            # Best effort: it runs after the attempt's way out, with nobody to tell (its future
            # is not awaited), and the ticket ends with its lease. A fault is logged as a warning.
            self._left_to_lease("the ticket was left to its lease", exc)

    def _left_to_lease(self, what: str, exc: Exception) -> None:
        """Log a best-effort store write that failed, its hold left to end with its lease."""
        if store_unreachable(exc):
            _LOG.debug("quota %r: %s: %s", self.name, what, type(exc).__name__)
        else:
            _LOG.warning(
                "quota %r: %s, after a store error that is not an outage: %s",
                self.name,
                what,
                describe(exc),
            )

    def _settle(self, request: QuotaRequest, reservation: str, tokens: int) -> None:
        if self._redis is not None:
            scope = self._window_keys(request)[2]
            self._redis.hold(scope, 1, max(0, tokens), self.window_s)
            self._redis.release(scope, reservation)
            return
        store = self._open_store()
        # What was used counts for one window from the answer (the provider saw the request
        # before that, so its window forgets it no later). Written before the worst case is
        # dropped: never a moment counting less.
        store.reserve(
            (), self._claims(request, 1, max(0, tokens), False) or [], lease_seconds=self.window_s
        )
        store.release(reservation)

    def _fill(self, request: QuotaRequest, seconds: float) -> None:
        if self._redis is not None:
            self._redis.hold(
                self._window_keys(request)[2],
                self.requests_per_minute or 0,
                self.tokens_per_minute or 0,
                seconds,
            )
            return
        self._open_store().reserve(
            (),
            self._claims(request, self.requests_per_minute or 0, self.tokens_per_minute or 0, False)
            or [],
            lease_seconds=seconds,
        )

    def _record_local(self, admitted: list[_LocalUse]) -> bool:
        """Write what the local share admitted within the last window to the shared window.

        Held (never refused, like a settlement) until one window after the latest answer among
        them (or from now, for one still in flight), so the workers drawing on the store count
        them as the provider does. True when anything was still inside the window.
        """
        now = time.monotonic()
        wrote = False
        groups: dict[str, tuple[QuotaRequest, int, int, float]] = {}
        for use in admitted:
            request, at = use.request, now if use.answered is None else use.answered
            scope = self._window_keys(request)[2]
            _, count, tokens, newest = groups.get(scope, (request, 0, 0, at))
            groups[scope] = (request, count + 1, tokens + request.tokens, max(newest, at))
        for request, count, tokens, newest in groups.values():
            seconds = newest + self.window_s - now
            if seconds <= 0:
                continue
            wrote = True
            if self._redis is not None:
                self._redis.hold(self._window_keys(request)[2], count, tokens, seconds)
            else:
                self._open_store().reserve(
                    (), self._claims(request, count, tokens, False) or [], lease_seconds=seconds
                )
        return wrote

    async def _call(self, fn: Any, *args: Any) -> Any:
        if self._closed:
            # A mistake in the caller, neither an outage nor a fault of the store.
            raise ConfigurationError(
                f"SharedQuota {self.name!r} is closed",
                hint="Close the quota after the calls that use it, or open a new SharedQuota.",
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    # -- the pollux side --------------------------------------------------------------------

    def _local_share(self) -> LocalQuota:
        if self._local is None:
            workers = self.workers or 1
            self._local = LocalQuota(
                None
                if self.requests_per_minute is None
                else max(1, self.requests_per_minute // workers),
                None
                if self.tokens_per_minute is None
                else max(1, self.tokens_per_minute // workers),
                window_s=self.window_s,
                default_output_tokens=self.default_output_tokens,
            )
        return self._local

    @property
    def _recheck_s(self) -> float:
        """How long a worker on its local share waits before it asks the store again."""
        return min(_RECHECK_S, self.window_s / 2)

    def _unreachable(self, exc: BaseException) -> APIError | None:
        """The error to raise when the store is unreachable, or None to use the local share."""
        reason = exc.message if isinstance(exc, PollardError) else describe(exc)
        if self.on_unreachable == "local":
            if time.monotonic() >= self._local_until:
                _LOG.warning(
                    "quota %r: the shared store is unreachable (%s); using this worker's share "
                    "(1/%d of the limits, after one window) and asking the store again in %g s",
                    self.name,
                    reason,
                    self.workers or 1,
                    self._recheck_s,
                )
            self._local_until = time.monotonic() + self._recheck_s
            return None
        return APIError(
            f"quota {self.name!r}: the shared quota store cannot be reached ({reason}), so the "
            "call was not sent (on_unreachable='fail')",
            hint=f"Check the store ({self._outage_check()}), or pass on_unreachable='local' "
            "with workers=N to run on each worker's share while it is down.",
            retryable=True,
            error_category="quota_unavailable",
        )

    def _outage_check(self) -> str:
        """What to check when the quota's store cannot be reached, by the kind of store."""
        if self._redis is not None:
            return "is the Redis server up?"
        if self._spec is None:
            return "is the store's server up?"
        if self._spec.kind == "sqlite":
            return "is the SQLite file's folder there, and the file not locked?"
        return "is the PostgreSQL server up?"

    def _store_error(self, exc: BaseException) -> APIError:
        """The error for a store failure that is not an outage (the local share never applies).

        Not retryable: a bug, a damaged ledger, an unknown store format or a read-only store
        fails the same way on the next attempt.
        """
        if isinstance(exc, PollardError) and exc.hint:
            hint = exc.hint
        elif type(exc).__module__.startswith("sqlite3"):
            hint = (
                "Check the SQLite file the quota uses (writable, a pollard store, undamaged: "
                "`pollard verify FILE`), or give the quota a new file."
            )
        elif type(exc).__module__.startswith("redis"):
            hint = (
                "Check the Redis server the quota uses (a read-only replica, memory full, "
                "the user's ACL)."
            )
        else:
            hint = (
                "Waiting will not fix this: it is a bug or a fault in the store, not an "
                "outage. See the error's cause (its traceback), and report it if it is pollard's."
            )
        return APIError(
            f"quota {self.name!r}: the shared quota store failed ({describe(exc)}), so the call "
            f"was not sent; this is not an outage, so on_unreachable={self.on_unreachable!r} "
            "does not apply",
            hint=hint,
            retryable=False,
            error_category="quota_store_error",
        )

    async def acquire(self, request: QuotaRequest) -> QuotaPermit:
        """Wait in line until the shared window has room, then hold the attempt.

        Attempts that find the window full are admitted in arrival order across every worker
        and host sharing the quota (see the module docs); the wait is bounded by the call's
        deadline, and the attempt's place in line is given up on every way out. See
        `pollux.CallQuota`.

        Raises:
            pollux.RateLimitError: The window had no room before the call's deadline.
            pollux.APIError: The store is unreachable and ``on_unreachable="fail"``
                (``error_category="quota_unavailable"``, retryable), or it failed in a way that
                is not an outage (``"quota_store_error"``, not retryable, whatever
                ``on_unreachable`` says).
        """
        # A worst case that only media bytes put above the limit holds the whole window.
        request = fit_to_limit(request, self.tokens_per_minute, self.window_s)
        start = time.monotonic()
        if self._fifo:
            return await self._admit(request, start)
        # Without queues in the store, one waiter of this process asks at a time (the others
        # queue behind it in arrival order), so a full window costs one poll per worker.
        async with self._admission_lock():
            return await self._admit(request, start)

    def _admission_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    async def _admit(self, request: QuotaRequest, start: float) -> QuotaPermit:
        polled = time.monotonic() - start > 0.001  # queued behind another waiter
        slot: list[_Ticket | None] = [None]  # the ticket, read and written on the quota's thread
        try:
            while True:
                if time.monotonic() < self._local_until:
                    permit = await self._local_admit(request)
                    if permit is not None:
                        return permit
                    continue  # time to ask the store again
                try:
                    if self._local_admitted:
                        wrote = await self._call(self._record_local, self._local_admitted)
                        self._local_admitted = []
                        if wrote:
                            # The other workers on their local share ask the store again within
                            # one recheck: let them write theirs before drawing on the window.
                            await asyncio.sleep(self._recheck_s)
                    admitted, reservation = await self._call(self._attempt, request, slot)
                except (APIError, ConfigurationError):
                    raise
                except Exception as exc:
                    if not store_unreachable(exc):
                        # A fault, not an outage: the local share would only hide it.
                        raise self._store_error(exc) from exc
                    error = self._unreachable(exc)
                    if error is not None:
                        raise error from None
                    if not self._on_local:
                        # What every worker drew from the shared window before the outage
                        # still counts for one window: the local share starts full.
                        self._on_local = True
                        await self._local_share().pause(request, self.window_s)
                    continue
                if self._on_local:
                    self._on_local = False
                    _LOG.warning("quota %r: the shared store answers again", self.name)
                now = time.monotonic()
                if admitted:
                    return _SharedPermit(self, request, reservation, now - start if polled else 0.0)
                pause = self._pause_s(slot[0], request)
                if request.deadline is not None and now + pause > request.deadline:
                    raise past_deadline(None)
                polled = True
                await asyncio.sleep(pause)
        finally:
            # Queued on the quota's thread behind any attempt still running there, so it sees
            # the ticket that attempt took; not awaited, so a cancelled waiter still leaves.
            with contextlib.suppress(RuntimeError):  # the quota was closed: the lease ends it
                self._executor.submit(self._leave, request, slot)

    async def _local_admit(self, request: QuotaRequest) -> QuotaPermit | None:
        """Admit on the local share, or None once it is time to ask the store again."""
        until = self._local_until
        deadline = until if request.deadline is None else min(request.deadline, until)
        try:
            permit = await self._local_share().acquire(
                dataclasses.replace(request, deadline=deadline)
            )
        except RateLimitError:
            if request.deadline is not None and request.deadline <= until:
                raise
            # No local room before the store is asked again: wait for that moment.
            await asyncio.sleep(max(0.0, until - time.monotonic()))
            return None
        since = time.monotonic() - self.window_s
        self._local_admitted = [
            use for use in self._local_admitted if use.answered is None or use.answered > since
        ]
        use = _LocalUse(request)
        self._local_admitted.append(use)
        return _LocalSharePermit(permit, use)

    def _pause_s(self, ticket: _Ticket | None, request: QuotaRequest) -> float:
        # About one request's spacing, so a full window is checked about as often as it frees
        # room.
        spacing = self.window_s / max(self.requests_per_minute or 1, 1)
        base = min(self.poll_s, max(0.005, spacing))
        if not self._fifo:
            # Jittered so workers that wait together do not ask together.
            return base * (0.5 + random.random())
        if ticket is None:  # no place in line (a ticket could not be taken): ask again
            return base
        # The head asks four times per request's spacing (room it misses stays unused: it is
        # the only one asking), and so, proportionally less often, do the waiters a window
        # could admit together with everyone ahead of them (a window that refills at once is
        # handed out in one go, not one waiter per pause). The rest only read their place, less
        # often the further back they are, and often enough to renew their ticket.
        ahead = ticket.ahead
        pause = base * max(ahead, 1) / 4 if ahead < self._burst(request) else base * ahead
        return min(self.queue_lease_s / 3, pause)

    def _burst(self, request: QuotaRequest) -> int:
        """How many attempts like ``request`` one window holds."""
        fits = []  # the constructor makes sure there is at least one limit
        if self.requests_per_minute is not None:
            fits.append(self.requests_per_minute)
        if self.tokens_per_minute is not None:
            fits.append(self.tokens_per_minute // max(1, request.tokens))
        return max(1, min(fits))

    async def pause(self, request: QuotaRequest, seconds: float) -> None:
        """Fill the shared window for ``seconds``: every worker waits out the provider's 429."""
        if not (math.isfinite(seconds) and seconds > 0):
            return
        if time.monotonic() < self._local_until:
            await self._local_share().pause(request, seconds)
            return
        try:
            await self._call(self._fill, request, seconds)
        except (APIError, ConfigurationError):
            raise
        except Exception as exc:
            if not store_unreachable(exc):
                raise self._store_error(exc) from exc
            # The store is down: the local share (used while it is) waits out the 429 too.
            await self._local_share().pause(request, seconds)

    def close(self) -> None:
        """Close the store if this quota opened it, and stop its thread (idempotent)."""

        def close_store() -> None:
            if self._store is not None and self._owned:
                self._store.close()
            self._store = None
            if self._redis is not None:
                self._redis.close()

        self._closed = True
        try:
            closing = self._executor.submit(close_store)
        except RuntimeError:  # already shut down: closed before
            return
        try:
            closing.result()  # a store that fails to close says so
        finally:
            self._executor.shutdown(wait=True)

    def __enter__(self) -> SharedQuota:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"SharedQuota(name={self.name!r}, requests_per_minute={self.requests_per_minute}, "
            f"tokens_per_minute={self.tokens_per_minute}, per={self.per!r}, "
            f"window_s={self.window_s:g})"
        )
