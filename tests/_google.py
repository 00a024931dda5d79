"""Tests of Vertex AI against the emulator read nothing of this machine's Google setup."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

GOOGLE_ENV = ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_VERTEX_BASE_URL")


def without_google(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, unset: Iterable[str] = GOOGLE_ENV
) -> None:
    """Unset ``unset``; no gcloud configuration is read and no metadata server is probed."""
    for name in unset:
        monkeypatch.delenv(name, raising=False)
    # No gcloud configuration of the machine's user is read (ADC's well-known file).
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # no metadata server probe leaves
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "True")
