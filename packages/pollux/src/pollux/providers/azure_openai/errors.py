"""The OpenAI provider's error mapping, relabelled for Azure OpenAI, with Azure's hints.

Azure answers with the OpenAI error shape (and the same SDK exceptions), so the mapping is the
OpenAI provider's (:func:`pollux.providers.openai.errors.wrap_openai_error`). What differs is
the name on the error and what to fix: an Azure call is addressed by endpoint, deployment and
``api-version`` and authorised by a resource key or an Entra ID token, so the hints name those
settings instead of ``OPENAI_API_KEY`` and ``Config.model``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pollux.errors import PolluxError
from pollux.providers._errors import relabel_error
from pollux.providers.openai.errors import PROVIDER as OPENAI
from pollux.providers.openai.errors import wrap_openai_error

__all__ = ["PROVIDER", "TOKEN_HINT", "AzureTarget", "relabel", "wrap_azure_error"]

PROVIDER = "azure_openai"

#: What to check when an Entra ID token cannot be had or is refused.
TOKEN_HINT = (
    "Check the Entra ID credential behind Config(credentials=...) (az login, a managed "
    "identity, or AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET), that its scope is "
    "https://cognitiveservices.azure.com/.default, and that the identity holds the "
    "'Cognitive Services OpenAI User' role on the resource."
)


@dataclass(frozen=True, slots=True)
class AzureTarget:
    """What an Azure hint names: the endpoint, deployment, api-version and kind of credential."""

    endpoint: str
    deployment: str
    api_version: str | None  # None: the v1 API
    entra: bool  # an Entra ID token provider rather than a key

    @property
    def version_text(self) -> str:
        """How the hint names the API version in use."""
        if self.api_version is None:
            return "the v1 API (<endpoint>/openai/v1, no api-version)"
        return f"api-version {self.api_version!r}"


def _auth_hint(target: AzureTarget) -> str:
    if target.entra:
        return f"Azure refused the Entra ID token. {TOKEN_HINT}"
    return (
        "Check the key: set AZURE_OPENAI_API_KEY (or pass api_key=...) to a key of the resource "
        f"at {target.endpoint} (Azure portal: Keys and Endpoint), and that base_url is that "
        "resource's endpoint; or authenticate with Config(credentials=<an Entra ID token "
        "provider>)."
    )


def _hint_for(error: PolluxError, target: AzureTarget) -> str | None:
    category = getattr(error, "error_category", None)
    status = getattr(error, "status_code", None)
    text = str(error).lower()
    if category == "auth_refreshable" or status in (401, 403):
        return _auth_hint(target)
    if "api-version" in text or "api version" in text:
        return (
            f"Azure rejected {target.version_text}: pass Config(api_version=...) (or "
            "OPENAI_API_VERSION) with a version that serves the Responses API, such as "
            "'2025-04-01-preview', or leave it unset for the v1 API."
        )
    if "deployment" in text or (status == 404 and "model" in text):
        return (
            f"No deployment {target.deployment!r} at {target.endpoint}: Config.model is the "
            "deployment name (Azure AI Foundry: Deployments), and base_url must be the resource "
            "that holds it."
        )
    if status == 404:
        return (
            f"Azure found no such resource at {target.endpoint} with {target.version_text}: "
            "check base_url (https://<resource>.openai.azure.com) and Config.api_version."
        )
    if category == "connect":
        return (
            f"Could not reach {target.endpoint}: check base_url (or AZURE_OPENAI_ENDPOINT) and "
            "the network path to the resource (private endpoints need their network)."
        )
    return None


def relabel(error: PolluxError, target: AzureTarget | None = None) -> PolluxError:
    """Put ``azure_openai`` on an error the OpenAI mapping built, and Azure's hint.

    The error is changed in place and returned; a message the OpenAI code begins with its own
    name (``openai generate failed``, ``provider='openai' ...``) names Azure instead.
    """
    return relabel_error(
        error,
        built_by=OPENAI,
        provider=PROVIDER,
        hint=None if target is None else lambda relabelled: _hint_for(relabelled, target),
    )


def wrap_azure_error(
    exc: BaseException, *, target: AzureTarget, phase: str = "generate", timeout_s: float = 300.0
) -> PolluxError:
    """Translate one exception around an Azure OpenAI call into a pollux error.

    Args:
        exc: The exception (a pollux error is relabelled, not rebuilt).
        target: The endpoint, deployment, api-version and credential kind, for the hint.
        phase: The failed operation.
        timeout_s: The configured request timeout, quoted in the timeout hint.
    """
    return relabel(wrap_openai_error(exc, phase=phase, timeout_s=timeout_s), target)
