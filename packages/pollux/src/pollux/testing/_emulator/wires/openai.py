"""The OpenAI API: Responses, Files, Batches, plus Chat Completions and models.

Mounted as ``"openai"``; ``emu.base_url("openai")`` is ``.../openai/v1``, what
``openai.OpenAI(base_url=...)`` expects.
"""

from __future__ import annotations

from pollux.testing._emulator._core import Route, WireSpec

from . import chat
from ._common import bearer_key, openai_error_body


def _routes() -> tuple[Route, ...]:
    return (
        Route("POST", "/v1/chat/completions", "chat.completions", chat.completion, generates=True),
        Route("GET", "/v1/models", "models.list", chat.list_models),
        Route("GET", "/v1/models/{model}", "models.retrieve", chat.retrieve_model),
    )


WIRES = (WireSpec("openai", "/openai", "/openai/v1", _routes(), openai_error_body, bearer_key),)
