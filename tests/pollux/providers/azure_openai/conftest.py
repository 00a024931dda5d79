"""Fixtures of the Azure tests: no Azure variables from the machine, an emulated resource that
holds the module's ``DEPLOYMENT``, and a Config for each API surface and credential."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pollux import Config
from pollux.testing import Emulator

from ._azure import KEY, SURFACES, azure_config


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY", "OPENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)


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


@pytest.fixture(params=[fields for _, fields in SURFACES], ids=[name for name, _ in SURFACES])
def config(request: pytest.FixtureRequest, emu: Emulator, deployment: str) -> Config:
    return azure_config(emu, deployment, **request.param)
