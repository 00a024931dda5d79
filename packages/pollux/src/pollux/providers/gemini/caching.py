"""Persistent context caches (``CachePolicy``) on Gemini's ``cachedContents``.

One cache holds an Environment's sources, instructions and tools (Gemini requires the
instructions and tools to live inside the cache when a request names one); calls over that
Environment then send ``cached_content`` and only the prompt.

Identity: ``sha256(environment fingerprint | model | sha256(api key))``. The cache's display
name is ``pollux-<identity[:40]>``, so a second process (or a later ``asyncio.run``) finds the
cache through ``caches.list`` instead of paying to create it again; different API keys never
share one. Resolution, in order:

1. the process-wide :class:`CacheRegistry` (no I/O while the entry has more than
   :data:`EXPIRY_MARGIN_S` to live);
2. ``caches.list``, matching display name and model, still alive;
3. create: upload the sources (reusing the Session's uploads), count the tokens with
   ``countTokens`` (free) and refuse below the model's minimum cacheable size before paying,
   then ``caches.create`` with ``ttl = CachePolicy.ttl_seconds`` (default one hour).

Creation is single-flight per identity within a process: concurrent calls share one create.
An expired cache is simply not found, and created again. :func:`refresh_context_cache` extends a
cache's TTL and :func:`delete_context_cache` deletes it.

Each create, refresh and delete is reported to the observers of
:func:`pollux.interaction.observe_caches` as a :class:`~pollux.interaction.CacheEvent` with the
provider-clock times storage is billed on (what a ledger needs to settle storage to the time the
cache was actually held).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from pollux.errors import CacheError, ConfigurationError, PolluxError
from pollux.interaction.cache_events import CacheEvent, emit_cache_event
from pollux.providers._batch_jobs import iso_time

from .client import build_client
from .compile import compile_tools
from .errors import PROVIDER, is_not_found, wrap_gemini_error
from .extract import field
from .uploads import local_expiry, uses_url_context

if TYPE_CHECKING:
    from pollux.config import Config
    from pollux.interaction.environment import Environment
    from pollux.providers.base import ProviderRequest
    from pollux.source import Source

__all__ = [
    "DEFAULT_TTL_S",
    "EXPIRY_MARGIN_S",
    "REGISTRY",
    "CacheEntry",
    "CacheRegistry",
    "cache_identity",
    "check_ttl",
    "delete_located",
    "display_name",
    "known_context_cache",
    "min_cache_tokens",
    "refresh_located",
    "reported",
]

_log = logging.getLogger("pollux.providers.gemini")

_T = TypeVar("_T")

#: TTL when ``CachePolicy.ttl_seconds`` is None.
DEFAULT_TTL_S = 3600
#: A cache with less than this left is treated as gone (a call must not race its expiry).
EXPIRY_MARGIN_S = 10.0
_PREFIX = "pollux-"


def min_cache_tokens(model: str) -> int:
    """The smallest content Gemini caches for ``model`` (its documented minimums)."""
    name = model.rsplit("/", 1)[-1]
    if name.startswith(("gemini-2.5-pro", "gemini-3-pro", "gemini-3.1-pro")):
        return 4096
    if name.startswith("gemini-3"):
        return 1024
    return 1024


def cache_identity(
    *,
    model: str,
    api_key: str | None,
    instructions: str | None,
    tools: Sequence[Any],
    sources: Sequence[Source],
) -> str:
    """The identity of one cache: what the model sees, the model, and the account."""
    from pollux.interaction.environment import Environment

    fingerprint = Environment(
        instructions=instructions, sources=tuple(sources), tools=tuple(tools)
    ).fingerprint(provider=PROVIDER)
    # The account is the key at one endpoint: a cache known at a gateway (or an emulator) is not
    # one at another, even in one process. The default endpoint keeps the identity it had.
    endpoint = os.environ.get("GOOGLE_GEMINI_BASE_URL") or ""
    account_of = (api_key or "") + (f"|{endpoint}" if endpoint else "")
    account = hashlib.sha256(account_of.encode("utf-8")).hexdigest()
    return hashlib.sha256(f"{fingerprint}|{model}|{account}".encode()).hexdigest()


def display_name(identity: str) -> str:
    """The display name that carries the identity (findable by ``caches.list``)."""
    return _PREFIX + identity[:40]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One known cache: resource name, wall-clock expiry and the tokens it stores.

    ``expire_time`` is the expiry on the provider's clock (what storage is billed to) and
    ``skew`` the provider's clock minus the local one, measured when a create or update answered
    (None for a cache found by listing, whose ``updateTime`` is not "now").
    """

    name: str
    expires_at: float | None
    tokens: int | None = None
    expire_time: float | None = None
    skew: float | None = None

    def alive(self, now: float, margin: float = EXPIRY_MARGIN_S) -> bool:
        """Whether the cache has more than ``margin`` seconds left."""
        return self.expires_at is None or self.expires_at - now > margin


class CacheRegistry:
    """Known caches by identity, for the whole process, plus in-flight creations.

    In-flight futures are keyed by event loop too: a future belongs to the loop that made it,
    and one process may run several ``asyncio.run`` calls.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._entries: dict[str, CacheEntry] = {}
        self._inflight: dict[tuple[int, str], asyncio.Future[tuple[CacheEntry, bool]]] = {}

    def get(self, identity: str) -> CacheEntry | None:
        """A live entry, or None (dead entries are dropped)."""
        entry = self._entries.get(identity)
        if entry is not None and not entry.alive(self.clock()):
            del self._entries[identity]
            return None
        return entry

    def put(self, identity: str, entry: CacheEntry) -> None:
        """Remember a cache."""
        self._entries[identity] = entry

    def forget(self, *, identity: str | None = None, name: str | None = None) -> None:
        """Drop an entry by identity or by resource name."""
        if identity is not None:
            self._entries.pop(identity, None)
        if name is not None:
            for key, entry in list(self._entries.items()):
                if entry.name == name:
                    del self._entries[key]

    async def single_flight(
        self, identity: str, work: Callable[[], Any]
    ) -> tuple[CacheEntry, bool]:
        """Run ``work`` once per identity at a time; concurrent callers share its result.

        Returns the entry and whether *this* caller created it.
        """
        key = (id(asyncio.get_running_loop()), identity)
        pending = self._inflight.get(key)
        if pending is not None:
            entry, _ = await asyncio.shield(pending)
            return entry, False
        future: asyncio.Future[tuple[CacheEntry, bool]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result: tuple[CacheEntry, bool] = await work()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            self._inflight.pop(key, None)
        self.put(identity, result[0])
        future.set_result(result)
        return result


#: The process-wide registry.
REGISTRY = CacheRegistry()


def _entry(cache: Any, now: float, *, answered_now: bool = False) -> CacheEntry:
    """The registry entry of a cache resource read at local time ``now``.

    ``answered_now``: the resource is a create or update answer, so its ``updateTime`` is the
    provider's "now" and measures the clock skew.
    """
    tokens = field(field(cache, "usage_metadata"), "total_token_count")
    skew = None
    if answered_now:
        anchor = iso_time(field(cache, "update_time")) or iso_time(field(cache, "create_time"))
        skew = None if anchor is None else anchor - now
    return CacheEntry(
        name=str(field(cache, "name")),
        expires_at=local_expiry(cache, "expire_time", ("update_time", "create_time"), now),
        tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
        expire_time=iso_time(field(cache, "expire_time")),
        skew=skew,
    )


def _provider_now(entry: CacheEntry | None, now: float) -> float:
    """Local ``now`` on the provider's clock (by the skew the entry measured, else as is)."""
    skew = entry.skew if entry is not None else None
    return now + (skew or 0.0)


def _same_model(cache: Any, model: str) -> bool:
    listed = str(field(cache, "model") or "")
    return listed.rsplit("/", 1)[-1] == model.rsplit("/", 1)[-1]


async def find_cache(
    client: Any,
    identity: str,
    model: str,
    *,
    clock: Callable[[], float],
    timeout_s: float,
    margin: float = EXPIRY_MARGIN_S,
) -> CacheEntry | None:
    """Look the cache up by display name (``caches.list``), alive and for this model."""
    wanted = display_name(identity)
    try:
        pager = await client.aio.caches.list(config={"page_size": 100})
        async for cache in pager:
            if field(cache, "display_name") == wanted and _same_model(cache, model):
                entry = _entry(cache, clock())
                if entry.alive(clock(), margin):
                    return entry
    except Exception as exc:
        raise wrap_gemini_error(exc, phase="cache", timeout_s=timeout_s) from exc
    return None


def _too_small(model: str, tokens: int | None, minimum: int) -> ConfigurationError:
    size = f"{tokens} tokens" if tokens is not None else "too small"
    return ConfigurationError(
        f"The environment is {size}, below the {minimum} tokens {model} needs for "
        "a persistent cache (CachePolicy)",
        hint="Drop the CachePolicy (Gemini still caches repeated prefixes implicitly), or "
        "cache more content: add the long shared sources to the Environment.",
    )


class GeminiCaches:
    """Cache resolution for one provider (its client, uploads and config).

    Attributes:
        provider: The provider name its ``created`` events carry (a subclass for another
            provider of Gemini's caches, Vertex AI, sets its own).
    """

    provider: str = PROVIDER

    def __init__(
        self,
        client: Callable[[], Any],
        uploads: Any,
        config: Config,
        *,
        registry: CacheRegistry = REGISTRY,
    ) -> None:
        self._client = client
        self._uploads = uploads
        self._config = config
        self.registry = registry

    def identity(self, request: ProviderRequest, model: str) -> str:
        """The cache identity for one request's environment."""
        return cache_identity(
            model=model,
            api_key=self._config.api_key,
            instructions=request.instructions,
            tools=request.tools,
            sources=request.sources.sources,
        )

    async def resolve(
        self, request: ProviderRequest, model: str, ttl_seconds: int | None
    ) -> tuple[CacheEntry, bool]:
        """The cache for ``request``'s environment, and whether this call created it."""
        if request.requirements.tool_choice is not None:
            raise ConfigurationError(
                "tool_choice cannot be combined with a persistent cache on Gemini: the tool "
                "configuration must live inside the cache",
                hint="Drop tool_choice, or drop the CachePolicy for these calls.",
            )
        if not request.sources.sources and not request.instructions and not request.tools:
            raise ConfigurationError(
                "A CachePolicy needs something to cache: the Environment has no sources, "
                "instructions or tools",
                hint="Put the long shared sources on the Environment, or drop the CachePolicy.",
            )
        if any(source._path is not None for source in request.sources.sources):
            # File content is hashed (memoized per stat): the first time, off the event loop.
            identity = await asyncio.to_thread(self.identity, request, model)
        else:
            identity = self.identity(request, model)
        known = self.registry.get(identity)
        if known is not None:
            return known, False
        timeout_s = self._config.request_timeout_s

        async def work() -> tuple[CacheEntry, bool]:
            found = await find_cache(
                self._client(), identity, model, clock=self.registry.clock, timeout_s=timeout_s
            )
            if found is not None:
                return found, False
            return await self._create(request, model, identity, ttl_seconds), True

        return await self.registry.single_flight(identity, work)

    async def _create(
        self, request: ProviderRequest, model: str, identity: str, ttl_seconds: int | None
    ) -> CacheEntry:
        client = self._client()
        timeout_s = self._config.request_timeout_s
        parts = list(await self._uploads.parts(request.sources.sources))
        # The cache outlives the Session that uploaded its files: do not delete them on close.
        self._uploads.pin(parts)
        minimum = min_cache_tokens(model)
        counted = list(parts)
        if request.instructions:
            counted.append({"text": request.instructions})
        if counted:
            try:
                answer = await client.aio.models.count_tokens(
                    model=model, contents=[{"role": "user", "parts": counted}]
                )
            except Exception as exc:
                # Counting is a courtesy check (a gateway may not serve countTokens); the
                # create below still refuses a cache that is too small.
                _log.info("gemini countTokens failed before a cache create: %s", exc)
                answer = None
            tokens = field(answer, "total_tokens")
            if isinstance(tokens, int) and tokens < minimum:
                raise _too_small(model, tokens, minimum)
        config: dict[str, Any] = {
            "display_name": display_name(identity),
            "ttl": f"{ttl_seconds or DEFAULT_TTL_S}s",
        }
        if parts:
            config["contents"] = [{"role": "user", "parts": parts}]
        if request.instructions:
            config["system_instruction"] = request.instructions
        tools = compile_tools(
            request.tools, url_context=any(uses_url_context(s) for s in request.sources.sources)
        )
        if tools:
            config["tools"] = tools
        try:
            created = await client.aio.caches.create(model=model, config=config)
        except Exception as exc:
            message = str(getattr(exc, "message", "") or exc).lower()
            if getattr(exc, "code", None) == 400 and (
                "too small" in message or "min_total" in message
            ):
                raise _too_small(model, None, minimum) from exc
            error = wrap_gemini_error(exc, phase="cache", timeout_s=timeout_s)
            raise CacheError(
                str(error),
                hint=error.hint,
                retryable=getattr(error, "retryable", False),
                status_code=getattr(error, "status_code", None),
                retry_after_s=getattr(error, "retry_after_s", None),
                provider=PROVIDER,
                phase="cache",
                error_category=getattr(error, "error_category", None),
            ) from exc
        now = self.registry.clock()
        entry = _entry(created, now, answered_now=True)
        await emit_cache_event(
            CacheEvent(
                kind="created",
                provider=self.provider,
                model=model,
                name=entry.name,
                tokens=entry.tokens,
                at=_provider_now(entry, now),
                expires_at=entry.expire_time,
                ttl_seconds=ttl_seconds or DEFAULT_TTL_S,
            )
        )
        return entry


async def reported(answered: tuple[_T, CacheEvent | None]) -> _T:
    """The answer of `delete_located` or `refresh_located`, once its event is observed.

    Called after the provider answered and its client was released, so an observer's exception
    (a ledger that fails to record) is its own, never reported as the provider's.
    """
    answer, event = answered
    if event is not None:
        await emit_cache_event(event)
    return answer


def check_ttl(ttl_seconds: object) -> None:
    """Refuse a cache TTL that is not a positive integer (seconds).

    Raises:
        ConfigurationError: ``ttl_seconds`` is not a positive integer.
    """
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds <= 0:
        raise ConfigurationError(
            f"ttl_seconds must be a positive integer, got {ttl_seconds!r}",
            hint="Pass ttl_seconds=3600 for one hour.",
        )


async def _with_client(config: Config, work: Callable[[Any], Any]) -> Any:
    client = build_client(config)
    try:
        return await work(client)
    finally:
        await client.aio.aclose()


def _environment_identity(environment: Environment, config: Config) -> tuple[str, str]:
    model = config.model
    if config.provider != PROVIDER or not model:
        raise ConfigurationError(
            "Gemini context caches need Config(provider='gemini', model=...)",
            hint="Pass the config the cache was created with.",
        )
    identity = cache_identity(
        model=model,
        api_key=config.api_key,
        instructions=environment.instructions,
        tools=environment.tools,
        sources=environment.sources,
    )
    return identity, model


async def _locate(client: Any, identity: str, model: str, config: Config) -> CacheEntry | None:
    # Any cache not yet expired counts here: refreshing one about to expire is the point.
    known = REGISTRY._entries.get(identity)
    if known is not None and known.alive(REGISTRY.clock(), 0.0):
        return known
    return await find_cache(
        client,
        identity,
        model,
        clock=REGISTRY.clock,
        timeout_s=config.request_timeout_s,
        margin=0.0,
    )


def known_context_cache(environment: Environment, *, config: Config) -> float | None:
    """The local expiry of ``environment``'s cache when this process knows it alive, else None.

    No I/O: only pollux's process-wide registry is read (a cache another process made, or one
    within :data:`EXPIRY_MARGIN_S` of its expiry, is not known). A caller that must budget for a
    cache the next call may create (pollard's bridge) treats None as "this call may create it".

    Args:
        environment: The Environment whose ``CachePolicy`` creates the cache.
        config: The config of the calls (provider, model and API key are the identity).

    Raises:
        ConfigurationError: ``config`` is not a Gemini config with a model.
    """
    identity, _ = _environment_identity(environment, config)
    entry = REGISTRY.get(identity)
    return None if entry is None else entry.expires_at


async def delete_located(
    client: Any, identity: str, model: str, config: Config, *, provider: str
) -> tuple[bool, CacheEvent | None]:
    """Find the cache of ``identity`` and delete it: whether one was, and its ``deleted`` event.

    The shared body of the Gemini and Vertex AI ``delete_context_cache``. The SDK's own
    exception propagates unwrapped (each provider maps it to its errors); the event is returned,
    not emitted, so that an observer's exception is never mistaken for the provider's.

    Args:
        client: The provider's ``genai.Client``.
        identity: The cache identity (:func:`cache_identity`).
        model: The model the cache belongs to.
        config: The config of the calls (its request timeout).
        provider: The provider name the event carries.
    """
    entry = await _locate(client, identity, model, config)
    REGISTRY.forget(identity=identity)
    if entry is None:
        return False, None
    try:
        await client.aio.caches.delete(name=entry.name)
    except Exception as exc:
        if is_not_found(exc):
            return False, None
        raise
    event = CacheEvent(
        kind="deleted",
        provider=provider,
        model=model,
        name=entry.name,
        tokens=entry.tokens,
        at=_provider_now(entry, REGISTRY.clock()),
        expires_at=entry.expire_time,
    )
    return True, event


async def refresh_located(
    client: Any,
    identity: str,
    model: str,
    config: Config,
    *,
    provider: str,
    ttl_seconds: int,
) -> tuple[float | None, CacheEvent | None]:
    """Find the cache of ``identity`` and set its TTL: the new local expiry and the event.

    The shared body of the Gemini and Vertex AI ``refresh_context_cache`` (the SDK's exception
    propagates unwrapped and the ``refreshed`` event is returned, as in :func:`delete_located`).
    The clock skew is measured on the update's answer, and the tokens a listed or updated
    resource does not report are kept from the known entry.

    Args:
        client: The provider's ``genai.Client``.
        identity: The cache identity (:func:`cache_identity`).
        model: The model the cache belongs to.
        config: The config of the calls (its request timeout).
        provider: The provider name the event carries.
        ttl_seconds: The new lifetime, from now.
    """
    entry = await _locate(client, identity, model, config)
    if entry is None:
        return None, None
    try:
        updated = await client.aio.caches.update(name=entry.name, config={"ttl": f"{ttl_seconds}s"})
    except Exception as exc:
        if is_not_found(exc):
            REGISTRY.forget(identity=identity)
            return None, None
        raise
    now = REGISTRY.clock()
    fresh = _entry(updated, now, answered_now=True)
    if fresh.tokens is None:
        fresh = replace(fresh, tokens=entry.tokens)
    if fresh.expires_at is None:
        fresh = replace(fresh, expires_at=now + ttl_seconds)
    at = _provider_now(fresh, now)
    REGISTRY.put(identity, fresh)
    event = CacheEvent(
        kind="refreshed",
        provider=provider,
        model=model,
        name=entry.name,
        tokens=fresh.tokens,
        at=at,
        expires_at=fresh.expire_time if fresh.expire_time is not None else at + ttl_seconds,
        previous_expires_at=entry.expire_time,
        ttl_seconds=ttl_seconds,
    )
    return fresh.expires_at, event


async def delete_context_cache(environment: Environment, *, config: Config) -> bool:
    """Delete the Gemini context cache of ``environment``, if one exists.

    Args:
        environment: The Environment whose ``CachePolicy`` created the cache.
        config: The config it was created with (provider, model and API key are the identity).

    Returns:
        True when a cache was deleted, False when none was found.

    Raises:
        APIError: Gemini refused the deletion.
    """
    identity, model = _environment_identity(environment, config)

    async def work(client: Any) -> tuple[bool, CacheEvent | None]:
        try:
            return await delete_located(client, identity, model, config, provider=PROVIDER)
        except PolluxError:
            raise
        except Exception as exc:
            raise wrap_gemini_error(exc, phase="cache") from exc

    deleted: tuple[bool, CacheEvent | None] = await _with_client(config, work)
    return await reported(deleted)


async def refresh_context_cache(
    environment: Environment, *, config: Config, ttl_seconds: int = DEFAULT_TTL_S
) -> float | None:
    """Extend the TTL of ``environment``'s Gemini context cache to ``ttl_seconds`` from now.

    Returns:
        The new expiry (seconds since the epoch), or None when no cache was found (the next
        call over the Environment creates one).

    Raises:
        ConfigurationError: ``ttl_seconds`` is not a positive integer.
        APIError: Gemini refused the update.
    """
    check_ttl(ttl_seconds)
    identity, model = _environment_identity(environment, config)

    async def work(client: Any) -> tuple[float | None, CacheEvent | None]:
        try:
            return await refresh_located(
                client, identity, model, config, provider=PROVIDER, ttl_seconds=ttl_seconds
            )
        except PolluxError:
            raise
        except Exception as exc:
            raise wrap_gemini_error(exc, phase="cache") from exc

    refreshed: tuple[float | None, CacheEvent | None] = await _with_client(config, work)
    return await reported(refreshed)


def cache_names(compiled: Mapping[str, Any]) -> str | None:
    """The cache a compiled request names, if any."""
    config = compiled.get("config") or {}
    name = config.get("cached_content") if isinstance(config, Mapping) else None
    return str(name) if name else None
