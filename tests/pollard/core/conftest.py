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

# PostgreSQL variants: each test gets its own store_id (removed afterwards); marked `postgres`.
PG_VARIANTS: dict[str, dict[str, object]] = {
    "postgres": {},
    "postgres-plain": {"intern_payloads": False},
    "postgres-durable": {"durable": True},
    # The multi-statement batches a role that may not create the step functions keeps.
    "postgres-batch": {"durable": False, "batches": True},
}


@pytest.fixture(
    params=[
        *sorted(FACTORIES),
        *(pytest.param(name, marks=pytest.mark.postgres) for name in sorted(PG_VARIANTS)),
    ]
)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    created: list[Store] = []
    pg: tuple[str, str] | None = None
    if request.param in PG_VARIANTS:
        from tests.pollard._postgres import fresh_store_id

        pg = (request.getfixturevalue("pg_dsn"), fresh_store_id())

    def make(**kwargs: object) -> Store:
        if pg is not None:
            from pollard import PostgresStore

            options = {**PG_VARIANTS[request.param], **kwargs}
            batches = options.pop("batches", False)
            store: Store = PostgresStore(pg[0], store_id=pg[1], **options)  # type: ignore[arg-type]
            if batches:
                store._functions = False  # type: ignore[attr-defined]
        else:
            store = FACTORIES[request.param](tmp_path, **kwargs)
        created.append(store)
        return store

    yield make
    for store in created:
        store.close()
    if pg is not None:
        from tests.pollard._postgres import drop_store

        drop_store(*pg)


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    return make_store()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
