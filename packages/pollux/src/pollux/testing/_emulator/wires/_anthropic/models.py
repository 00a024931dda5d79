"""``GET /v1/models`` and ``GET /v1/models/{model_id}``, on the ``Emulator(models=...)`` catalog."""

from __future__ import annotations

from typing import Any

from pollux.testing._emulator._core import Call
from pollux.testing._emulator._http import Outcome, json_response

from .errors import not_found, require_headers
from .paging import page
from .state import rfc3339

__all__ = ["DEFAULT_MODELS", "list_models", "retrieve_model"]

DEFAULT_MODELS = ("claude-opus-4-6", "claude-sonnet-4-6", "claude-haiku-4-5")


def _info(call: Call, model: str) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model,
        "display_name": model.replace("-", " ").title(),
        "created_at": rfc3339(call.core.clock.now()),
        "lifecycle": "active",
        "max_input_tokens": 200_000,
        "max_tokens": 64_000,
    }


def list_models(call: Call) -> Outcome:
    """``GET /v1/models``: the configured catalog, or a few current model names."""
    require_headers(call)
    catalog = call.core.settings.models or DEFAULT_MODELS
    return json_response(page([_info(call, m) for m in catalog], call.request.query))


def retrieve_model(call: Call) -> Outcome:
    """``GET /v1/models/{model_id}``: any model, unless a catalog is set."""
    require_headers(call)
    model = call.params["model_id"]
    if call.core.settings.models and model not in call.core.settings.models:
        raise not_found(f"model: {model}")
    return json_response(_info(call, model))
