"""The Gemini provider's error mapping, relabelled for Vertex AI, with Vertex's hints.

Vertex AI answers with Google's error shape and the SDK raises the same exceptions as on the
Developer API, so the mapping is the Gemini provider's
(:func:`pollux.providers.gemini.errors.wrap_gemini_error`). What differs is the name on the
error and what to fix: a Vertex call is addressed by project, location and publisher model and
authorised by Google Cloud credentials (Application Default Credentials or
``Config(credentials=...)``) holding an IAM role on the project, so the hints name those
settings instead of ``GEMINI_API_KEY``. Failures of ``google.auth`` itself (no Application
Default Credentials, a refresh refused) are mapped here too: they happen before any request.
"""

from __future__ import annotations

from dataclasses import dataclass

from pollux.errors import APIError, ConfigurationError, PolluxError
from pollux.providers._errors import relabel_error
from pollux.providers.gemini.errors import PROVIDER as GEMINI
from pollux.providers.gemini.errors import wrap_gemini_error

__all__ = ["ADC_HINT", "PROVIDER", "VertexTarget", "relabel", "wrap_vertex_error"]

PROVIDER = "vertex"

#: What to do when no credentials can be found or refreshed.
ADC_HINT = (
    "Set up Application Default Credentials (gcloud auth application-default login; or "
    "GOOGLE_APPLICATION_CREDENTIALS=<service account key file>; or run where the metadata "
    "server answers), or pass Config(credentials=<google.auth credentials>)."
)


@dataclass(frozen=True, slots=True)
class VertexTarget:
    """What a Vertex hint names: project, location, model, endpoint and kind of credentials."""

    project: str
    location: str
    model: str
    endpoint: str
    injected: bool  # Config(credentials=...) rather than the Application Default Credentials

    @property
    def credential_text(self) -> str:
        """How the hint names the credentials in use."""
        return "Config(credentials=...)" if self.injected else "the Application Default Credentials"


def _auth_hint(target: VertexTarget, status: int | None) -> str:
    if status == 403:
        return (
            f"{target.credential_text} may not call Vertex AI in project {target.project!r}: "
            "grant the identity the 'Vertex AI User' role (roles/aiplatform.user) on the "
            "project, enable the Vertex AI API (aiplatform.googleapis.com) there, and check "
            "that Config.project (or GOOGLE_CLOUD_PROJECT) names the right project."
        )
    return f"Vertex AI refused {target.credential_text} (expired or invalid token). {ADC_HINT}"


def _hint_for(error: PolluxError, target: VertexTarget) -> str | None:
    category = getattr(error, "error_category", None)
    status = getattr(error, "status_code", None)
    text = str(error).lower()
    if status in (401, 403) and "cachedcontent" not in text:
        return _auth_hint(target, status)
    if category == "auth_refreshable":
        return _auth_hint(target, None)
    if status == 404 and ("model" in text or "publisher" in text):
        return (
            f"Vertex AI has no model {target.model!r} in location {target.location!r} of "
            f"project {target.project!r}: not every model is served in every region. Pass "
            "Config(location=...) (or GOOGLE_CLOUD_LOCATION) where it is (many are in "
            "'global' and 'us-central1'), or a model name Vertex AI lists (Model Garden)."
        )
    if status == 404 and "project" in text:
        return (
            f"Vertex AI does not know project {target.project!r}: check Config.project (or "
            "GOOGLE_CLOUD_PROJECT) and that the Vertex AI API is enabled in it."
        )
    if status == 429:
        return (
            f"Vertex AI is throttling project {target.project!r} in {target.location!r} (its "
            "per-minute quota or shared capacity): lower Config.request_concurrency, raise "
            "RetryPolicy.max_attempts / max_elapsed_s, or request more quota (IAM & Admin > "
            "Quotas)."
        )
    if category == "connect":
        return (
            f"Could not reach {target.endpoint}: check Config.location (or "
            "GOOGLE_CLOUD_LOCATION), base_url / GOOGLE_VERTEX_BASE_URL for a gateway or a "
            "private endpoint, and the network path to it."
        )
    return None


def relabel(error: PolluxError, target: VertexTarget | None = None) -> PolluxError:
    """Put ``vertex`` on an error the Gemini mapping built, and Vertex's hint.

    The error is changed in place and returned; a message the Gemini code begins with its own
    name (``gemini generate failed``, ``provider='gemini' ...``) names Vertex instead.
    """
    return relabel_error(
        error,
        built_by=GEMINI,
        provider=PROVIDER,
        hint=None if target is None else lambda relabelled: _hint_for(relabelled, target),
    )


def _auth_failure(exc: BaseException, phase: str) -> PolluxError | None:
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "DefaultCredentialsError" in names:
        return ConfigurationError(
            f"provider='vertex' found no Google Cloud credentials: {exc}", hint=ADC_HINT
        )
    if "RefreshError" in names or "GoogleAuthError" in names:
        transient = "TransportError" in names
        return APIError(
            f"vertex {phase} failed: the credentials could not be refreshed "
            f"({type(exc).__name__}: {exc})",
            hint=(
                "The token endpoint could not be reached; retrying usually helps."
                if transient
                else ADC_HINT
            ),
            retryable=transient,
            provider=PROVIDER,
            phase="auth",
            error_category="network" if transient else "auth_refreshable",
        )
    return None


def wrap_vertex_error(
    exc: BaseException, *, target: VertexTarget, phase: str = "generate", timeout_s: float = 300.0
) -> PolluxError:
    """Translate one exception around a Vertex AI call into a pollux error.

    Args:
        exc: The exception (a pollux error is relabelled, not rebuilt).
        target: Project, location, model, endpoint and credential kind, for the hint.
        phase: The failed operation.
        timeout_s: The configured request timeout, quoted in the timeout hint.
    """
    auth = _auth_failure(exc, phase)
    if auth is not None:
        return auth
    return relabel(wrap_gemini_error(exc, phase=phase, timeout_s=timeout_s), target)
