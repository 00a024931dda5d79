"""A ready-made pytest fixture: ``from pollux.testing.fixtures import emulator`` in a conftest.

This module imports pytest; :mod:`pollux.testing` itself does not.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ._emulator._emulator import Emulator

__all__ = ["emulator"]


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A running :class:`~pollux.testing.Emulator` with default settings, one per test."""
    with Emulator() as emu:
        yield emu
