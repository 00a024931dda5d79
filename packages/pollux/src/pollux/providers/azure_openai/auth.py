"""Azure OpenAI credentials as request headers: an ``api-key`` or an Entra ID bearer token.

A key travels in Azure's ``api-key`` header. An Entra ID token provider (what
``azure.identity.get_bearer_token_provider`` returns, or its ``aio`` twin) is called for every
request, as the SDK's Azure client does: the provider caches and refreshes the token, so a
long fan-out never sends an expired one. Each new token is registered with the scrubber, so it
cannot surface in a message even where a server echoes it unshaped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pollux._scrub import register_secret
from pollux.errors import APIError

from .errors import PROVIDER, TOKEN_HINT

__all__ = ["TokenHeaders"]


class TokenHeaders:
    """``{"Authorization": "Bearer <token>"}`` from a token provider, fresh for every request.

    Args:
        provider: A callable returning a token (a string), or an awaitable of one.
    """

    def __init__(self, provider: Callable[[], Any]) -> None:
        self._provider = provider
        self._last: str | None = None

    async def token(self) -> str:
        """The provider's current token (awaited when the provider is async).

        Raises:
            APIError: The provider failed or returned no token (not retryable; the hint names
                what to check).
        """
        try:
            value = self._provider()
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            raise APIError(
                f"{PROVIDER} could not get an Entra ID token: {type(exc).__name__}: {exc}",
                hint=TOKEN_HINT,
                retryable=False,
                provider=PROVIDER,
                phase="auth",
                error_category="auth_refreshable",
            ) from exc
        if not isinstance(value, str) or not value:
            raise APIError(
                f"{PROVIDER} token provider returned {type(value).__name__}, not a token",
                hint="Config(credentials=...) must return the bearer token string "
                "(get_bearer_token_provider(credential, scope) does).",
                retryable=False,
                provider=PROVIDER,
                phase="auth",
                error_category="auth_refreshable",
            )
        if value != self._last:
            register_secret(value)
            self._last = value
        return value

    async def headers(self) -> dict[str, str]:
        """The request's ``Authorization`` header."""
        return {"Authorization": f"Bearer {await self.token()}"}
