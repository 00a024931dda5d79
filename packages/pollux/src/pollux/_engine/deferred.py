"""Deferred delivery in the engine: gate, validate, submit, inspect, collect, cancel.

Everything provider-neutral lives here; the wire belongs to the provider's
:class:`~pollux.providers._deferred.DeferredBackend`. The order mirrors the realtime path:

1. Gate: the provider must declare ``deferred_delivery`` *and* implement the backend protocol,
   or ConfigurationError (with a hint) is raised before any I/O.
2. Plan: the same capability and input checks as ``run_many`` (``plan_calls``), still no I/O.
3. Submit through the backend under the config's retry policy, then build the
   :class:`~pollux.interaction.deferred.DeferredHandle`. Its ``provider_state`` carries the
   backend's data plus ``format`` (the handle layout version, checked on every lifecycle call so
   a handle from an incompatible version fails loudly) and ``backend`` (``"mock"`` or the
   provider name, so lifecycle calls reach the same backend).
4. Collect: check the schema fingerprint (before any I/O), read the results, raise
   :class:`~pollux.errors.DeferredNotReadyError` while the job is active, map items by request id
   and build one Output per prompt, in prompt order. A request the provider did not report
   becomes a failed Output rather than an exception, so the other answers are kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pollux._engine.assemble import parse_structured, structured_facets
from pollux._engine.plan import plan_calls
from pollux._engine.retry import raise_stamped, with_retries
from pollux._pricing import call_cost
from pollux._telemetry import record_deferred_spans
from pollux.config import API_KEY_ENV_VARS, KEY_MISSING, Config, resolve_api_key
from pollux.errors import APIError, ConfigurationError, DeferredNotReadyError, InternalError
from pollux.interaction.call import requirements_from
from pollux.interaction.deferred import DeferredHandle
from pollux.interaction.input import Input
from pollux.interaction.output import (
    Diagnostics,
    Metrics,
    Output,
    OutputCollection,
    Usage,
    completion_status_for,
    error_output,
    error_payload,
)
from pollux.interaction.requirements import OutputRequirements, response_schema_hash
from pollux.providers._deferred import DeferredBackend, DeferredItem, request_ids
from pollux.providers.base import PreparedSources, ProviderRequest

if TYPE_CHECKING:
    from pollux._engine.execute import Runtime
    from pollux.interaction.deferred import DeferredSnapshot
    from pollux.interaction.environment import Environment
    from pollux.providers.base import Provider

__all__ = [
    "HANDLE_FORMAT",
    "MOCK_BACKEND",
    "cancel",
    "check_handle",
    "collect",
    "deferred_backend",
    "handle_config",
    "inspect",
    "submit",
]

#: The layout version of ``DeferredHandle.provider_state``; bump it when the layout changes.
HANDLE_FORMAT = 1
#: ``provider_state["backend"]`` of jobs that ran on the offline mock provider.
MOCK_BACKEND = "mock"
_ENGINE_KEYS = ("format", "backend")

T = TypeVar("T")


def deferred_backend(provider: Provider, config: Config) -> DeferredBackend:
    """The provider's deferred backend, or ConfigurationError (no I/O)."""
    caps = provider.capabilities_for(config.model)
    if not caps.deferred_delivery or not isinstance(provider, DeferredBackend):
        raise ConfigurationError(
            f"{provider.name} does not support deferred delivery "
            "(defer/inspect_deferred/collect_deferred/cancel_deferred)",
            hint="Use provider='openai' (Batch API), Config(use_mock=True) to work offline, "
            "or run_many() for realtime answers.",
        )
    return provider


def _backend_name(config: Config) -> str:
    return MOCK_BACKEND if config.use_mock else config.provider


def handle_config(handle: DeferredHandle) -> Config:
    """The Config a lifecycle call uses for ``handle``: its provider, model and usual API key.

    Raises:
        ConfigurationError: The handle is not a pollux handle, or its provider's API key is not
            set in this process.
    """
    _require_handle(handle)
    state = _checked_state(handle)
    mock = state["backend"] == MOCK_BACKEND
    if not mock and handle.provider in API_KEY_ENV_VARS and not resolve_api_key(handle.provider):
        # Config's own hint says "pass api_key=...", which these calls cannot take.
        env_var = API_KEY_ENV_VARS[handle.provider]
        raise ConfigurationError(
            f"{KEY_MISSING}{handle.provider} to reach deferred job {handle.job_id!r}",
            hint=f"Lifecycle calls take only the handle and read {env_var} (or a .env file): "
            "set it in this process, or call the method on a Session whose Config has "
            "api_key=..., e.g. Session(config).collect_deferred(handle).",
        )
    scope: dict[str, str] = {}
    parts = handle.job_id.split("/")
    if not mock and len(parts) > 4 and parts[0] == "projects" and parts[2] == "locations":
        # A job named under a cloud project and location (Vertex AI) is reached there.
        scope = {"project": parts[1], "location": parts[3]}
    return Config(
        provider=handle.provider,  # type: ignore[arg-type]
        model=handle.model,
        use_mock=mock,
        **scope,  # type: ignore[arg-type]
    )


def _require_handle(handle: object) -> None:
    if not isinstance(handle, DeferredHandle):
        raise ConfigurationError(
            f"Expected a DeferredHandle, got {type(handle).__name__}",
            hint="Pass the handle defer() returned, or DeferredHandle.from_dict(saved).",
        )


def _checked_state(handle: DeferredHandle) -> dict[str, Any]:
    state = handle.provider_state
    version = state.get("format") if isinstance(state, Mapping) else None
    if state is None or version != HANDLE_FORMAT:
        found = "no handle format" if version is None else f"handle format {version!r}"
        raise ConfigurationError(
            f"DeferredHandle {handle.job_id!r} was not written by this version of pollux "
            f"({found}; this version reads format {HANDLE_FORMAT})",
            hint="Persist handle.to_dict() unchanged (including provider_state), and collect "
            "with the pollux version that submitted the job.",
        )
    backend = state.get("backend")
    if backend not in (MOCK_BACKEND, handle.provider):
        raise ConfigurationError(
            f"DeferredHandle {handle.job_id!r} names backend {backend!r} for provider "
            f"{handle.provider!r}",
            hint="Persist handle.to_dict() unchanged; the handle was edited or mixed up.",
        )
    return dict(state)


def check_handle(handle: DeferredHandle, config: Config) -> None:
    """Check that ``handle`` belongs to this config's provider (and mock-ness); no I/O."""
    _require_handle(handle)
    state = _checked_state(handle)
    if handle.provider != config.provider or state["backend"] != _backend_name(config):
        where = "the mock provider" if state["backend"] == MOCK_BACKEND else handle.provider
        raise ConfigurationError(
            f"This deferred job ran on {where}, but the Session is configured for "
            f"{'the mock provider' if config.use_mock else config.provider}",
            hint="Use the module-level functions (inspect_deferred(handle), ...), which pick "
            "the provider from the handle, or a Session with the handle's provider.",
        )


async def _retrying(rt: Runtime, phase: str, fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return await with_retries(fn, rt.config.retry)
    except DeferredNotReadyError:
        raise
    except Exception as exc:
        raise_stamped(exc, provider=rt.provider.name, phase=phase, call_idx=None)


async def submit(
    rt: Runtime,
    environment: Environment,
    inputs: Sequence[Input],
    requirements: OutputRequirements,
) -> DeferredHandle:
    """Validate (no I/O), submit one job and return its handle."""
    provider = rt.provider
    backend = deferred_backend(provider, rt.config)
    if environment.tools or requirements.tool_choice is not None:
        raise ConfigurationError(
            "Deferred delivery does not support tool calling",
            hint="Run tool loops with interact(); defer() is for one-shot prompts.",
        )
    if environment.cache is not None and environment.cache != "none":
        raise ConfigurationError(
            "Deferred delivery does not support caching preferences",
            hint="Drop the cache setting; batch pricing already applies to deferred jobs.",
        )
    plan = plan_calls(provider, rt.config, environment, inputs, requirements)
    ids = request_ids(len(plan.requests))
    job = await _retrying(rt, "batch_submit", lambda: backend.submit_deferred(plan.requests, ids))
    clash = [key for key in _ENGINE_KEYS if key in job.provider_state]
    if clash:
        raise InternalError(
            f"{provider.name} deferred backend used reserved provider_state keys {clash}",
            hint="This is a pollux bug; please report it.",
        )
    state = {"format": HANDLE_FORMAT, "backend": _backend_name(rt.config), **job.provider_state}
    return DeferredHandle(
        job_id=job.job_id,
        provider=provider.name,
        model=job.model,
        request_count=len(ids),
        submitted_at=job.submitted_at,
        schema_hash=requirements.output_schema_hash(),
        provider_state=state,
    )


async def inspect(rt: Runtime, handle: DeferredHandle) -> DeferredSnapshot:
    """The job's normalized snapshot."""
    check_handle(handle, rt.config)
    backend = deferred_backend(rt.provider, rt.config)
    return await _retrying(rt, "batch_status", lambda: backend.inspect_deferred(handle))


async def cancel(rt: Runtime, handle: DeferredHandle) -> None:
    """Request provider-side cancellation."""
    check_handle(handle, rt.config)
    backend = deferred_backend(rt.provider, rt.config)
    await _retrying(rt, "batch_cancel", lambda: backend.cancel_deferred(handle))


def _collect_requirements(
    handle: DeferredHandle, response_schema: type[Any] | dict[str, Any] | None
) -> OutputRequirements:
    requirements = requirements_from({"output": response_schema})
    if response_schema is None:
        return requirements
    if handle.schema_hash is None:
        raise ConfigurationError(
            "collect_deferred() got response_schema, but the job was submitted without output=",
            hint="Omit response_schema (the answers are text), or submit again with output=.",
        )
    if response_schema_hash(response_schema) != handle.schema_hash:
        raise ConfigurationError(
            "response_schema does not match the schema the job was submitted with",
            hint="Pass the same schema you gave defer(output=...), or omit response_schema and "
            "parse output.text yourself.",
        )
    return requirements


async def collect(
    rt: Runtime,
    handle: DeferredHandle,
    response_schema: type[Any] | dict[str, Any] | None = None,
) -> OutputCollection:
    """Collect a terminal job into an OutputCollection, in prompt order."""
    check_handle(handle, rt.config)
    requirements = _collect_requirements(handle, response_schema)
    backend = deferred_backend(rt.provider, rt.config)
    results = await _retrying(rt, "batch_collect", lambda: backend.collect_deferred(handle))
    snapshot = results.snapshot
    if not snapshot.is_terminal or results.items is None:
        raise DeferredNotReadyError(snapshot)
    ids = request_ids(handle.request_count)
    positions = {request_id: index for index, request_id in enumerate(ids)}
    found: dict[str, DeferredItem] = {}
    for item in results.items:
        if item.request_id not in positions:
            raise InternalError(
                f"{handle.provider} job {handle.job_id} returned an unknown request id "
                f"{item.request_id!r}",
                hint="The job's results do not belong to this handle; check that the handle "
                "was not edited.",
            )
        if item.request_id in found:
            raise InternalError(
                f"{handle.provider} job {handle.job_id} returned request id "
                f"{item.request_id!r} twice",
                hint="This is a provider or pollux bug; please report it.",
            )
        found[item.request_id] = item
    outputs = [
        _output(
            handle,
            snapshot,
            found.get(request_id) or _missing(handle, snapshot, request_id),
            index,
            requirements,
        )
        for index, request_id in enumerate(ids)
    ]
    record_deferred_spans(handle, snapshot, outputs)
    return OutputCollection(outputs=tuple(outputs), prompt_indexes=tuple(range(len(outputs))))


def _missing(handle: DeferredHandle, snapshot: DeferredSnapshot, request_id: str) -> DeferredItem:
    status = snapshot.status if snapshot.status in ("cancelled", "expired") else "failed"
    return DeferredItem(
        request_id=request_id,
        status=status,
        error=APIError(
            f"{handle.provider} reported no result for request {request_id} "
            f"(job status {snapshot.provider_status!r})",
            hint="Submit the prompt again with defer() (or run it with run()).",
            retryable=False,
            provider=handle.provider,
            phase="batch_collect",
            error_category=status if status != "failed" else "missing_result",
        ),
    )


def _provenance(
    handle: DeferredHandle,
    snapshot: DeferredSnapshot,
    item: DeferredItem,
    finish_reason: str | None,
) -> dict[str, Any]:
    return {
        "job_id": handle.job_id,
        "request_id": item.request_id,
        "status": item.status,
        "error": None if item.error is None else error_payload(item.error),
        "provider_status": item.provider_status,
        "finish_reason": finish_reason,
        "submitted_at": handle.submitted_at,
        "completed_at": snapshot.completed_at,
    }


def _output(
    handle: DeferredHandle,
    snapshot: DeferredSnapshot,
    item: DeferredItem,
    index: int,
    requirements: OutputRequirements,
) -> Output:
    response = item.response
    if item.status != "succeeded" or response is None:
        error = item.error or APIError(
            f"request {item.request_id} of job {handle.job_id} did not succeed ({item.status})",
            hint="Submit the prompt again with defer() (or run it with run()).",
            retryable=False,
            provider=handle.provider,
            phase="batch_collect",
            error_category=item.status,
        )
        if isinstance(error, APIError) and error.call_idx is None:
            error.call_idx = index
        ran = item.status == "failed"
        return error_output(
            error,
            n_calls=1 if ran else 0,
            extra={"deferred": _provenance(handle, snapshot, item, None)},
        )
    request = ProviderRequest(
        model=handle.model,
        instructions=None,
        sources=PreparedSources(),
        tools=(),
        input=Input(content=item.request_id),
        requirements=requirements,
    )
    structured, structured_error = parse_structured(request, response)
    raw: dict[str, Any] = {
        "response": response.to_jsonable(),
        "deferred": _provenance(handle, snapshot, item, response.finish_reason),
    }
    status = completion_status_for(response.finish_reason)
    if structured_error is not None:
        raw.update(
            structured_facets(
                structured_error, provider=handle.provider, finish_reason=response.finish_reason
            )
        )
        status = "error"
    usage = response.usage if response.usage is not None else Usage(reported=False)
    # A batch answer is billed at the batch tier.
    # A deployment's answer (Azure OpenAI) is priced by the model it names.
    cost, saved = call_cost(
        handle.provider,
        handle.model,
        usage,
        batch=True,
        served=(response.artifacts or {}).get("model_version"),
    )
    return Output(
        text=response.text,
        structured=structured,
        reasoning=response.reasoning,
        tool_calls=response.tool_calls,
        usage=usage,
        metrics=Metrics(
            duration_s=0.0,
            finish_reason=response.finish_reason,
            completion_status=status,
            cache_hit_ratio=(
                (usage.cached_tokens or 0) / usage.input_tokens
                if usage.reported and usage.input_tokens
                else None
            ),
            cost_usd=None if cost is None else float(cost),
            cache_savings_usd=None if saved is None else float(saved),
        ),
        diagnostics=Diagnostics(raw=raw),
    )
