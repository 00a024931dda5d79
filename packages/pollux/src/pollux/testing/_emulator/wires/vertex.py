"""Vertex AI's Gemini endpoints, as ``google-genai`` speaks them with ``vertexai=True``.

Mounted as ``"vertex"``: ``emu.base_url("vertex")`` is ``.../vertex``, what
``genai.Client(vertexai=True, project=..., location=..., http_options={"base_url": ...})``
(or ``GOOGLE_VERTEX_BASE_URL``) expects; the SDK adds the API version (``v1beta1`` by
default; ``v1`` is served too) and the ``projects/{project}/locations/{location}/`` prefix:

* ``publishers/google/models/{model}:generateContent``, ``:streamGenerateContent``
  (``?alt=sse``) and ``:countTokens``;
* ``cachedContents`` (create, list, get, update, delete), kept per project and location;
* ``batchPredictionJobs`` (create, get, list, cancel, delete): batch prediction reading its
  JSONL from, and writing predictions to, the ``"gcs"`` wire's Cloud Storage
  (:mod:`._vertex_batches`).

Credentials: ``Authorization: Bearer <access token>``. A request without one is refused with
Google's 401 ``UNAUTHENTICATED``; with ``Emulator(api_key=...)`` set, the token must equal it.
``emu.state("vertex").projects`` (a set) limits the projects the token may use: any other is
Vertex's 403 ``PERMISSION_DENIED`` naming ``aiplatform.endpoints.predict``. A model outside
``Emulator(models=...)`` is Vertex's 404 ``Publisher Model ... was not found``.

``POST /vertex/token`` is an OAuth 2 token endpoint (what Google's ``token_uri`` is to
``google.auth``), so Application Default Credentials of type ``authorized_user`` whose
``token_uri`` points there refresh offline: it answers ``Emulator(api_key=...)`` (or
``ya29.emulated-access-token``) as the access token, valid for an hour, and counts the
refreshes in ``emu.state("vertex").tokens_issued``. The bodies and
their content logic are the Gemini wire's (:mod:`._gemini_generate`, :mod:`._gemini_caches`),
with their own state per wire.
"""

from __future__ import annotations

from pollux.testing._emulator._core import ApiError, Call, Core, Handler, Route, WireSpec
from pollux.testing._emulator._http import (
    HTTPRequest,
    Outcome,
    Response,
    StreamResponse,
    json_response,
)

from . import _gemini_caches as caches
from . import _gemini_generate as gen
from . import _vertex_batches as vb
from ._common import bearer_key
from ._gemini_common import GoogleError, google_error_body, model_name
from ._gemini_state import GeminiState

VERSIONS = ("v1beta1", "v1")
_SCOPE = "projects/{project}/locations/{location}"

UNAUTHENTICATED_MESSAGE = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)


class VertexState(GeminiState):
    """The Gemini wire's stored objects and knobs, plus which projects the token may use.

    Attributes:
        projects: The projects the caller may use (None: every project).
    """

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.projects: set[str] | None = None
        self.tokens_issued = 0
        self.generate_selector = "vertex.generate.content"


#: The access token ``/token`` issues when ``Emulator(api_key=...)`` is unset.
DEFAULT_ACCESS_TOKEN = "ya29.emulated-access-token"


def token(call: Call) -> Outcome:
    """``POST /token``: an OAuth 2 refresh, answered with an access token for an hour."""
    state: VertexState = call.state
    state.tokens_issued += 1
    access = call.core.settings.api_key or DEFAULT_ACCESS_TOKEN
    return json_response({"access_token": access, "expires_in": 3600, "token_type": "Bearer"})


def _resource(call: Call) -> str:
    p, loc = call.params["project"], call.params["location"]
    return (
        f"projects/{p}/locations/{loc}/publishers/google/models/{model_name(call.params['model'])}"
    )


def _scoped(handler: Handler, permission: str, *, model: bool = True) -> Handler:
    """``handler`` after Vertex's project permission and publisher-model checks."""

    def checked(call: Call) -> Outcome:
        state: VertexState = call.state
        project = call.params["project"]
        if state.projects is not None and project not in state.projects:
            target = _resource(call) if model else f"projects/{project}"
            raise GoogleError(
                403,
                f"Permission '{permission}' denied on resource "
                f"'//aiplatform.googleapis.com/{target}' (or it may not exist).",
                details=[
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "IAM_PERMISSION_DENIED",
                        "domain": "aiplatform.googleapis.com",
                        "metadata": {"permission": permission},
                    }
                ],
            )
        allowed = call.core.settings.models
        if model and allowed and model_name(call.params["model"]) not in allowed:
            raise GoogleError(
                404,
                f"Publisher Model `{_resource(call)}` was not found or your project does not "
                "have access to it. Please ensure you are using a valid model version. For "
                "more information, see: "
                "https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions",
            )
        return handler(call)

    return checked


def _routes() -> tuple[Route, ...]:
    routes: list[Route] = []
    predict = "aiplatform.endpoints.predict"
    for v in VERSIONS:
        models = f"/{v}/{_SCOPE}/publishers/google/models/{{model}}"
        cached = f"/{v}/{_SCOPE}/cachedContents"
        routes += [
            Route(
                "POST",
                f"{models}:generateContent",
                "generate.content",
                _scoped(gen.generate_content, predict),
                generates=True,
            ),
            Route(
                "POST",
                f"{models}:streamGenerateContent",
                "generate.stream",
                _scoped(gen.stream_generate_content, predict),
                generates=True,
            ),
            Route(
                "POST", f"{models}:countTokens", "count_tokens", _scoped(gen.count_tokens, predict)
            ),
            Route(
                "POST",
                cached,
                "caches.create",
                _scoped(caches.create, "aiplatform.cachedContents.create", model=False),
            ),
            Route(
                "GET",
                cached,
                "caches.list",
                _scoped(caches.list_caches, "aiplatform.cachedContents.list", model=False),
            ),
            Route(
                "GET",
                f"{cached}/{{cache_id}}",
                "caches.get",
                _scoped(caches.get, "aiplatform.cachedContents.get", model=False),
            ),
            Route(
                "PATCH",
                f"{cached}/{{cache_id}}",
                "caches.update",
                _scoped(caches.update, "aiplatform.cachedContents.update", model=False),
            ),
            Route(
                "DELETE",
                f"{cached}/{{cache_id}}",
                "caches.delete",
                _scoped(caches.delete, "aiplatform.cachedContents.delete", model=False),
            ),
        ]
    for v in VERSIONS:
        jobs = f"/{v}/{_SCOPE}/batchPredictionJobs"
        routes += [
            Route("POST", jobs, "batches.create", vb.create),
            Route("GET", jobs, "batches.list", vb.list_jobs),
            Route("POST", f"{jobs}/{{job_id}}:cancel", "batches.cancel", vb.cancel),
            Route("GET", f"{jobs}/{{job_id}}", "batches.get", vb.get),
            Route("DELETE", f"{jobs}/{{job_id}}", "batches.delete", vb.delete),
        ]
    routes.append(Route("POST", "/token", "oauth.token", token))
    return tuple(routes)


def _authorize(route: Route, http: HTTPRequest, expected: str | None) -> ApiError | None:
    if route.name == "oauth.token":
        return None  # the refresh token in the form body is the credential here
    token = bearer_key(http.headers)
    if not token or (expected is not None and token != expected):
        return GoogleError(401, UNAUTHENTICATED_MESSAGE)
    return None


def _finish(route: Route, http: HTTPRequest, outcome: Outcome) -> Outcome:
    if isinstance(outcome, (Response, StreamResponse)):
        # Google sends the delay in RetryInfo, never as a Retry-After header.
        outcome.headers.pop("retry-after", None)
    return outcome


def _state(core: Core) -> VertexState:
    return VertexState(core)


WIRES = (
    WireSpec(
        "vertex",
        "/vertex",
        "/vertex",
        _routes(),
        google_error_body,
        bearer_key,
        _state,
        authorize=_authorize,
        finish=_finish,
    ),
)
