"""The Redis backend of `SharedQuota`: the same leased holds, in one Lua script per decision.

A window is two keys that share one hash tag, so Redis Cluster keeps them in one slot and a
script may touch both: a sorted set of hold ids scored by their expiry (milliseconds on the Redis
server's clock, the one clock every worker agrees on) and a hash of each hold's amounts plus the
window's running totals. Every decision (admit against the limits, hold unconditionally, release)
first drops the expired holds, so a crashed worker's holds end with their lease, exactly as they
do in a pollard store.

A sixth key, the window's epoch, tells a lost window from an idle one. It is created with the
window and expires no sooner than the window's last hold (its expiry only ever moves later), and
each worker remembers the epoch and that expiry. A worker that asks while its memory says the
window must still exist, and finds no epoch, knows the window was lost (a Redis restarted without
persistence, a flush, an eviction): what the fleet drew in the last window is forgotten, so the
script holds the window full for one window, as a worker's local share starts full after an
outage, instead of admitting a second window's worth. A worker that finds another epoch than
the one it remembers knows the same: a worker that never saw the window (one started after the
restart) asked first and made a new one; the window is then held full from that moment, so the
newcomers' admissions before it are all the loss lets through.

Waiters queue in three more keys under the same tag: a sorted set of tickets scored by their
arrival number (from a counter), and one of the same tickets scored by their lease's end. A first
attempt is refused while anyone waits and is then queued at the back in the same script; only
the ticket at the head is admitted; a ticket whose lease ends (its waiter gone) drops out.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["RedisWindows", "is_redis_url"]

# KEYS: holds (zset id -> expiry ms), amounts (hash id -> "requests tokens", plus "=r", "=t"),
# queue (zset ticket -> arrival number), leases (zset ticket -> expiry ms), the arrival counter,
# the epoch (a string).
# ARGV: hold id, lease ms, requests, tokens, requests limit, tokens limit ("" = no limit),
# mode ("": a hold the queue never stops; "new": a first attempt, queued as ARGV[8] unless
# admitted; "wait": ticket ARGV[8] asks again), ticket lease ms, the epoch the caller remembers
# as still alive ("" = none), the window ms (how long a lost window is held full).
# A queued attempt with n waiters ahead is admitted only when the window also has room for
# them (n more requests, and n times its tokens): nobody ahead waits longer because of it.
# Returns {held, ahead, epoch, epoch expiry ms, now ms}: held 1 and ahead 0 when held; held 0
# and ahead n when refused, the ticket then having n waiters ahead (-1: no ticket: its lease
# ended, or mode "").
_ADMIT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local function decide()
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
  for _, id in ipairs(expired) do
    local held = redis.call('HGET', KEYS[2], id)
    if held then
      local r, t = string.match(held, '(%S+) (%S+)')
      redis.call('HINCRBYFLOAT', KEYS[2], '=r', -tonumber(r))
      redis.call('HINCRBYFLOAT', KEYS[2], '=t', -tonumber(t))
      redis.call('HDEL', KEYS[2], id)
    end
  end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms) end
  -- The same hold asked again (redis-py resends a command whose reply was lost): held once.
  if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {1, 0} end
  local mode = ARGV[7]
  local ticket = ARGV[8]
  local ahead = 0
  local queued = false
  if mode ~= '' then
    local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
    for _, id in ipairs(gone) do redis.call('ZREM', KEYS[3], id) end
    if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms) end
    if mode == 'new' then
      ahead = redis.call('ZCARD', KEYS[3])
      if ahead > 0 then
        redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), ticket)
        queued = true
      end
    else
      local rank = redis.call('ZRANK', KEYS[3], ticket)
      if not rank then return {0, -1} end
      ahead = rank
      queued = true
    end
  end
  local r = tonumber(ARGV[3])
  local t = tonumber(ARGV[4])
  local held_r = tonumber(redis.call('HGET', KEYS[2], '=r') or '0')
  local held_t = tonumber(redis.call('HGET', KEYS[2], '=t') or '0')
  local fits = true
  if ARGV[5] ~= '' and held_r + r * (ahead + 1) > tonumber(ARGV[5]) then fits = false end
  if ARGV[6] ~= '' and held_t + t * (ahead + 1) > tonumber(ARGV[6]) then fits = false end
  if not fits then
    if mode == '' then return {0, -1} end
    if not queued then redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), ticket) end
    redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[9]), ticket)
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    for i = 3, 5 do redis.call('PEXPIREAT', KEYS[i], tonumber(last[2]) + 1000) end
    return {0, ahead}
  end
  if queued then
    redis.call('ZREM', KEYS[3], ticket)
    redis.call('ZREM', KEYS[4], ticket)
  end
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ' ' .. ARGV[4])
  redis.call('HINCRBYFLOAT', KEYS[2], '=r', r)
  redis.call('HINCRBYFLOAT', KEYS[2], '=t', t)
  local longest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], tonumber(longest[2]) + 1000)
  redis.call('PEXPIREAT', KEYS[2], tonumber(longest[2]) + 1000)
  return {1, 0}
end
-- The epoch: missing, or another one, while the caller remembers one that must still exist
-- means the window was lost (another epoch: a worker that never saw the window made a new one);
-- it is then held full for one window (ARGV[11] ms) before anything else is decided. An epoch
-- ending in '+' has been held full already: a worker remembering the lost one acts once.
local epoch = redis.call('GET', KEYS[6])
local lost = false
if not epoch then
  epoch = now_ms .. '-' .. ARGV[1]
  lost = ARGV[10] ~= ''
  if not lost then redis.call('SET', KEYS[6], epoch) end
elseif ARGV[10] ~= '' and epoch ~= ARGV[10] and string.sub(epoch, -1) ~= '+' then
  lost = true
end
if lost then
  epoch = epoch .. '+'
  local ttl = redis.call('PTTL', KEYS[6])
  redis.call('SET', KEYS[6], epoch)
  if ttl > 0 then redis.call('PEXPIRE', KEYS[6], ttl) end  -- its expiry never moves earlier
  local full = '1000000000000000'
  local id = 'rebuild:' .. epoch
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[11]), id)
  redis.call('HSET', KEYS[2], id, full .. ' ' .. full)
  redis.call('HINCRBYFLOAT', KEYS[2], '=r', full)
  redis.call('HINCRBYFLOAT', KEYS[2], '=t', full)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]) + 1000)
  redis.call('PEXPIREAT', KEYS[2], tonumber(last[2]) + 1000)
end
local result = decide()
-- The epoch outlives the window's last hold, and its expiry never moves earlier (a release
-- does not shorten it), so a worker's memory of it is never wrong about an idle window.
local want = now_ms + 1000
local longest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #longest > 0 then want = math.max(want, tonumber(longest[2]) + 1000) end
local pttl = redis.call('PTTL', KEYS[6])
local current = 0
if pttl > 0 then current = now_ms + pttl end
if want > current then
  redis.call('PEXPIREAT', KEYS[6], want)
  current = want
end
return {result[1], result[2], epoch, current, now_ms}
"""

_RELEASE = """
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local held = redis.call('HGET', KEYS[2], ARGV[1])
if not held then return 0 end
local r, t = string.match(held, '(%S+) (%S+)')
redis.call('HINCRBYFLOAT', KEYS[2], '=r', -tonumber(r))
redis.call('HINCRBYFLOAT', KEYS[2], '=t', -tonumber(t))
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""


# How long before the epoch's expiry a worker stops counting on it (the two clocks' reading
# of one interval may differ by a scheduling delay).
_EPOCH_MARGIN_S = 0.25
# Windows whose epoch a worker remembers (the oldest is forgotten first).
_MAX_EPOCHS = 4096


def is_redis_url(store: object) -> bool:
    """Whether a `SharedQuota` store argument names a Redis server."""
    return isinstance(store, str) and store.startswith(("redis://", "rediss://", "unix://"))


class RedisWindows:
    """Quota windows on one Redis server or cluster (used from the quota's own thread)."""

    def __init__(self, url: str, window_s: float = 60.0) -> None:
        self._url = url
        self._window_ms = max(1, round(window_s * 1000))
        self._client: Any = None
        self._admit: Any = None
        self._release: Any = None
        # Per window: the epoch last seen, and until when (time.monotonic()) it must still exist.
        self._epochs: dict[str, tuple[str, float]] = {}

    def _connect(self) -> None:
        if self._client is not None:
            return
        try:
            import redis
        except ImportError:
            from pollux import ConfigurationError

            raise ConfigurationError(
                "a redis:// quota store needs the redis package",
                hint='pip install "pollard[redis]"',
            ) from None
        self._client = redis.Redis.from_url(self._url, socket_timeout=5, socket_connect_timeout=5)
        self._admit = self._client.register_script(_ADMIT)
        self._release = self._client.register_script(_RELEASE)

    #: The keys of one window, in the scripts' KEYS order.
    PARTS = ("holds", "amounts", "queue", "leases", "arrivals", "epoch")

    @staticmethod
    def _keys(scope: str) -> list[str]:
        # One hash tag per window: every key of it lands in one cluster slot.
        tag = "{pollard-quota:" + scope[:32] + "}"
        return [f"pollard:{tag}:{part}" for part in RedisWindows.PARTS]

    def admit(
        self,
        scope: str,
        requests: int,
        tokens: int,
        limits: tuple[int | None, int | None],
        lease_s: float,
        *,
        ticket: str | None = None,
        waiting: bool = False,
        ticket_lease_s: float = 0.0,
    ) -> tuple[str | None, int]:
        """Hold the amounts when they fit under ``limits`` and the queue lets this attempt in.

        Without ``ticket`` the attempt is not queued (a settlement, a pause). With ``ticket``
        and ``waiting=False`` it is a first attempt: admitted when nobody waits and it fits,
        else queued at the back under ``ticket``. With ``waiting=True`` the ticket's holder
        asks again, renewing the ticket. A queued attempt is admitted only when the window
        also has room for every waiter ahead of it, and then leaves the queue.

        Returns:
            The hold's id (None when refused), and how many waiters are ahead of the ticket
            (-1 without one: not queued, or its lease ended).
        """
        self._connect()
        hold = os.urandom(12).hex()
        mode = "" if ticket is None else ("wait" if waiting else "new")
        args = [
            hold,
            max(1, round(lease_s * 1000)),
            requests,
            tokens,
            "" if limits[0] is None else limits[0],
            "" if limits[1] is None else limits[1],
            mode,
            ticket or "",
            max(1, round(ticket_lease_s * 1000)),
            self._expected_epoch(scope),
            self._window_ms,
        ]
        sent = time.monotonic()
        held, ahead, epoch, expiry_ms, now_ms = self._admit(keys=self._keys(scope), args=args)
        # Measured from before the call: the memory ends no later than the key can.
        alive_until = sent + (int(expiry_ms) - int(now_ms)) / 1000
        epoch_text = epoch.decode() if isinstance(epoch, bytes) else str(epoch)
        self._epochs[scope] = (epoch_text, alive_until)
        if len(self._epochs) > _MAX_EPOCHS:
            self._epochs.pop(next(iter(self._epochs)))
        return (hold if int(held) == 1 else None), int(ahead)

    def _expected_epoch(self, scope: str) -> str:
        """The window's epoch this worker saw, while that window must still exist, else ""."""
        memo = self._epochs.get(scope)
        if memo is None or time.monotonic() >= memo[1] - _EPOCH_MARGIN_S:
            return ""
        return memo[0]

    def hold(self, scope: str, requests: int, tokens: int, lease_s: float) -> str:
        """Hold the amounts whatever the limits (what was used, or a provider's pause)."""
        held, _ = self.admit(scope, requests, tokens, (None, None), lease_s)
        assert held is not None
        return held

    def release(self, scope: str, hold: str) -> None:
        """Drop a hold or a waiting ticket (idempotent)."""
        self._connect()
        self._release(keys=self._keys(scope), args=[hold])

    def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            self._client.close()
            self._client = None
