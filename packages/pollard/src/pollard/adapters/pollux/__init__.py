"""The pollux bridge: every pollux interaction as a governed, budgeted, replayable pollard step.

``pip install "pollard[pollux]"``. The functions mirror pollux's entry points and take a pollard
run first, an `AsyncRun` or a sync `Run` (pollux is async, so with a sync `Runtime` call them
through ``asyncio.run(...)``; its store I/O then stays on the calling thread):

* `governed_run` (like ``pollux.run``) and `governed_interact` (like ``pollux.interact``) record one
  ``model_call`` node under the run's cursor and return the `pollux.Output`;
* `governed_stream` (like ``pollux.stream``) yields the `pollux.Event` timeline while the step
  runs; the events are kept with the node, so replay yields the same timeline;
* `governed_defer` / `governed_collect` (like ``pollux.defer`` / ``pollux.collect_deferred``,
  with `governed_inspect` and `governed_cancel`): a batch job charged its batch-priced worst case
  at submit (refused before anything is sent when it does not fit), settled to its actual usage
  at collect, exactly once, from any process (see docs/bridge.md);
* `governed_run_many` (like ``pollux.run_many``) makes **each prompt its own step**: the prompts
  run concurrently (at most ``config.request_concurrency`` in flight), each prompt is checked
  against the budgets before its provider call, and a refused or failed prompt becomes an error
  `pollux.Output` while the others keep their answers, exactly like pollux's partial results.

What a node records:

* its **identity payload** is the model-visible request: ``provider``, ``model``, the
  environment (`pollux.Environment.fingerprint`, the instructions, every source's
  ``cache_identity_hash`` and size, the tool names), the input (content, portable history, the
  digest of the continuation, tool results) and the output requirements that are set
  (temperature and top_p in pollard's canonical float form, max_tokens, seed, reasoning, the
  output schema's hash, tool choice, the active provider's options). Connection details
  (``base_url``, keys, timeouts, retries, concurrency) are not part of it, so a recording made
  against one server replays against another; ``use_mock=True`` is (as ``"mock": true``), so mock
  recordings never answer for a real provider.
* its **result** is ``{"text", "output", "usage"}``: ``output`` is ``Output.to_jsonable()``
  without the facts of one dispatch (the measured ``metrics.duration_s`` and the provider's
  response id), so an identical re-run records no result conflict; ``usage`` carries the
  normalized counts every pollard adapter reports (``input_tokens`` and ``output_tokens`` are the
  whole volume; ``cache_read_tokens``, ``cache_write_tokens`` and ``reasoning_tokens`` are
  breakdowns), which `pollard.meters.TokenMeter` and `pollard.meters.CostMeter` charge.

A call that may create an explicit (Gemini ``CachePolicy``) cache is first admitted against the
cache's worst case, creation plus storage for the whole TTL (a ``cache_hold`` note, given back
after the call; a budget that cannot afford it refuses before any provider I/O). A call that
created one records a ``cache_storage`` note under its node, charged ``usd`` for the cache's
creation and its storage for the whole TTL (`cache_storage_price`, `CACHE_STORAGE_PRICES`), so
the run that created a cache pays for it. `governed_refresh_cache` and `governed_delete_cache`
(or pollux's own calls inside `settle_cache_events`) settle a refresh (the extension charged)
and an early delete (the unused storage credited) as ``cache_settlement`` notes.

Replay rebuilds the Output with ``Output.from_jsonable`` (validating structured output into the
pydantic model you pass as ``output=``; its duration is the step's ``meta["duration_s"]``) and
makes no provider call; a request that was not recorded raises `pollard.MissingRecording`. A
continuation comes back from the recorded output, so a replayed tool loop sends the same
continuation on its next turn and is served again.

Failed provider calls raise from `governed_run`, `governed_interact` and `governed_stream` (after
pollard recorded the failed dispatch and charged its estimate); `governed_run_many` records them
the same way and returns them as error outputs. Failed calls are not results: hybrid mode runs them
again, replay raises `pollard.MissingRecording` for them.

Example:
    >>> import asyncio
    >>> from pollard import AsyncRuntime, Budget
    >>> from pollard.adapters.pollux import governed_run_many
    >>> from pollux import Config
    >>> async def main():
    ...     config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
    ...     async with AsyncRuntime() as rt:
    ...         run = rt.run("demo", budget=Budget(steps=10))
    ...         answers = await governed_run_many(run, ["Q1?", "Q2?"], config=config)
    ...         return answers.status, run.report()["spent"]["steps"]
    >>> asyncio.run(main())
    ('ok', 2)
"""

from __future__ import annotations

try:
    import pollux  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed in every test environment
    raise ImportError(
        'pollard.adapters.pollux needs pollux: pip install "pollard[pollux]"'
    ) from exc

from ._cache_charges import (
    CACHE_STORAGE_PRICES,
    cache_storage_price,
    governed_delete_cache,
    governed_refresh_cache,
    settle_cache_events,
)
from ._calls import governed_interact, governed_run
from ._deferred import (
    BATCH_DISCOUNT,
    GovernedJob,
    batch_price,
    governed_cancel,
    governed_collect,
    governed_defer,
    governed_inspect,
)
from ._estimator import PolluxTokenEstimator
from ._fanout import governed_run_many
from ._identity import BRIDGE_VERSION, output_from_node
from ._identity import request_identity as _payload  # noqa: F401  (the identity tests build payloads)
from ._quota import SharedQuota
from ._stream import governed_stream

__all__ = [
    "BATCH_DISCOUNT",
    "BRIDGE_VERSION",
    "CACHE_STORAGE_PRICES",
    "GovernedJob",
    "PolluxTokenEstimator",
    "SharedQuota",
    "batch_price",
    "cache_storage_price",
    "governed_cancel",
    "governed_collect",
    "governed_defer",
    "governed_delete_cache",
    "governed_inspect",
    "governed_interact",
    "governed_refresh_cache",
    "governed_run",
    "governed_run_many",
    "governed_stream",
    "output_from_node",
    "settle_cache_events",
]
