"""Azure OpenAI: an Azure resource's Responses, Files, Batches, Chat Completions and models.

Mounted as ``"azure_openai"``; ``emu.base_url("azure_openai")`` is ``.../azure``, the resource
endpoint (what ``https://<resource>.openai.azure.com`` is to the SDKs). Two API surfaces, as
Azure serves them:

* the v1 API under ``/openai/v1/...`` (no ``api-version``; ``preview`` and ``latest`` are
  accepted), what ``openai.OpenAI(base_url="<endpoint>/openai/v1")`` calls;
* the dated API under ``/openai/...`` with a required ``?api-version=YYYY-MM-DD[-preview]``,
  what ``openai.AzureOpenAI(azure_endpoint=..., api_version=...)`` calls, including the
  deployment paths ``/openai/deployments/{deployment}/chat/completions``.

Credentials: the ``api-key`` header (a resource key) or ``Authorization: Bearer`` (an Entra ID
token; the v1 API also takes a key there). A request with neither is refused as Azure does,
whatever ``Emulator(api_key=...)`` says; with ``api_key`` set, the credential must equal it.
``Emulator(models=...)`` lists the resource's deployments: a request for another one is
answered ``404 DeploymentNotFound``. The bodies are OpenAI's (the same handlers and state as
the ``"openai"`` wire, kept separately per wire).

Global batch: ``/batches`` on both surfaces, the OpenAI batch emulation on the virtual clock,
with Azure's rules on top: a ``purpose=batch`` upload that sets ``expires_after`` takes 14 to
30 days (:data:`BATCH_TTL`), and every line's ``body.model`` must name one deployment of the
resource (one Global-Batch deployment per job), else the job fails validation. Scripts and
faults for the lines are ``azure_openai.responses``'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pollux.testing._emulator._core import ApiError, Call, Core, Handler, Route, WireSpec
from pollux.testing._emulator._http import HTTPRequest, Outcome

from . import _batches, _files, _responses, chat
from ._common import bearer_key, openai_error_body

_V1 = "/azure/openai/v1/"
_DATED = re.compile(r"\d{4}-\d{2}-\d{2}(-preview)?$")
_V1_VERSIONS = frozenset({"preview", "latest"})

MISSING_KEY_MESSAGE = (
    "Access denied due to missing subscription key. Make sure to include subscription key when "
    "making requests to an API."
)
WRONG_KEY_MESSAGE = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a "
    "valid key for an active subscription and use a correct regional API endpoint for your "
    "resource."
)
NO_DEPLOYMENT_MESSAGE = (
    "The API deployment for this resource does not exist. If you created the deployment within "
    "the last 5 minutes, please wait a moment and try again."
)


#: The ``expires_after`` range Azure takes for a ``purpose=batch`` file: 14 to 30 days.
BATCH_TTL = (14 * 24 * 3600, 30 * 24 * 3600)


def credential(headers: Mapping[str, str]) -> str | None:
    """The ``api-key`` header, else the bearer token."""
    return headers.get("api-key") or bearer_key(headers)


def _authorize(route: Route, http: HTTPRequest, expected: str | None) -> ApiError | None:
    version = http.query.get("api-version")
    if http.path.startswith(_V1):
        if version is not None and version not in _V1_VERSIONS:
            return ApiError(400, "API version not supported", code="BadRequest")
    elif version is None:
        return ApiError(404, "Resource not found", code="404")
    elif not _DATED.match(version):
        return ApiError(400, "API version not supported", code="BadRequest")
    given = credential(http.headers)
    if not given:
        return ApiError(401, MISSING_KEY_MESSAGE, code="401")
    if expected is not None and given != expected:
        return ApiError(401, WRONG_KEY_MESSAGE, code="401")
    return None


def _deployed(handler: Handler) -> Handler:
    """``handler``, after checking the body's ``model`` names a deployment of the resource."""

    def checked(call: Call) -> Outcome:
        body: Any = call.request.json
        model = body.get("model") if isinstance(body, dict) else None
        deployments = call.core.settings.models
        if deployments and isinstance(model, str) and model not in deployments:
            raise ApiError(404, NO_DEPLOYMENT_MESSAGE, code="DeploymentNotFound")
        return handler(call)

    return checked


def _batch_create(call: Call) -> Outcome:
    """``POST /batches``: each line names one Global-Batch deployment of the resource."""
    deployments = call.core.settings.models
    first: list[str] = []

    def check(entry: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
        model = entry["body"].get("model")
        if not isinstance(model, str) or not model:
            return "missing_required_parameter", "Missing 'model' in the body.", "body.model"
        if deployments and model not in deployments:
            return (
                "model_not_found",
                f"The deployment '{model}' does not exist on this resource or is not a "
                "Global-Batch deployment.",
                "body.model",
            )
        if not first:
            first.append(model)
        elif model != first[0]:
            return (
                "invalid_model",
                f"Every line of a batch must name the same deployment: '{model}' differs "
                f"from '{first[0]}'.",
                "body.model",
            )
        return None

    return _batches.create(call, check=check)


def _file_create(call: Call) -> Outcome:
    return _files.create(call, batch_ttl=BATCH_TTL)


def _chat(call: Call) -> Outcome:
    return chat.completion(call, known_params=chat.OPENAI_CHAT_PARAMS)


def _surface(prefix: str) -> tuple[Route, ...]:
    return (
        Route(
            "POST", f"{prefix}/responses", "responses.create", _deployed(_responses.create), True
        ),
        Route(
            "GET", f"{prefix}/responses/{{response_id}}", "responses.retrieve", _responses.retrieve
        ),
        Route(
            "DELETE", f"{prefix}/responses/{{response_id}}", "responses.delete", _responses.delete
        ),
        Route("POST", f"{prefix}/files", "files.create", _file_create),
        Route("GET", f"{prefix}/files", "files.list", _files.list_files),
        Route("GET", f"{prefix}/files/{{file_id}}", "files.retrieve", _files.retrieve),
        Route("GET", f"{prefix}/files/{{file_id}}/content", "files.content", _files.content),
        Route("DELETE", f"{prefix}/files/{{file_id}}", "files.delete", _files.delete),
        Route("POST", f"{prefix}/batches", "batches.create", _batch_create),
        Route("GET", f"{prefix}/batches", "batches.list", _batches.list_batches),
        Route("GET", f"{prefix}/batches/{{batch_id}}", "batches.retrieve", _batches.retrieve),
        Route("POST", f"{prefix}/batches/{{batch_id}}/cancel", "batches.cancel", _batches.cancel),
        Route("GET", f"{prefix}/models", "models.list", chat.list_models),
        Route("GET", f"{prefix}/models/{{model}}", "models.retrieve", chat.retrieve_model),
    )


def _routes() -> tuple[Route, ...]:
    return (
        *_surface("/openai/v1"),
        Route("POST", "/openai/v1/chat/completions", "chat.completions", _deployed(_chat), True),
        *_surface("/openai"),
        Route(
            "POST",
            "/openai/deployments/{deployment}/chat/completions",
            "chat.completions",
            _deployed(_chat),
            True,
        ),
    )


def _state(core: Core) -> _responses.OpenAIState:
    return _responses.OpenAIState(core)


WIRES = (
    WireSpec(
        "azure_openai",
        "/azure",
        "/azure",
        _routes(),
        openai_error_body,
        credential,
        _state,
        authorize=_authorize,
    ),
)
