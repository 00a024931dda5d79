"""Fixtures of the Azure tests: no Azure variables from the machine, an emulated resource that
holds the module's ``DEPLOYMENT``, and a Config for each API surface and credential."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pollux import Config
from pollux.testing import Emulator

from ._azure import KEY, SURFACES, VERSION, azure_config, without_azure


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    without_azure(monkeypatch)


@pytest.fixture
def deployment(request: pytest.FixtureRequest) -> str:
    """The deployment a test module's Configs name (its ``DEPLOYMENT``)."""
    name = request.module.DEPLOYMENT
    assert isinstance(name, str)
    return name


@pytest.fixture
def emu(deployment: str) -> Iterator[Emulator]:
    with Emulator(api_key=KEY, models=(deployment,)) as emulator:
        yield emulator


@pytest.fixture
def cli_env(
    emu: Emulator, deployment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The pollux command's Azure variables (a dated api-version), run in ``tmp_path``; its
    provider and deployment flags."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", emu.base_url("azure_openai"))
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_VERSION", VERSION)
    return ["--provider", "azure_openai", "--model", deployment]


@pytest.fixture(params=[fields for _, fields in SURFACES], ids=[name for name, _ in SURFACES])
def config(request: pytest.FixtureRequest, emu: Emulator, deployment: str) -> Config:
    return azure_config(emu, deployment, **request.param)
