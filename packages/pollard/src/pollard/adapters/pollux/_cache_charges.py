"""Explicit context caches as charged ledger entries: creation and storage, under their run.

A Gemini ``CachePolicy`` cache (on the Gemini API or Vertex AI) is billed apart from the
calls that read it: its tokens once at the model's input rate when it is created, then storage
for every second it lives (``tokens x hours x storage rate``). The ledger follows the cache's
life in notes, each a new node (a settlement never edits an earlier one, so the tree stays
tamper-evident):

* ``cache_hold`` (before the call, beside its node): a call that may create the cache (a
  ``CachePolicy`` on Gemini or Vertex AI that pollux does not know alive) is first admitted
  against its worst case, creation plus storage for the whole TTL of the estimated environment
  tokens.
  A budget that cannot afford it refuses (`pollard.BudgetExceeded`) before any provider I/O.
  ``cache_hold_release`` (under the hold, after the call) gives it back, whatever happened.
  A call that fails after creating the cache is charged its ``cache_storage`` under the hold.
* ``cache_storage`` (under the call's node): the call created the cache; charged its creation
  plus storage for the whole TTL, what the provider bills when the cache lives to its expiry
  (so expiry needs no settlement). A run charges a cache once (looked up by cache name, however
  many calls, holds or observers report it), and replay (which makes no call) records nothing.
* ``cache_settlement`` (under the ``cache_storage`` note when the run has it): pollux reported a
  refresh (charged the storage between the old and the new expiry; a credit when the new expiry
  is earlier) or a delete before the expiry (a credit for the storage from the delete to the
  expiry). pollux reports these as `pollux.interaction.CacheEvent` to the observers of
  `pollux.interaction.observe_caches`; `governed_refresh_cache`, `governed_delete_cache` and
  `settle_cache_events` install one that records into a run.

So a cache's storage nets to ``tokens x (end - created) x rate``, the time the provider held it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from decimal import ROUND_FLOOR, Decimal
from typing import TYPE_CHECKING, Any

from pollard import AsyncRun, Node, NodeKind
from pollard.meters import PRICE_PROVIDERS, genai_price
from pollux import CachePolicy, ConfigurationError
from pollux.interaction import CacheEvent, observe_caches
from pollux.providers import gemini, vertex

from ._estimator import sources_tokens
from ._identity import canonical

if TYPE_CHECKING:
    from pollard import Run
    from pollux import Config, Environment, Output

__all__ = [
    "CACHE_STORAGE_PRICES",
    "cache_hold",
    "cache_storage_price",
    "charge_created_cache",
    "governed_delete_cache",
    "governed_refresh_cache",
    "settle_cache_event",
    "settle_cache_events",
]

_KNOWN: dict[str, Callable[..., float | None]] = {
    # The providers whose CachePolicy makes a billed explicit cache (Vertex AI runs Gemini's
    # caches under a project): how pollux says, without I/O, that it knows the cache alive.
    "gemini": gemini.known_context_cache,
    "vertex": vertex.known_context_cache,
}
_REFRESH: dict[str, Callable[..., Awaitable[float | None]]] = {
    "gemini": gemini.refresh_context_cache,
    "vertex": vertex.refresh_context_cache,
}
_DELETE: dict[str, Callable[..., Awaitable[bool]]] = {
    "gemini": gemini.delete_context_cache,
    "vertex": vertex.delete_context_cache,
}


def _lifecycle(table: Mapping[str, Any], config: Config) -> Any:
    try:
        return table[config.provider]
    except KeyError:
        raise ConfigurationError(
            f"Explicit context caches are Gemini's and Vertex AI's, not {config.provider!r}'s",
            hint="Pass the config the cache was created with "
            "(Config(provider='gemini' or 'vertex', model=...)).",
        ) from None


CACHE_STORAGE_PRICES: dict[str, Decimal] = {
    # Gemini Developer API pricing page, "Context caching (storage)": US dollars per 1,000,000
    # tokens per hour. Longest matching model-name prefix wins. Vertex AI's Gemini models are
    # priced at the same table (as `PRICE_PROVIDERS` prices their calls).
    "gemini-2.5-pro": Decimal("4.50"),
    "gemini-3-pro": Decimal("4.50"),
    "gemini-2.5-flash": Decimal("1.00"),
    "gemini-2.5-flash-lite": Decimal("1.00"),
    "gemini-2.0-flash": Decimal("1.00"),
    "gemini-3-flash": Decimal("1.00"),
}
"""Explicit-cache storage prices (US dollars per million tokens per hour), by model prefix."""


def _storage_rate(model: str) -> Decimal | None:
    name = model.rsplit("/", 1)[-1]
    matches = [prefix for prefix in CACHE_STORAGE_PRICES if name.startswith(prefix)]
    return CACHE_STORAGE_PRICES[max(matches, key=len)] if matches else None


def cache_storage_price(
    provider: str, model: str, tokens: int, seconds: float
) -> tuple[Decimal, Decimal] | None:
    """``(creation, storage)`` dollars of an explicit cache, or None when unpriced.

    Creation is ``tokens`` at the model's input rate (genai-prices); storage is
    ``tokens x seconds / 3600 x`` the hourly storage rate (`CACHE_STORAGE_PRICES`).
    """
    rate = _storage_rate(model)
    if rate is None:
        return None
    try:
        import genai_prices
    except ImportError:  # pragma: no cover - the prices extra is installed in the tests
        return None
    try:
        creation, _ = genai_price(
            genai_prices,
            model,
            {"input_tokens": tokens, "output_tokens": 0},
            provider_id=PRICE_PROVIDERS.get(provider),
        )
    except LookupError:
        return None
    return creation, _storage(rate, tokens, Decimal(str(seconds)))


def _storage(rate: Decimal, tokens: int, seconds: Decimal) -> Decimal:
    return Decimal(tokens) * rate * seconds / Decimal(3600) / Decimal(1_000_000)


def _seconds(value: float) -> Decimal:
    """A provider-clock duration in whole milliseconds, rounded down (never over-credits)."""
    return Decimal(repr(value)).quantize(Decimal("0.001"), rounding=ROUND_FLOOR)


# -- the hold: creation plus full-TTL storage admitted before the call -----------------------

#: Characters (or source bytes) per token for the environment estimate of a hold, the rule of
#: thumb `PolluxTokenEstimator` uses; the hold is given back whatever the call reports.
_CHARS_PER_TOKEN = 4


def _environment_tokens(payload: Mapping[str, Any]) -> int:
    env = payload.get("environment")
    env = env if isinstance(env, Mapping) else {}
    chars = len(env.get("instructions") or "")
    return math.ceil(chars / _CHARS_PER_TOKEN) + sources_tokens(payload, _CHARS_PER_TOKEN)


def _may_create(config: Config, environment: Environment) -> CachePolicy | None:
    policy = environment.cache
    known_cache = _KNOWN.get(config.provider)
    if not isinstance(policy, CachePolicy) or known_cache is None or config.use_mock:
        return None
    try:
        known = known_cache(environment, config=config)
    except ConfigurationError:
        return None  # pollux refuses the call itself, before any I/O
    return policy if known is None else None


@asynccontextmanager
async def cache_hold(
    run: AsyncRun,
    payload: Mapping[str, Any],
    config: Config,
    environment: Environment,
    attempt: int = 0,
    *,
    calls: Any = None,
    observe: bool = True,
) -> AsyncIterator[Node | None]:
    """Hold a cache's worst case (creation + full-TTL storage) around a call that may create it.

    The hold is a ``cache_hold`` note beside the call's node, admitted against every budget of
    the run before the call (`pollard.BudgetExceeded`, recorded as a refusal, when it does not
    fit: nothing was sent) and given back by a ``cache_hold_release`` note under it when the
    block ends, however it ends; what the cache really cost is the ``cache_storage`` note the
    call records when it created the cache. Nothing is held in replay mode (no call is made),
    when pollux knows the cache alive, for an unpriced model, or without a ``CachePolicy``.

    Args:
        run: The run.
        payload: The call's identity payload (its model and environment size the hold).
        config: The call's config.
        environment: The call's Environment.
        attempt: The call's attempt (the hold's, so a repeated call holds again).
        calls: What the hold stands for, when not ``payload`` alone (a fan-out's payloads).
        observe: Watch the block for a cache creation (`pollux.interaction.observe_caches`),
            so a call that fails after creating the cache is still charged for it (under the
            hold). Off for a stream, whose block spans the consumer's pulls.

    Yields:
        The hold note, or None when nothing is held.
    """
    policy = _may_create(config, environment)
    model = str(payload.get("model") or "")
    if policy is None or run.mode == "replay":
        yield None
        return
    tokens = _environment_tokens(payload)
    ttl = policy.ttl_seconds or 3600
    priced = cache_storage_price(config.provider, model, tokens, ttl)
    if priced is None or tokens == 0:
        yield None
        return
    worst = priced[0] + priced[1]
    request = hashlib.sha256(canonical(dict(payload) if calls is None else calls)).hexdigest()
    hold_payload = {"pollux": "cache_hold", "request": request}

    def admitted(_payload: Any) -> dict[str, Any]:
        return {"tokens_estimate": tokens, "ttl_seconds": ttl, "usd": str(worst)}

    hold = await run.record_charged(
        NodeKind.NOTE,
        hold_payload,
        charges={"usd": worst},
        fn=admitted,
        parent=run.cursor_id,
        attempt=attempt,
        meta={"cache_hold": {"model": model, "tokens_estimate": tokens, "ttl_seconds": ttl}},
    )
    created: list[CacheEvent] = []
    try:
        if observe:
            with observe_caches(created.append):
                yield hold
        else:
            yield hold
    except BaseException:
        # The call failed after creating the cache: the provider bills it all the same, and
        # no Output reports it, so it is charged here, under the hold.
        for event in created:
            if event.kind == "created" and event.tokens is not None:
                ttl = event.ttl_seconds or ttl
                await _charge_cache(
                    run, hold.id, config.provider, event.model, event.name, event.tokens, ttl
                )
        raise
    finally:
        held = Decimal(str((hold.result or {}).get("usd", "0")))
        await run.record_charged(
            NodeKind.NOTE,
            {"pollux": "cache_hold_release", "hold": hold.id},
            charges={"usd": -held},
            result={"released_usd": str(held)},
            parent=hold.id,
        )


async def charge_created_cache(
    run: AsyncRun,
    node_id: str,
    provider: str,
    model: str | None,
    output: Output,
    *,
    charged: set[str] | None = None,
) -> Node | None:
    """Record the creation and storage charge of the cache ``output`` created, once.

    ``charged``: the caches a fan-out already charged. Every output of one ``run_many`` reports
    the cache its shared environment created, so only the first of them is charged.

    Returns the ``cache_storage`` note, or None when the call created no cache.
    """
    facts = output.diagnostics.raw.get("cache")
    if not isinstance(facts, Mapping) or facts.get("created") is not True:
        return None
    name, tokens, ttl = facts.get("name"), facts.get("tokens"), facts.get("ttl_seconds")
    if not isinstance(name, str) or not isinstance(tokens, int) or not isinstance(ttl, int):
        return None
    if charged is not None:
        if name in charged:
            return None
        charged.add(name)  # before any await: concurrent prompts see it at once
    return await _charge_cache(run, node_id, provider, model or "", name, tokens, ttl)


async def _charge_cache(
    run: AsyncRun, parent: str, provider: str, model: str, name: str, tokens: int, ttl: int
) -> Node | None:
    """The ``cache_storage`` note of a created cache under ``parent``, once (see module docs)."""
    payload = {"pollux": "cache_storage", "cache": name}
    if _storage_note(run, name) is not None:
        return None  # charged already in this run (by the call, its hold or an observer)
    priced = cache_storage_price(provider, model, tokens, ttl)
    meta: dict[str, Any] = {
        "cache": {"name": name, "tokens": tokens, "ttl_seconds": ttl, "model": model},
    }
    charges: dict[str, Any] = {}
    if priced is None:
        meta["unpriced"] = True
    else:
        creation, storage = priced
        charges["usd"] = creation + storage
        meta["cache"]["creation_usd"] = str(creation)
        meta["cache"]["storage_usd"] = str(storage)
    return await run.record_charged(
        NodeKind.NOTE,
        payload,
        charges=charges,
        result={"cache": name, "tokens": tokens, "ttl_seconds": ttl},
        parent=parent,
        meta=meta,
    )


# -- settlement: refresh and early delete ----------------------------------------------------


def _storage_note(run: AsyncRun, name: str) -> Node | None:
    """This run's ``cache_storage`` note of cache ``name`` (a walk: lifecycle calls are rare)."""
    for node in run.store.walk(run.root_id):
        payload = node.payload
        if (
            isinstance(payload, Mapping)
            and payload.get("pollux") == "cache_storage"
            and payload.get("cache") == name
        ):
            return node
    return None


async def settle_cache_event(run: AsyncRun, event: CacheEvent) -> Node | None:
    """Record the ``cache_settlement`` note of a refresh or an early delete (see module docs).

    A refresh is charged ``tokens x (new expiry - old expiry) x rate`` (negative when the new
    expiry is earlier); a delete is credited ``tokens x (expiry - delete time) x rate`` when
    this run holds the cache's ``cache_storage`` charge (otherwise the credit belongs to the run
    that paid, and the note records the delete uncharged, ``"settled": false``). Durations are
    provider-clock seconds, rounded down to the millisecond. A creation is charged its
    ``cache_storage`` under the cursor unless this run charged it already (a governed call
    charges its own). Returns the note, or None when nothing was recorded.
    """
    if event.provider not in _KNOWN:
        return None
    if event.kind == "created":
        if event.tokens is None or event.ttl_seconds is None:
            return None
        return await _charge_cache(
            run,
            run.cursor_id,
            event.provider,
            event.model,
            event.name,
            event.tokens,
            event.ttl_seconds,
        )
    storage = _storage_note(run, event.name)
    rate = _storage_rate(event.model)
    seconds: Decimal | None = None
    if event.kind == "refreshed" and event.expires_at is not None:
        if event.previous_expires_at is not None:
            seconds = _seconds(event.expires_at) - _seconds(event.previous_expires_at)
    elif event.kind == "deleted" and event.expires_at is not None:
        # Storage no longer held: a credit (negative seconds of storage).
        seconds = -max(_seconds(event.expires_at) - _seconds(event.at), Decimal(0))
        if storage is None:
            seconds = None  # not this run's money to credit
    payload = {
        "pollux": "cache_settlement",
        "cache": event.name,
        "event": event.kind,
        "at": str(_seconds(event.at)),
    }
    facts: dict[str, Any] = {
        "model": event.model,
        "tokens": event.tokens,
        "at": str(_seconds(event.at)),
        "expires_at": None if event.expires_at is None else str(_seconds(event.expires_at)),
    }
    if event.previous_expires_at is not None:
        facts["previous_expires_at"] = str(_seconds(event.previous_expires_at))
    charges: dict[str, Any] = {}
    if seconds is not None and rate is not None and event.tokens is not None:
        amount = _storage(rate, event.tokens, seconds)
        charges["usd"] = amount
        facts["storage_seconds"] = str(seconds)
        facts["storage_usd"] = str(amount)
        facts["settled"] = True
    else:
        facts["settled"] = False
    parent = storage.id if storage is not None else run.cursor_id
    return await run.record_charged(
        NodeKind.NOTE,
        payload,
        charges=charges,
        result={"cache": event.name, "event": event.kind, **facts},
        parent=parent,
        meta={"cache": facts},
    )


@contextmanager
def settle_cache_events(run: AsyncRun | Run) -> Iterator[None]:
    """Settle into ``run`` every cache refresh and delete pollux makes inside the block.

    For code that calls pollux's cache lifecycle itself (``pollux.prepare_environment`` with a
    ``CachePolicy``, `pollux.providers.gemini.refresh_context_cache` / ``delete_context_cache``
    and their `pollux.providers.vertex` counterparts):
    a creation becomes a ``cache_storage`` charge (once per cache in the run) and a refresh or
    delete a ``cache_settlement`` note (see the module docs).

    Args:
        run: The run to record into (usually the one that created the cache).

    Example:
        >>> import asyncio
        >>> from pollard import AsyncRuntime
        >>> from pollard.adapters.pollux import settle_cache_events
        >>> async def main():
        ...     async with AsyncRuntime() as rt:
        ...         run = rt.run("caches")
        ...         with settle_cache_events(run):
        ...             pass  # await refresh_context_cache(env, config=config, ttl_seconds=7200)
        ...         return run.report()["spent"]["steps"]
        >>> asyncio.run(main())
        0
    """
    try:
        live = AsyncRun.of(run)
    except TypeError:
        raise TypeError(
            "settle_cache_events() needs a pollard run (from Runtime(...).run() or "
            f"AsyncRuntime(...).run()), got {type(run).__name__}"
        ) from None

    async def observe(event: CacheEvent) -> None:
        await settle_cache_event(live, event)

    with observe_caches(observe):
        yield


async def governed_refresh_cache(
    run: AsyncRun | Run,
    environment: Environment,
    *,
    config: Config,
    ttl_seconds: int = 3600,
) -> float | None:
    """``refresh_context_cache`` of the config's provider, its storage change settled in ``run``.

    `pollux.providers.gemini.refresh_context_cache` for ``provider="gemini"``,
    `pollux.providers.vertex.refresh_context_cache` for ``provider="vertex"``.

    The extension (``tokens x (new expiry - old expiry) x storage rate``) is charged by a
    ``cache_settlement`` note, under the cache's ``cache_storage`` note when this run created it.

    Args:
        run: The run to record into (an `AsyncRun`, or a sync `Run`).
        environment: The Environment whose ``CachePolicy`` created the cache.
        config: The config it was created with.
        ttl_seconds: The new lifetime, from now.

    Returns:
        The new expiry (seconds since the epoch, local clock), or None when no cache was found.

    Raises:
        ConfigurationError: Not a Gemini or Vertex AI config, or ``ttl_seconds`` is not a
            positive integer.
        APIError: The provider refused the update.
    """
    refresh = _lifecycle(_REFRESH, config)
    with settle_cache_events(run):
        result: float | None = await refresh(environment, config=config, ttl_seconds=ttl_seconds)
        return result


async def governed_delete_cache(
    run: AsyncRun | Run, environment: Environment, *, config: Config
) -> bool:
    """``delete_context_cache`` of the config's provider, the unused storage credited in ``run``.

    `pollux.providers.gemini.delete_context_cache` for ``provider="gemini"``,
    `pollux.providers.vertex.delete_context_cache` for ``provider="vertex"``.

    A cache deleted before its expiry is credited ``tokens x (expiry - delete time) x storage
    rate`` by a ``cache_settlement`` note under the ``cache_storage`` note that charged it (when
    this run created it; otherwise the note records the delete uncharged).

    Args:
        run: The run to record into (an `AsyncRun`, or a sync `Run`).
        environment: The Environment whose ``CachePolicy`` created the cache.
        config: The config it was created with.

    Returns:
        True when a cache was deleted, False when none was found.

    Raises:
        ConfigurationError: Not a Gemini or Vertex AI config.
        APIError: The provider refused the deletion.
    """
    delete = _lifecycle(_DELETE, config)
    with settle_cache_events(run):
        deleted: bool = await delete(environment, config=config)
        return deleted
