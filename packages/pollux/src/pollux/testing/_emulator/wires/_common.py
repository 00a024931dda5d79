"""Pieces shared by the OpenAI-family wire formats (error bodies, auth, model checks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pollux.testing._emulator._core import ApiError, Core

DEFAULT_MODELS = ("emulator-model",)


def openai_error_body(error: ApiError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``, as OpenAI and compatibles send."""
    return {
        "error": {
            "message": error.message,
            "type": error.error_type or "invalid_request_error",
            "param": error.param,
            "code": error.code,
        }
    }


def bearer_key(headers: Mapping[str, str]) -> str | None:
    """The key from ``Authorization: Bearer <key>``."""
    value = headers.get("authorization", "")
    return value[7:].strip() if value[:7].lower() == "bearer " else None


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 ``invalid_request_error``."""
    return ApiError(400, message, error_type="invalid_request_error", param=param, code=code)


def require_model(core: Core, body: Mapping[str, Any], *, status: int = 404) -> str:
    """The request's model, checked against ``Emulator(models=...)`` when that is set."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    allowed = core.settings.models
    if allowed and model not in allowed:
        raise ApiError(
            status,
            f"The model `{model}` does not exist or you do not have access to it.",
            error_type="invalid_request_error",
            code="model_not_found",
            param="model",
        )
    return model


def model_catalog(core: Core) -> list[str]:
    """The models ``GET /models`` lists."""
    return list(core.settings.models or DEFAULT_MODELS)
