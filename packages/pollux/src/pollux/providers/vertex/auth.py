"""Google Cloud credentials for Vertex AI: the Application Default Credentials or injected ones.

One :class:`VertexAuth` per provider holds one ``google.auth`` credentials object, shared by
the direct path (which asks it for a bearer token on every request) and the SDK client (which
it is handed to), so both refresh the same token. Without ``Config(credentials=...)`` the
Application Default Credentials are loaded on first use, off the event loop
(``google.auth.default`` reads files and may probe the metadata server); their project is the
fallback for ``Config.project``. A token is refreshed (off the loop, one refresh at a time)
only when it is missing or about to expire, and every new token is registered with the
scrubber, so it cannot surface in a message, a JSON report or a log record.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pollux._scrub import register_secret
from pollux.errors import ConfigurationError

__all__ = ["SCOPES", "VertexAuth"]

#: The OAuth scope Vertex AI (and Cloud Storage) calls need.
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


class VertexAuth:
    """Credentials, the resolved project, and fresh ``Authorization`` headers.

    Args:
        credentials: A ``google.auth`` credentials object, or None for the Application
            Default Credentials.
        project: The configured project (None: the credentials' project).
    """

    def __init__(self, credentials: Any, project: str | None) -> None:
        self.credentials: Any = credentials
        self.injected = credentials is not None
        self.project = project
        self._loaded = credentials is not None
        self._lock: asyncio.Lock | None = None
        self._last: str | None = None

    async def ready(self) -> None:
        """Load the Application Default Credentials (once) and settle the project.

        Raises:
            ConfigurationError: No credentials found, or no project anywhere.
        """
        if self._loaded and self.project is not None:
            return
        # Single flight: concurrent first calls (a fan-out whose calls each warm up) must share
        # one credentials object, or one would refresh a token another never reads.
        async with self._guard():
            await self._settle()

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _settle(self) -> None:
        if not self._loaded:
            import google.auth

            credentials, project = await asyncio.to_thread(google.auth.default, scopes=SCOPES)
            self.credentials = credentials
            self._loaded = True
            if self.project is None and project:
                self.project = str(project)
        if self.project is None:
            project = getattr(self.credentials, "project_id", None) or getattr(
                self.credentials, "quota_project_id", None
            )
            if isinstance(project, str) and project:
                self.project = project
        if self.project is None:
            raise ConfigurationError(
                "provider='vertex' needs a Google Cloud project, and none was configured",
                hint="Pass Config(project='<project id>') or set GOOGLE_CLOUD_PROJECT (the "
                "Application Default Credentials carried none either).",
            )

    def _fresh(self) -> bool:
        credentials = self.credentials
        valid = getattr(credentials, "valid", None)
        if isinstance(valid, bool):
            return valid
        return bool(getattr(credentials, "token", None)) and not getattr(
            credentials, "expired", False
        )

    async def token(self) -> str:
        """A valid access token, refreshed first when it is missing or expiring.

        Raises:
            ConfigurationError: No credentials found.
            Exception: ``google.auth``'s refresh error (mapped by the provider's ``_wrap``).
        """
        if not self._loaded:
            await self.ready()
        if not self._fresh():
            async with self._guard():
                if not self._fresh():
                    from google.auth.transport.requests import Request

                    await asyncio.to_thread(self.credentials.refresh, Request())
        token = getattr(self.credentials, "token", None)
        if not isinstance(token, str) or not token:
            raise ConfigurationError(
                "The Google Cloud credentials gave no access token",
                hint="Pass credentials whose refresh() sets .token (any google.auth "
                "credentials object), or set up the Application Default Credentials.",
            )
        if token != self._last:
            register_secret(token)
            self._last = token
        return token

    async def headers(self) -> dict[str, str]:
        """The request's ``Authorization`` header (and the quota project, when one is set)."""
        headers = {"Authorization": f"Bearer {await self.token()}"}
        quota_project = getattr(self.credentials, "quota_project_id", None)
        if isinstance(quota_project, str) and quota_project:
            headers["x-goog-user-project"] = quota_project
        return headers
