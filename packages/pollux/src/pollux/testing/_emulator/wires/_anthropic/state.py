"""What the Anthropic wire stores per emulator: files, batches and the prompt cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pollux.testing._emulator._core import Core

from .cache import PromptCache

__all__ = ["AnthropicState", "StoredFile", "rfc3339"]


def rfc3339(seconds: float) -> str:
    """A virtual-clock time as the RFC 3339 string the API sends."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class StoredFile:
    """An uploaded file."""

    id: str
    filename: str
    mime_type: str
    data: bytes
    created_at: float
    expires_at: float | None = None
    downloadable: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "file",
            "filename": self.filename,
            "mime_type": self.mime_type,
            "size_bytes": len(self.data),
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.expires_at) if self.expires_at is not None else None,
            "downloadable": self.downloadable,
        }


@dataclass(slots=True)
class AnthropicState:
    """The Anthropic wire's stored objects."""

    core: Core
    files: dict[str, StoredFile] = field(default_factory=dict)
    batches: dict[str, Any] = field(default_factory=dict)
    cache: PromptCache = field(init=False)

    def __post_init__(self) -> None:
        self.cache = PromptCache(self.core.clock)

    def live_file(self, file_id: str) -> StoredFile | None:
        """The file, unless it was deleted or has expired on the virtual clock."""
        record = self.files.get(file_id)
        if record is None:
            return None
        if record.expires_at is not None and self.core.clock.now() >= record.expires_at:
            del self.files[file_id]
            return None
        return record
