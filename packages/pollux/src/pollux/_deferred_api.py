"""The deferred-delivery entry points: defer, inspect/collect/cancel_deferred.

Thin shells over the shared Session of the running event loop, like the realtime entry points.
The lifecycle calls take only the handle: the provider and model come from it, the API key from
the provider's usual environment variable (or ``.env``), so collection can run in another
process than submission.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pollux._api import _loop_sessions
from pollux._engine.deferred import handle_config
from pollux.interaction.settings import DeferredSettings, generation_keywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pollux.config import Config
    from pollux.interaction.deferred import DeferredHandle, DeferredSnapshot
    from pollux.interaction.output import OutputCollection
    from pollux.source import Source

__all__ = ["cancel_deferred", "collect_deferred", "defer", "inspect_deferred"]


@generation_keywords(DeferredSettings)
async def defer(
    prompts: str | Sequence[str | None] | None = None,
    *,
    sources: Sequence[Source] = (),
    config: Config,
    instructions: str | None = None,
    **settings: Unpack[DeferredSettings],
) -> DeferredHandle:
    """Submit one or more deferred requests and return a serializable handle.

    The deferred front door: submit a single prompt or a source-pattern collection on a
    provider-side timeline (OpenAI's Batch API; the mock provider's in-memory timeline offline),
    then :func:`inspect_deferred` and :func:`collect_deferred` later. Collection returns an
    :class:`OutputCollection`, the same shape as :func:`run_many`. Every prompt sees every
    source; each prompt becomes one request with a stable id (``pollux-000000``, ...).

    Tool calling, continuation, and persistent caching are out of scope for deferred delivery
    and are intentionally not part of this surface.

    Args:
        prompts: One or more prompts to submit.
        sources: Stable sources shared across the prompts.
        config: Configuration specifying provider and model.
        instructions: Optional system-level instruction.
        **settings: The generation keywords, each optional (``output=``, ``temperature=``,
            ``max_tokens=``, ...; no ``tool_choice``): see
            :class:`~pollux.interaction.DeferredSettings`. Pass the same ``output``
            schema to :func:`collect_deferred` to rehydrate.

    Returns:
        A serializable :class:`DeferredHandle` for the submitted job. Persist
        ``handle.to_dict()`` in full.

    Raises:
        ConfigurationError: No prompt, a provider without deferred delivery, or an unsupported
            option (all before any I/O).
        APIError: The submission failed after the configured retries (nothing is left behind).

    Example:
        handle = await defer(["Q1?", "Q2?"], sources=[source], config=config)
        Path("job.json").write_text(json.dumps(handle.to_dict()))
    """
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        return await session.defer(prompts, sources=sources, instructions=instructions, **settings)
    finally:
        state.release(session)


async def inspect_deferred(
    handle: DeferredHandle,
) -> DeferredSnapshot:
    """Inspect the current state of a deferred job.

    The snapshot's ``status`` is one of ``queued``, ``running``, ``cancelling``,
    ``completed``, ``partial``, ``failed``, ``cancelled`` or ``expired``; branch on
    ``snapshot.is_terminal``, not on the provider's raw status.

    Args:
        handle: The deferred handle returned by :func:`defer`.

    Returns:
        The normalized :class:`DeferredSnapshot`.

    Raises:
        ConfigurationError: The handle is not usable here (edited, from an incompatible pollux
            version, or its provider's API key is not set).
        APIError: The provider could not be asked after the configured retries.
    """
    config = handle_config(handle)
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        return await session.inspect_deferred(handle)
    finally:
        state.release(session)


async def collect_deferred(
    handle: DeferredHandle,
    *,
    response_schema: type[Any] | dict[str, Any] | None = None,
) -> OutputCollection:
    """Collect a terminal deferred job into an :class:`OutputCollection`.

    Returns the same shape as :func:`run_many`: one :class:`Output` per submitted request, in
    submission order. Each output's ``diagnostics.raw["deferred"]`` carries the job id and
    per-item status; a request that failed (or was cancelled or expired) is an Output with
    ``metrics.completion_status == "error"``, and the collection's ``status`` is ``"partial"``.
    Collecting again returns the same results while the provider keeps them.

    Args:
        handle: The deferred handle returned by :func:`defer`.
        response_schema: Optional Pydantic model or JSON Schema for structured output
            rehydration. Must match the schema used at submission time.

    Returns:
        The :class:`OutputCollection`, in prompt order.

    Raises:
        DeferredNotReadyError: The job is still active (the error carries the snapshot).
        ConfigurationError: ``response_schema`` differs from the submitted schema, or the
            handle is not usable here.
        APIError: The provider could not be asked after the configured retries.
    """
    config = handle_config(handle)
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        return await session.collect_deferred(handle, response_schema=response_schema)
    finally:
        state.release(session)


async def cancel_deferred(
    handle: DeferredHandle,
) -> None:
    """Request provider-side cancellation for a deferred job.

    The final status is still provider-driven: inspect until ``is_terminal`` (``cancelled``, or
    ``partial`` when some requests finished first). Cancelling a job that already ended does
    nothing.

    Args:
        handle: The deferred handle returned by :func:`defer`.

    Raises:
        ConfigurationError: The handle is not usable here.
        APIError: The provider could not be asked after the configured retries.
    """
    config = handle_config(handle)
    state = _loop_sessions(config)
    session = state.acquire(config)
    try:
        await session.cancel_deferred(handle)
    finally:
        state.release(session)
