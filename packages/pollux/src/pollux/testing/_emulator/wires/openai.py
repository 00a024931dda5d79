"""The OpenAI API: Responses, Files, Batches, plus Chat Completions and models.

Mounted as ``"openai"``; ``emu.base_url("openai")`` is ``.../openai/v1``, what
``openai.OpenAI(base_url=...)`` expects.
"""

from __future__ import annotations

from pollux.testing._emulator._core import Core, Route, WireSpec

from . import _batches, _files, _responses, chat
from ._common import bearer_key, openai_error_body


def _routes() -> tuple[Route, ...]:
    return (
        Route("POST", "/v1/responses", "responses.create", _responses.create, generates=True),
        Route("GET", "/v1/responses/{response_id}", "responses.retrieve", _responses.retrieve),
        Route("DELETE", "/v1/responses/{response_id}", "responses.delete", _responses.delete),
        Route("POST", "/v1/files", "files.create", _files.create),
        Route("GET", "/v1/files", "files.list", _files.list_files),
        Route("GET", "/v1/files/{file_id}", "files.retrieve", _files.retrieve),
        Route("GET", "/v1/files/{file_id}/content", "files.content", _files.content),
        Route("DELETE", "/v1/files/{file_id}", "files.delete", _files.delete),
        Route("POST", "/v1/batches", "batches.create", _batches.create),
        Route("GET", "/v1/batches", "batches.list", _batches.list_batches),
        Route("GET", "/v1/batches/{batch_id}", "batches.retrieve", _batches.retrieve),
        Route("POST", "/v1/batches/{batch_id}/cancel", "batches.cancel", _batches.cancel),
        Route(
            "POST",
            "/v1/chat/completions",
            "chat.completions",
            lambda call: chat.completion(call, known_params=chat.OPENAI_CHAT_PARAMS),
            generates=True,
        ),
        Route("GET", "/v1/models", "models.list", chat.list_models),
        Route("GET", "/v1/models/{model}", "models.retrieve", chat.retrieve_model),
    )


def _state(core: Core) -> _responses.OpenAIState:
    return _responses.OpenAIState(core)


WIRES = (
    WireSpec("openai", "/openai", "/openai/v1", _routes(), openai_error_body, bearer_key, _state),
)
