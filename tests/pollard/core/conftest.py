"""Store fixtures: every conformance test runs against every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pytest

from pollard import MemoryStore, Node, SQLiteStore, Store


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


class ThroughIoThread:
    """A `SQLiteStore` whose every operation runs on the store's I/O thread, as `AsyncRuntime`
    runs them: concurrent callers' operations are batched into one transaction there."""

    def __init__(self, store: SQLiteStore) -> None:
        self.inner = store
        self.io = store.io_executor

    def _run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.io.submit(getattr(self.inner, name), *args, **kwargs).result()

    def __getattr__(self, name: str) -> Any:  # other attributes (intern_payloads, ...)
        return getattr(self.inner, name)

    @property
    def store_id(self) -> str:
        return self.inner.store_id

    def put(self, node: Node) -> bool:
        return cast(bool, self._run("put", node))

    def get(self, node_id: str) -> Node:
        return cast(Node, self._run("get", node_id))

    def find(self, node_id: str) -> Node | None:
        return cast("Node | None", self._run("find", node_id))

    def exists(self, node_id: str) -> bool:
        return cast(bool, self._run("exists", node_id))

    def children(self, node_id: str) -> list[Node]:
        return cast("list[Node]", self._run("children", node_id))

    def update_meta(self, node_id: str, patch: Mapping[str, Any]) -> Node:
        return cast(Node, self._run("update_meta", node_id, patch))

    def walk(self, root_id: str) -> Iterator[Node]:
        return iter(
            cast("list[Node]", self.io.submit(lambda: list(self.inner.walk(root_id))).result())
        )

    def roots(self) -> list[Node]:
        return cast("list[Node]", self._run("roots"))

    def drop_nodes(self, ids: Iterable[str]) -> int:
        return cast(int, self._run("drop_nodes", list(ids)))

    def compact(self) -> int:
        return cast(int, self._run("compact"))

    def reserve(self, *args: Any, **kwargs: Any) -> Any:
        return self._run("reserve", *args, **kwargs)

    def renew(self, reservation_id: str, lease_seconds: float) -> bool:
        return cast(bool, self._run("renew", reservation_id, lease_seconds))

    def release(self, reservation_id: str) -> None:
        self._run("release", reservation_id)

    def commit(self, node: Node, **kwargs: Any) -> bool:
        return cast(bool, self._run("commit", node, **kwargs))

    def totals(self, scope: str) -> dict[str, Decimal]:
        return cast("dict[str, Decimal]", self._run("totals", scope))

    def claim(self, key: str, owner: str) -> str:
        return cast(str, self._run("claim", key, owner))

    def close(self) -> None:
        self.inner.close()


def _sqlite_io(tmp_path: Path, **kwargs: object) -> Store:
    store = SQLiteStore(tmp_path / "io.db", **kwargs)  # type: ignore[arg-type]
    return ThroughIoThread(store)


def _hashrope(tmp_path: Path, **kwargs: object) -> Store:
    from pollard import HashRopeStore

    return HashRopeStore(**kwargs)  # type: ignore[arg-type]


FACTORIES: dict[str, Callable[..., Store]] = {
    "hashrope": _hashrope,
    "memory": _memory,
    "sqlite": _sqlite,
    "sqlite-io": _sqlite_io,
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
