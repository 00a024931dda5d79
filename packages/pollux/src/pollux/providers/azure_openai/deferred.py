"""Deferred delivery for ``provider="azure_openai"``: Azure OpenAI's global batch.

Azure serves OpenAI's Batch API on the resource, on both surfaces the provider speaks
(``<endpoint>/openai/v1/batches`` without an ``api-version``, ``<endpoint>/openai/batches?
api-version=...`` on a dated one), through the same SDK client as the realtime calls. So the
backend is the OpenAI provider's (:class:`pollux.providers.openai.deferred.OpenAIBatches`:
sources uploaded once, one JSONL line per prompt with the realtime body, the lifecycle, status
normalization and result reading), with what Azure changes:

* the job runs on a **Global-Batch** (or Data Zone Batch) deployment, which a standard
  deployment is not: every line's ``body.model`` is ``Config.model``, so a deferred job is
  submitted with ``Config(model=<the batch deployment>)``; Azure takes one deployment per job;
* expiries: Azure takes 14 to 30 days for a batch file's ``expires_after`` (and keeps running a
  job past its 24 hour target rather than expiring it), so the job's uploads live 14 days and
  its result files 30;
* each answer keeps the model it names (``artifacts["model_version"]``), which prices it;
* errors are relabelled ``azure_openai``, with hints that name the deployment, the
  ``api-version`` and the credential (:mod:`.errors`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pollux.errors import PolluxError
from pollux.providers.openai.deferred import OpenAIBatches

from .errors import AzureTarget, relabel, wrap_azure_error

if TYPE_CHECKING:
    from pollux.interaction.deferred import DeferredHandle, DeferredSnapshot
    from pollux.providers._deferred import DeferredItem, DeferredJob, DeferredResults
    from pollux.providers.base import ProviderRequest

__all__ = ["JOB_FILE_TTL_S", "RESULT_FILE_TTL_S", "AzureBatches", "batch_deployment_hint"]

#: Expiry of a job's uploads (sources and the input file): Azure's minimum for batch files.
JOB_FILE_TTL_S = 14 * 24 * 3600
#: Expiry of the result files Azure writes: its maximum.
RESULT_FILE_TTL_S = 30 * 24 * 3600


def batch_deployment_hint(target: AzureTarget) -> str:
    """What to fix when Azure refuses a job's deployment (or the job fails validation)."""
    return (
        f"Deferred jobs run on a Global-Batch (or Data Zone Batch) deployment: pass its name as "
        f"Config.model (now {target.deployment!r}), a deployment of the resource at "
        f"{target.endpoint}; a standard deployment does not take batch jobs. With "
        f"{target.version_text}, check that it serves batches (leave Config.api_version unset "
        "for the v1 API)."
    )


class AzureBatches(OpenAIBatches):
    """The global batch backend of one :class:`~.provider.AzureOpenAIProvider`.

    Args:
        client: Returns the provider's SDK client (built lazily).
        compile_request: The provider's realtime ``compile``.
        target: Returns what hints name (endpoint, deployment, api-version, credential kind).
        model: The configured model (the batch deployment).
        timeout_s: The request timeout, quoted in error hints.
    """

    SERVICE = "Azure OpenAI"
    SOURCE_TTL_S = JOB_FILE_TTL_S
    INPUT_TTL_S = JOB_FILE_TTL_S
    RESULT_TTL_S = RESULT_FILE_TTL_S
    # A line's model is the batch deployment; its answer names the model that served it.
    SERVED_MODEL = True

    def __init__(
        self,
        client: Callable[[], Any],
        compile_request: Callable[[ProviderRequest], Mapping[str, Any]],
        *,
        target: Callable[[], AzureTarget],
        model: str,
        timeout_s: float,
    ) -> None:
        super().__init__(client, compile_request, model=model, timeout_s=timeout_s)
        self._target = target

    def _wrap(self, exc: Exception, phase: str) -> PolluxError:
        target = self._target()
        error = wrap_azure_error(exc, target=target, phase=phase, timeout_s=self._timeout_s)
        if phase == "batch_submit" and getattr(error, "status_code", None) in (400, 404):
            text = str(error).lower()
            if "deployment" in text or "model" in text:
                error.hint = batch_deployment_hint(target)
        return error

    def _relabel_item(self, item: DeferredItem) -> DeferredItem:
        error = item.error
        if error is None:
            return item
        relabel(error)
        if item.provider_status == "failed" or "deployment" in str(error).lower():
            # The job failed validation (a deployment that takes no batches, say), or the
            # line named a deployment Azure does not have.
            error.hint = batch_deployment_hint(self._target())
        return replace(item, error=error)

    async def submit_deferred(
        self, requests: Sequence[ProviderRequest], request_ids: Sequence[str]
    ) -> DeferredJob:
        """Upload sources and the JSONL input, then create the batch (all or nothing)."""
        try:
            return await super().submit_deferred(requests, request_ids)
        except PolluxError as exc:
            # Limits checked before any I/O name OpenAI's provider in their text.
            relabel(exc)
            raise

    async def inspect_deferred(self, handle: DeferredHandle) -> DeferredSnapshot:
        """Retrieve and normalize the batch; release the job's uploads once it ended."""
        try:
            return await super().inspect_deferred(handle)
        except PolluxError as exc:
            relabel(exc)
            raise

    async def collect_deferred(self, handle: DeferredHandle) -> DeferredResults:
        """The snapshot and, for an ended batch, every request's outcome (relabelled)."""
        try:
            results = await super().collect_deferred(handle)
        except PolluxError as exc:
            relabel(exc)
            raise
        if results.items is None:
            return results
        return replace(results, items=tuple(self._relabel_item(i) for i in results.items))

    async def cancel_deferred(self, handle: DeferredHandle) -> None:
        """Ask Azure to cancel; a batch that already ended is left alone."""
        try:
            await super().cancel_deferred(handle)
        except PolluxError as exc:
            relabel(exc)
            raise
