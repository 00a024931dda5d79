"""Store fixtures: every conformance test runs against every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pollard import MemoryStore, SQLiteStore, Store


class FakeClock:
    """A controllable wall clock for leases and windows."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


StoreFactory = Callable[..., Store]


def _memory(tmp_path: Path, **kwargs: object) -> Store:
    return MemoryStore(**kwargs)  # type: ignore[arg-type]


def _sqlite(tmp_path: Path, **kwargs: object) -> Store:
    return SQLiteStore(tmp_path / "store.db", **kwargs)  # type: ignore[arg-type]


def _sqlite_plain(tmp_path: Path, **kwargs: object) -> Store:
    return SQLiteStore(tmp_path / "plain.db", intern_payloads=False, **kwargs)  # type: ignore[arg-type]


def _hashrope(tmp_path: Path, **kwargs: object) -> Store:
    from pollard import HashRopeStore

    return HashRopeStore(**kwargs)  # type: ignore[arg-type]


FACTORIES: dict[str, Callable[..., Store]] = {
    "hashrope": _hashrope,
    "memory": _memory,
    "sqlite": _sqlite,
    "sqlite-plain": _sqlite_plain,
}


@pytest.fixture(params=sorted(FACTORIES))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    created: list[Store] = []

    def make(**kwargs: object) -> Store:
        store = FACTORIES[request.param](tmp_path, **kwargs)
        created.append(store)
        return store

    yield make
    for store in created:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
