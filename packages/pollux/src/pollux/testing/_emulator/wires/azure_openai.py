"""Azure OpenAI: an Azure resource's Responses, Files, Chat Completions and models endpoints.

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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pollux.testing._emulator._core import ApiError, Call, Core, Handler, Route, WireSpec
from pollux.testing._emulator._http import HTTPRequest, Outcome

from . import _files, _responses, chat
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
        Route("POST", f"{prefix}/files", "files.create", _files.create),
        Route("GET", f"{prefix}/files", "files.list", _files.list_files),
        Route("GET", f"{prefix}/files/{{file_id}}", "files.retrieve", _files.retrieve),
        Route("GET", f"{prefix}/files/{{file_id}}/content", "files.content", _files.content),
        Route("DELETE", f"{prefix}/files/{{file_id}}", "files.delete", _files.delete),
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
