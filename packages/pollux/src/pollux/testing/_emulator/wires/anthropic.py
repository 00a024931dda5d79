"""The Anthropic API: Messages (plain and SSE), token counting, Files, Message Batches, models.

Mounted as ``"anthropic"``; ``emu.base_url("anthropic")`` is ``.../anthropic``, what
``anthropic.Anthropic(base_url=...)`` expects. The pieces live in ``_anthropic``.
"""

from __future__ import annotations

from pollux.testing._emulator._core import Core, Route, WireSpec

from ._anthropic import batches, files, messages, models
from ._anthropic.errors import api_key, error_body
from ._anthropic.state import AnthropicState


def _routes() -> tuple[Route, ...]:
    return (
        Route("POST", "/v1/messages", "messages.create", messages.create, generates=True),
        Route(
            "POST",
            "/v1/messages/count_tokens",
            "messages.count_tokens",
            messages.count_tokens_route,
        ),
        Route("POST", "/v1/messages/batches", "batches.create", batches.create),
        Route("GET", "/v1/messages/batches", "batches.list", batches.list_batches),
        Route("GET", "/v1/messages/batches/{batch_id}", "batches.retrieve", batches.retrieve),
        Route("DELETE", "/v1/messages/batches/{batch_id}", "batches.delete", batches.delete),
        Route("POST", "/v1/messages/batches/{batch_id}/cancel", "batches.cancel", batches.cancel),
        Route("GET", "/v1/messages/batches/{batch_id}/results", "batches.results", batches.results),
        Route("POST", "/v1/files", "files.upload", files.upload),
        Route("GET", "/v1/files", "files.list", files.list_files),
        Route("GET", "/v1/files/{file_id}", "files.retrieve", files.retrieve),
        Route("GET", "/v1/files/{file_id}/content", "files.content", files.content),
        Route("DELETE", "/v1/files/{file_id}", "files.delete", files.delete),
        Route("GET", "/v1/models", "models.list", models.list_models),
        Route("GET", "/v1/models/{model_id}", "models.retrieve", models.retrieve_model),
    )


def _state(core: Core) -> AnthropicState:
    return AnthropicState(core)


WIRES = (WireSpec("anthropic", "/anthropic", "/anthropic", _routes(), error_body, api_key, _state),)
