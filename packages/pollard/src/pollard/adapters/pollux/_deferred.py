"""Budgeted deferred delivery: a pollux batch job as a charged pollard node, settled at collect.

* `governed_defer` charges the job's worst case (every request's estimated input plus
  ``max_tokens`` of output, priced at the batch tier) with `Run.record_charged`: admitted before
  anything is sent, committed with the job node, so the budget counts it at once and durably.
* `governed_collect` records one ``model_call`` node per answer under the job, charged its actual
  usage at the batch tier, then a settlement note that credits the worst case back; all ids are
  deterministic, so collecting twice (or from another process) charges once, and a settled job
  is served from the ledger without a provider call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pollux
from pollard import Node, NodeKind
from pollard.errors import BudgetExceeded, MissingRecording, PollardError
from pollard.meters import PRICE_PROVIDERS, genai_price, priced_models, split_usage, token_usage
from pollux import (
    Config,
    ConfigurationError,
    DeferredHandle,
    DeferredSnapshot,
    OutputCollection,
    Source,
)
from pollux.interaction import (
    BATCH_DISCOUNT,  # one table for pollux's figure and the ledger's charge
    BATCH_FULL_PRICE_CACHE_READS,
    DeferredSettings,
    describe_call,
    generation_keywords,
)

from ._calls import check_config, check_run
from ._estimator import PolluxTokenEstimator
from ._identity import output_from_node, request_identities, result_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pollard import AsyncRun, Run
    from pollux import ResponseSchemaInput

__all__ = [
    "BATCH_DISCOUNT",
    "GovernedJob",
    "batch_price",
    "governed_cancel",
    "governed_collect",
    "governed_defer",
    "governed_inspect",
]

_JOB_VERSION = 1


def batch_price(
    provider: str, model: str | Sequence[str], usage: Mapping[str, int]
) -> Decimal | None:
    """The batch-tier dollar price of ``usage``, or None when genai-prices has no price.

    Every priced field has its batch rate (cache reads and writes by TTL class included, and the
    long-context tier), from genai-prices' batch variant of the model, else the standard price
    times `BATCH_DISCOUNT`, except cache reads on the providers of
    ``pollux.interaction.BATCH_FULL_PRICE_CACHE_READS`` (Gemini, Vertex AI: Google's batch and
    cache discounts do not stack). The provider's own price of an answer
    (``provider_cost_usd``) is not read here: a batch answer's usage has none.

    Args:
        provider: The pollux provider name.
        model: The model name, or names to try in order (the first one priced wins: an Azure
            deployment's served model, its ``Config.pricing_model``, its own name).
        usage: Normalized usage (``input_tokens`` including cached, ``output_tokens``, ...).

    Returns:
        The price in US dollars, or None for an unpriced model (or without ``genai-prices``).
    """
    try:
        import genai_prices
    except ImportError:  # pragma: no cover - the prices extra is installed in the tests
        return None
    for name in (model,) if isinstance(model, str) else model:
        try:
            price, _ = genai_price(
                genai_prices,
                name,
                usage,
                provider_id=PRICE_PROVIDERS.get(provider),
                batch=True,
                batch_discount=BATCH_DISCOUNT.get(provider),
                discount_cache_reads=provider not in BATCH_FULL_PRICE_CACHE_READS,
            )
        except LookupError:
            continue
        return price
    return None


@dataclass(frozen=True)
class GovernedJob:
    """A governed deferred job: the pollux handle plus its ledger node.

    Store ``to_dict()`` (JSON data) to collect in another process with `GovernedJob.from_dict`.

    Attributes:
        handle: The pollux `DeferredHandle`.
        node_id: The job's ``model_call`` node in the pollard ledger.
        run: The label of the run it was recorded in.
    """

    handle: DeferredHandle
    node_id: str
    run: str

    def to_dict(self) -> dict[str, Any]:
        """JSON data for `from_dict`."""
        return {
            "governed_job": _JOB_VERSION,
            "node": self.node_id,
            "run": self.run,
            "handle": self.handle.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GovernedJob:
        """Load a job stored with `to_dict`.

        Raises:
            ConfigurationError: The data is not a stored governed job.
        """
        if not isinstance(data, Mapping) or data.get("governed_job") != _JOB_VERSION:
            raise ConfigurationError(
                "not a governed deferred job (no 'governed_job': 1)",
                hint="pass the JSON that GovernedJob.to_dict() wrote (governed_defer's result)",
            )
        node, run, handle = data.get("node"), data.get("run"), data.get("handle")
        if not isinstance(node, str) or not isinstance(run, str) or not isinstance(handle, dict):
            raise ConfigurationError(
                "a governed deferred job needs 'node', 'run' and 'handle'",
                hint="store the whole GovernedJob.to_dict() output unchanged",
            )
        return cls(DeferredHandle.from_dict(handle), node, run)


def _job_of(job: object) -> GovernedJob:
    if isinstance(job, GovernedJob):
        return job
    if isinstance(job, Mapping):
        return GovernedJob.from_dict(job)
    raise TypeError(f"expected a GovernedJob (or its to_dict()), got {type(job).__name__}")


def _tokens(usage: Mapping[str, int]) -> int:
    return sum(split_usage(usage))


@generation_keywords(DeferredSettings, place_after={"attempt": "provider_options"})
async def governed_defer(
    run: AsyncRun | Run,
    prompts: str | Sequence[str | None] | None = None,
    *,
    sources: Sequence[Source] = (),
    config: Config,
    instructions: str | None = None,
    attempt: int = 0,
    **settings: Unpack[DeferredSettings],
) -> GovernedJob:
    """``pollux.defer`` as one charged ``model_call`` node, refused before submission if too big.

    The job is charged its worst case at once: ``steps`` 1, ``tokens`` the sum over requests of
    the estimated input (`PolluxTokenEstimator`) plus ``max_tokens``, and ``usd`` that volume at
    the batch price (`batch_price`). Every limit of the run is checked with those amounts before
    anything is sent. An unpriced model charges no ``usd``, is marked ``"unpriced": true`` on the
    node, and is refused when the run has a ``usd`` budget. A job already recorded under the
    cursor (the same requests and ``attempt``) is returned without submitting, in every mode
    (so replay never submits); pass another ``attempt`` to submit the same job again.

    Args:
        run: The run to record into.
        prompts: One or more prompts (one request each).
        sources: Sources shared by every prompt.
        config: The pollux configuration.
        instructions: A system-level instruction.
        attempt: pollard's attempt number (submit the same job again as a distinct node).
        **settings: pollux's deferred generation keywords (``output=``, ``temperature=``, ...;
            see :class:`~pollux.interaction.DeferredSettings`). ``max_tokens`` is
            required here: the most output tokens one answer may use bounds the worst case.

    Returns:
        The `GovernedJob` (store ``job.to_dict()`` to collect elsewhere).

    Raises:
        BudgetExceeded: The worst case does not fit a limit (recorded; nothing was sent).
        PollardError: The model is unpriced and the run has a ``usd`` budget.
        ConfigurationError: Invalid arguments, or no ``max_tokens`` (before anything is recorded).
        APIError: The submission failed (nothing is charged).
    """
    arun = check_run(run, "governed_defer")
    config = check_config(config)
    max_tokens = settings.get("max_tokens")
    if max_tokens is None:
        raise ConfigurationError(
            "governed_defer needs max_tokens: it bounds the worst case the budget reserves",
            hint="pass max_tokens=... (the most output tokens one answer may use)",
        )
    call = describe_call(prompts, sources=sources, instructions=instructions, settings=settings)
    requests = request_identities(
        "deferred", config, call.environment, call.inputs, call.requirements
    )
    for index, request in enumerate(requests):
        request["index"] = index
    estimator = PolluxTokenEstimator()
    inputs = sum(estimator.estimate_input_tokens(r) for r in requests)
    worst = {"input_tokens": inputs, "output_tokens": max_tokens * len(requests)}
    # Before submission an Azure deployment is priced by its Config.pricing_model.
    usd = batch_price(config.provider, priced_models(requests[0]), worst)
    charges: dict[str, Any] = {"steps": 1, "tokens": _tokens(worst)}
    meta: dict[str, Any] = {"deferred": "submitted", "worst_case_usage": worst}
    if usd is None:
        meta["unpriced"] = True
    else:
        charges["usd"] = usd
    # Exact text: the settlement credits exactly this (meta charges may be rounded floats).
    meta["reserved"] = {name: str(Decimal(str(value))) for name, value in charges.items()}
    payload = {"pollux": requests[0]["pollux"], "api": "defer", "requests": requests}
    payload["provider"], payload["model"] = config.provider, config.model

    async def submit(_payload: Any) -> dict[str, Any]:
        handle = await pollux.defer(
            [turn.content for turn in call.inputs],
            sources=call.environment.sources,
            instructions=call.environment.instructions,
            config=config,
            **settings,
        )
        return {"handle": handle.to_dict()}

    try:
        node = await arun.record_charged(
            NodeKind.MODEL_CALL,
            payload,
            charges=charges,
            fn=submit,
            attempt=attempt,
            meta=meta,
            unknown=("usd",) if usd is None else (),
        )
    except PollardError as exc:
        if usd is not None or config.provider != "azure_openai" or isinstance(exc, BudgetExceeded):
            raise
        # A usd budget refused the unpriced job: name what prices an Azure deployment.
        exc.hint = (
            f"Config.model {config.model!r} names a deployment: set Config(pricing_model=...) "
            "or POLLUX_AZURE_PRICING_MODEL to the model it serves (e.g. 'gpt-5-mini'), or run "
            "without the usd budget"
        )
        raise
    return GovernedJob(DeferredHandle.from_dict(node.result["handle"]), node.id, arun.label)


def _settlement(job_id: str) -> dict[str, Any]:
    return {"pollux": "deferred_settlement", "job": job_id}


def _job_node(arun: AsyncRun, job: GovernedJob) -> Node:
    node = arun.store.find(job.node_id)
    if node is None or not isinstance(node.result, Mapping) or "handle" not in node.result:
        raise PollardError(
            f"deferred job node {job.node_id} is not in this store",
            hint="collect with a runtime on the ledger the job was submitted to",
        )
    current: Node | None = node
    while current is not None and current.id != arun.root_id:
        current = None if current.parent is None else arun.store.find(current.parent)
    if current is None:
        raise PollardError(
            f"deferred job node {job.node_id} is not in run {arun.label!r}",
            hint=f"collect with the run it was submitted in: runtime.run({job.run!r})",
        )
    return node


async def governed_collect(
    run: AsyncRun | Run,
    job: GovernedJob | Mapping[str, Any],
    *,
    output: ResponseSchemaInput | None = None,
) -> OutputCollection:
    """Collect a terminal governed job and settle its charges, exactly once.

    Records one ``model_call`` node per answer under the job node, charged its actual usage
    (``tokens``, and ``usd`` at the batch tier; failed requests are charged nothing), then a
    ``deferred_settlement`` note under the job that credits the job's worst-case charges, so the
    job's net charge is what the answers used. A job already settled is rebuilt from the ledger
    (no provider call, in every mode), so collecting twice charges once.

    Args:
        run: A run on the ledger the job was recorded in (any process).
        job: The `GovernedJob`, or its ``to_dict()``.
        output: The pydantic model or JSON Schema used at submission.

    Returns:
        The `pollux.OutputCollection`, in prompt order.

    Raises:
        DeferredNotReadyError: The job is still running (nothing is recorded).
        MissingRecording: Replay mode, and the job was not collected into this ledger.
        PollardError: The job node is not in this run's store.
    """
    arun = check_run(run, "governed_collect")
    job = _job_of(job)
    node = _job_node(arun, job)
    requests = node.payload["requests"]
    settle = Node.create(NodeKind.NOTE, node.id, _settlement(node.id))
    if arun.store.find(settle.id) is None:
        if arun.mode == "replay":
            raise MissingRecording(
                f"replay: deferred job {node.id} was not collected into this ledger",
                settle.id,
                f"deferred_settlement job={node.id}",
            )
        await _settle(arun, node, requests, job, output)
    return _served(arun, node, requests, output)


async def _settle(
    arun: AsyncRun,
    node: Node,
    requests: Sequence[Mapping[str, Any]],
    job: GovernedJob,
    output: ResponseSchemaInput | None,
) -> None:
    collection = await pollux.collect_deferred(job.handle, response_schema=output)
    provider, model = node.payload["provider"], node.payload["model"]
    actual: dict[str, Decimal] = {}
    unpriced = False
    for request, answer in zip(requests, collection.outputs, strict=True):
        result = result_of(answer, batch=True)
        usage = token_usage(result) or {}
        failed = answer.metrics.completion_status == "error"
        charges: dict[str, Any] = {}
        meta: dict[str, Any] = {"deferred": "answer", "usage": usage}
        if not failed and usage:
            charges["tokens"] = _tokens(usage)
            # The answer names the model that served it (an Azure deployment's model).
            usd = batch_price(provider, priced_models(request, result) or (model,), usage)
            if usd is None:
                meta["unpriced"] = unpriced = True
            else:
                charges["usd"] = usd
        for name, amount in charges.items():
            actual[name] = actual.get(name, Decimal(0)) + Decimal(amount)
        await arun.record_charged(
            NodeKind.MODEL_CALL,
            dict(request),
            charges=charges,
            result=result,
            parent=node.id,
            meta=meta,
        )
    reserved = {
        name: Decimal(value)
        for name, value in (node.meta.get("reserved") or {}).items()
        if name != "steps"  # the job stays one step
    }
    meta = {
        "deferred": "settled",
        "reserved": {k: str(v) for k, v in reserved.items()},
        "actual": {k: str(v) for k, v in actual.items()},
        "status": collection.status,
    }
    if unpriced:
        meta["unpriced"] = True
    await arun.record_charged(
        NodeKind.NOTE,
        _settlement(node.id),
        charges={name: -amount for name, amount in reserved.items()},
        result={"answers": len(requests)},
        parent=node.id,
        meta=meta,
    )


def _served(
    arun: AsyncRun,
    node: Node,
    requests: Sequence[Mapping[str, Any]],
    output: ResponseSchemaInput | None,
) -> OutputCollection:
    outputs = []
    for request in requests:
        answer = arun.store.get(Node.create(NodeKind.MODEL_CALL, node.id, dict(request)).id)
        outputs.append(output_from_node(answer, output=output))
    return OutputCollection(tuple(outputs))


async def governed_inspect(
    run: AsyncRun | Run, job: GovernedJob | Mapping[str, Any]
) -> DeferredSnapshot:
    """``pollux.inspect_deferred`` for a governed job (a read: nothing is recorded)."""
    check_run(run, "governed_inspect")
    return await pollux.inspect_deferred(_job_of(job).handle)


async def governed_cancel(run: AsyncRun | Run, job: GovernedJob | Mapping[str, Any]) -> None:
    """``pollux.cancel_deferred`` for a governed job; `governed_collect` then releases the rest.

    Cancelling records nothing: the job keeps its worst-case charge until it is collected
    (once terminal, ``cancelled`` or ``partial``), when the answers that finished are charged
    and the worst case is credited back.
    """
    check_run(run, "governed_cancel")
    await pollux.cancel_deferred(_job_of(job).handle)
