"""The Redis backend of `SharedQuota`: the same leased holds, in one Lua script per decision.

A window is two keys that share one hash tag, so Redis Cluster keeps them in one slot and a
script may touch both: a sorted set of hold ids scored by their expiry (milliseconds on the Redis
server's clock, the one clock every worker agrees on) and a hash of each hold's amounts plus the
window's running totals. Every decision (admit against the limits, hold unconditionally, release)
first drops the expired holds, so a crashed worker's holds end with their lease, exactly as they
do in a pollard store.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["RedisWindows", "is_redis_url"]

# KEYS: holds (zset id -> expiry ms), amounts (hash id -> "requests tokens", plus "=r", "=t").
# ARGV: hold id, lease ms, requests, tokens, requests limit, tokens limit ("" = no limit).
# Returns 1 when held, 0 when refused.
_ADMIT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
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
local r = tonumber(ARGV[3])
local t = tonumber(ARGV[4])
local held_r = tonumber(redis.call('HGET', KEYS[2], '=r') or '0')
local held_t = tonumber(redis.call('HGET', KEYS[2], '=t') or '0')
if ARGV[5] ~= '' and held_r + r > tonumber(ARGV[5]) then return 0 end
if ARGV[6] ~= '' and held_t + t > tonumber(ARGV[6]) then return 0 end
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ' ' .. ARGV[4])
redis.call('HINCRBYFLOAT', KEYS[2], '=r', r)
redis.call('HINCRBYFLOAT', KEYS[2], '=t', t)
local longest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], tonumber(longest[2]) + 1000)
redis.call('PEXPIREAT', KEYS[2], tonumber(longest[2]) + 1000)
return 1
"""

_RELEASE = """
local held = redis.call('HGET', KEYS[2], ARGV[1])
if not held then return 0 end
local r, t = string.match(held, '(%S+) (%S+)')
redis.call('HINCRBYFLOAT', KEYS[2], '=r', -tonumber(r))
redis.call('HINCRBYFLOAT', KEYS[2], '=t', -tonumber(t))
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""


def is_redis_url(store: object) -> bool:
    """Whether a `SharedQuota` store argument names a Redis server."""
    return isinstance(store, str) and store.startswith(("redis://", "rediss://", "unix://"))


class RedisWindows:
    """Quota windows on one Redis server or cluster (used from the quota's own thread)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._client: Any = None
        self._admit: Any = None
        self._release: Any = None

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

    @staticmethod
    def _keys(scope: str) -> list[str]:
        # One hash tag per window: both keys land in one cluster slot.
        tag = "{pollard-quota:" + scope[:32] + "}"
        return [f"pollard:{tag}:holds", f"pollard:{tag}:amounts"]

    def admit(
        self,
        scope: str,
        requests: int,
        tokens: int,
        limits: tuple[int | None, int | None],
        lease_s: float,
    ) -> str | None:
        """Hold the amounts when they fit under ``limits``; the hold's id, or None if refused."""
        self._connect()
        hold = os.urandom(12).hex()
        args = [
            hold,
            max(1, round(lease_s * 1000)),
            requests,
            tokens,
            "" if limits[0] is None else limits[0],
            "" if limits[1] is None else limits[1],
        ]
        return hold if int(self._admit(keys=self._keys(scope), args=args)) == 1 else None

    def hold(self, scope: str, requests: int, tokens: int, lease_s: float) -> str:
        """Hold the amounts whatever the limits (what was used, or a provider's pause)."""
        held = self.admit(scope, requests, tokens, (None, None), lease_s)
        assert held is not None
        return held

    def release(self, scope: str, hold: str) -> None:
        """Drop a hold (idempotent)."""
        self._connect()
        self._release(keys=self._keys(scope), args=[hold])

    def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            self._client.close()
            self._client = None
