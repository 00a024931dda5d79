"""Fixtures shared by the bridge's end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pollux._engine.cache_miss import PREFIXES, PrefixRegistry


@pytest.fixture(autouse=True)
def _no_proven_prefixes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no prompt-cache prefixes proven by earlier tests.

    pollux remembers, per process, the prefixes that proved cacheable, and a live Output then
    carries ``diagnostics.raw["cache_miss"]`` (which a recording leaves out, since it depends on
    what ran before). Tests that compare a live Output with its replay must not depend on the
    order the suite runs them in.
    """
    fresh = PrefixRegistry()
    monkeypatch.setattr(PREFIXES, "_entries", fresh._entries)
    monkeypatch.setattr(PREFIXES, "_providers", fresh._providers)
    yield
