"""PostgresStore beyond the conformance suite: namespaces, concurrency, first use, errors."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pollard import Budget, BudgetExceeded, Node, NodeKind, PostgresStore, Runtime, WindowMeter
from pollard._core._ledger import BudgetClaim
from tests.pollard._postgres import TABLES, drop_store, fresh_schema, fresh_store_id, row_count

WORKER = r"""
import json, sys
from pollard import Budget, BudgetExceeded, PostgresStore, Runtime, WindowMeter
dsn, store_id, worker, attempts, limit, kind = sys.argv[1:7]
attempts, limit = int(attempts), int(limit)
ran = 0
def fn(payload):
    global ran
    ran += 1
    return {"text": "ok", "usage": {"input_tokens": 1, "output_tokens": 1}}
store = PostgresStore(dsn, store_id=store_id)
if kind == "window":
    rt, budget = Runtime(store, meters=[WindowMeter("requests", limit, 3600)]), None
else:
    rt, budget = Runtime(store), Budget(steps=limit)
run = rt.run("shared", budget=budget, shared=True)  # many workers, one label
for i in range(attempts):
    try:
        run.model_call({"model": "m", "worker": int(worker), "i": i}, fn=fn)
    except BudgetExceeded:
        run.rollback()
rt.close()
store.close()
print(json.dumps({"ran": ran}))
"""


@pytest.fixture
def store_id(pg_dsn: str) -> Iterator[str]:
    name = fresh_store_id()
    yield name
    drop_store(pg_dsn, name)


def _model_calls(store: PostgresStore) -> int:
    return sum(
        1
        for root in store.roots()
        for node in store.walk(root.id)
        if node.kind is NodeKind.MODEL_CALL
    )


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["budget", "window"])
def test_processes_share_one_exact_limit(pg_dsn: str, store_id: str, kind: str) -> None:
    limit, workers, attempts = 6, 3, 4  # 12 attempts against a limit of 6
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                pg_dsn,
                store_id,
                str(w),
                str(attempts),
                str(limit),
                kind,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    ran = 0
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        ran += json.loads(out)["ran"]
    assert ran == limit  # never more than the limit, and no capacity lost
    with PostgresStore(pg_dsn, store_id=store_id) as store:
        assert _model_calls(store) == limit
        root = store.roots()[0]
        assert len(store.roots()) == 1  # every worker shared one root (concurrent puts)
        meter = "steps" if kind == "budget" else "requests"
        assert store.totals(root.id)[meter] == limit
    assert row_count(pg_dsn, "reservations", store_id) == 0


@pytest.mark.postgres
def test_threads_share_one_exact_budget_and_window(pg_dsn: str, store_id: str) -> None:
    store = PostgresStore(pg_dsn, store_id=store_id)
    rt = Runtime(store, meters=[WindowMeter("requests", 7, 3600)])
    ran: list[int] = []
    lock = threading.Lock()

    def fn(payload: Any) -> dict[str, Any]:
        with lock:
            ran.append(1)
        return {"text": "ok"}

    def worker(index: int) -> None:
        run = rt.run("shared", budget=Budget(steps=9))
        for i in range(5):
            try:
                run.model_call({"model": "m", "w": index, "i": i}, fn=fn)
            except BudgetExceeded:
                run.rollback()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ran) == 7  # the window (7) binds before the budget (9)
    assert _model_calls(store) == 7
    rt.close()
    store.close()


@pytest.mark.postgres
def test_store_ids_are_separate_namespaces(pg_dsn: str, store_id: str) -> None:
    other_id = fresh_store_id()
    try:
        with (
            PostgresStore(pg_dsn, store_id=store_id) as a,
            PostgresStore(pg_dsn, store_id=other_id) as b,
        ):
            root = Node.create("root", None, {"run": "same"})
            child = Node.create("note", root.id, {"text": "x" * 2048})
            assert a.put(root) and a.put(child)
            assert b.roots() == [] and not b.exists(root.id)
            assert b.put(root)  # the same id is new in the other namespace
            a.commit(
                Node.create("model_call", child.id, {"q": 1}, result={}),
                scopes=["s"],
                charges={"steps": Decimal(1)},
            )
            assert a.totals("s") == {"steps": Decimal(1)} and b.totals("s") == {}
            assert b.reserve(
                [BudgetClaim("s", "steps", Decimal(1), Decimal(1))], lease_seconds=60
            ).ok
            assert a.compact() == 0  # a's interned blob is in use
            assert b.compact() == 0  # b has no blob, and must not delete a's
            assert a.get(child.id).payload["text"] == "x" * 2048
            assert b.store_id == other_id
    finally:
        drop_store(pg_dsn, other_id)


@pytest.mark.postgres
def test_concurrent_puts_of_one_node_store_it_once(pg_dsn: str, store_id: str) -> None:
    store = PostgresStore(pg_dsn, store_id=store_id)
    root = Node.create("root", None, {"run": "race"})
    barrier = threading.Barrier(6)
    results: list[bool] = []

    def put() -> None:
        barrier.wait()
        results.append(store.put(root))

    threads = [threading.Thread(target=put) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    assert sorted(results) == [False] * 5 + [True]
    assert row_count(pg_dsn, "nodes", store_id) == 1


@pytest.mark.postgres
def test_concurrent_meta_patches_are_not_lost(pg_dsn: str, store_id: str) -> None:
    store = PostgresStore(pg_dsn, store_id=store_id)
    root = Node.create("root", None, {"run": "meta"})
    store.put(root)

    def patch(worker: int) -> None:
        for i in range(5):
            store.update_meta(root.id, {f"w{worker}-{i}": i})

    threads = [threading.Thread(target=patch, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    meta = store.get(root.id).meta
    store.close()
    assert {k for k in meta if k.startswith("w")} == {
        f"w{w}-{i}" for w in range(4) for i in range(5)
    }


@pytest.mark.postgres
def test_first_use_creates_the_schema_once_under_concurrency(pg_dsn: str) -> None:
    with fresh_schema(pg_dsn) as dsn:
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def open_store(index: int) -> None:
            barrier.wait()
            try:
                PostgresStore(dsn, store_id=f"s{index}").close()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=open_store, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        with PostgresStore(dsn, store_id="s0") as store:
            assert store.put(Node.create("root", None, {"run": "schema"}))
            assert store.roots()[0].payload == {"run": "schema"}


@pytest.mark.postgres
def test_leases_follow_the_server_clock(pg_dsn: str, store_id: str) -> None:
    with PostgresStore(pg_dsn, store_id=store_id) as store:
        claim = BudgetClaim("scope", "steps", Decimal(1), Decimal(1))
        held = store.reserve([claim], lease_seconds=3600)
        assert held.reservation_id is not None
        assert not store.reserve([claim], lease_seconds=3600).ok
        assert store.renew(held.reservation_id, -1)  # the lease now ends in the server's past
        assert store.reserve([claim], lease_seconds=3600).ok  # swept at the next precheck
        assert store.renew(held.reservation_id, 10) is False


@pytest.mark.postgres
def test_store_ids_are_validated_and_the_dsn_is_never_shown(pg_dsn: str) -> None:
    for bad in ("", "a b", "x'; DROP TABLE pollard_nodes; --", "é", "x" * 129):
        with pytest.raises(ValueError, match="store_id"):
            PostgresStore(pg_dsn, store_id=bad)
    with PostgresStore(pg_dsn, store_id="shown") as store:
        assert repr(store) == "PostgresStore(store_id='shown')"
        assert pg_dsn not in repr(store) and pg_dsn not in str(vars(store).get("_sql"))
    with pytest.raises(Exception) as info:
        PostgresStore("postgresql://alice:hunter2@127.0.0.1:1/nothing", store_id="x")
    assert "hunter2" not in str(info.value)


@pytest.mark.postgres
def test_a_closed_store_refuses_work(pg_dsn: str, store_id: str) -> None:
    store = PostgresStore(pg_dsn, store_id=store_id)
    store.close()
    store.close()
    with pytest.raises(Exception, match="closed"):
        store.roots()


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=r'pip install "pollard\[pg\]"'):
        PostgresStore("postgresql://127.0.0.1:1/none")


@pytest.mark.postgres
def test_long_strings_with_nul_round_trip(pg_dsn: str, store_id: str) -> None:
    with PostgresStore(pg_dsn, store_id=store_id, intern_threshold=16) as store:
        text = "a\x00b" * 100
        root = Node.create("root", None, {"run": "nul", "text": text, "plain": "y" * 64})
        assert store.put(root)
        assert store.get(root.id).payload == {"run": "nul", "text": text, "plain": "y" * 64}
        assert row_count(pg_dsn, "blobs", store_id) == 1  # only the NUL-free string is interned


@pytest.mark.postgres
@pytest.mark.parametrize("durable", [True, False])
def test_text_that_needs_escaping_round_trips_through_the_step_calls(
    pg_dsn: str, store_id: str, durable: bool
) -> None:
    # Not durable, a step's parameters travel as extended-protocol text; durable, the commit's
    # as SQL literals: quotes, backslashes, array punctuation and non-ASCII arrive unchanged.
    odd = 'it\'s \\ "q" {a,b} NULL é ∑ 🙂 \\x00 $1 %s'
    with (
        PostgresStore(pg_dsn, store_id=store_id, durable=durable) as store,
        Runtime(store) as runtime,
    ):
        run = runtime.run(odd, budget=Budget(steps=10, tokens=1_000))
        run.model_call(
            {"model": odd, "k": [odd]},
            fn=lambda p: {"text": odd, "usage": {"input_tokens": 2, "output_tokens": 1}},
        )
        node = next(n for n in store.walk(run.root_id) if n.kind is NodeKind.MODEL_CALL)
        assert node.payload == {"model": odd, "k": [odd]}
        assert node.result is not None and node.result["text"] == odd
        assert store.totals(run.root_id)["steps"] == 1
        assert store.totals(run.root_id)["tokens"] == 3


@pytest.mark.postgres
def test_a_role_without_create_privilege_opens_an_existing_store(
    pg_dsn: str, store_id: str
) -> None:
    import psycopg

    PostgresStore(pg_dsn, store_id=store_id).close()  # the tables exist
    role = f"pollard_app_{store_id.replace('-', '_')}"
    tables = ", ".join(f"pollard_{name}" for name in TABLES)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role}")
    try:
        app_dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
        with PostgresStore(app_dsn, store_id=store_id) as store:
            root = Node.create("root", None, {"run": "least-privilege"})
            assert store.put(root)
            claim = BudgetClaim(root.id, "steps", Decimal(1), Decimal(1))
            assert store.reserve([claim], lease_seconds=60).ok
        with (
            psycopg.connect(app_dsn, autocommit=True) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute("CREATE TABLE pollard_probe (x int)")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_the_stores_page_example_runs(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    page = Path(__file__).resolve().parents[3] / "docs" / "pollard" / "stores.md"
    (block,) = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    monkeypatch.setenv("POLLARD_PG_DSN", pg_dsn)
    store_id = "support-prod"
    drop_store(pg_dsn, store_id)
    try:
        namespace: dict[str, Any] = {"__name__": "stores_page"}
        exec(compile(block, str(page), "exec"), namespace)
        with PostgresStore(pg_dsn, store_id=store_id) as store:
            assert store.totals(namespace["run"].root_id)["steps"] == 1
            assert _model_calls(store) == 1
    finally:
        drop_store(pg_dsn, store_id)


@pytest.mark.postgres
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connection(pg_dsn: str, store_id: str) -> None:
    store = PostgresStore(pg_dsn, store_id=store_id)
    root = Node.create("root", None, {"run": "fork"})
    store.put(root)
    child = Node.create("note", root.id, {"from": "child"})
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child_writes, args=(store, child))
    with warnings.catch_warnings():  # 3.12+ warns about fork() when any other thread runs
        warnings.simplefilter("ignore", DeprecationWarning)
        proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert store.exists(child.id)  # the parent's connection still works
    assert [n.id for n in store.walk(root.id)] == [root.id, child.id]
    store.close()


def _child_writes(store: PostgresStore, node: Node) -> None:
    store.put(node)
    store.close()


def _drop_functions(dsn: str) -> None:
    import psycopg

    from pollard.stores._pgtext import FUNCTION_NAMES

    with psycopg.connect(dsn, autocommit=True) as admin:
        for name in FUNCTION_NAMES:
            admin.execute(f"DROP FUNCTION IF EXISTS {name}")


def _functions_exist(dsn: str) -> bool:
    import psycopg

    from pollard.stores._pgtext import FUNCTION_NAMES

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT bool_and(to_regproc(f) IS NOT NULL) FROM unnest(%s::text[]) AS f",
            (list(FUNCTION_NAMES),),
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.postgres
def test_a_store_an_older_version_made_gets_the_step_functions(pg_dsn: str) -> None:
    """An older store (tables, no functions) opens, keeps its data and is upgraded in place."""
    with fresh_schema(pg_dsn) as dsn:
        with PostgresStore(dsn, store_id="old") as store, Runtime(store) as runtime:
            run = runtime.run("before", budget=Budget(steps=3))
            run.model_call({"q": 0}, fn=lambda p: {"text": "ok"})
            root = run.root_id
        _drop_functions(dsn)  # what a store from before the functions looks like
        assert not _functions_exist(dsn)
        with PostgresStore(dsn, store_id="old", read_only=True) as reader:
            assert reader.totals(root)["steps"] == 1
        assert not _functions_exist(dsn)  # a read never writes, functions included
        with PostgresStore(dsn, store_id="old") as store, Runtime(store) as runtime:
            assert store._functions
            run = runtime.run("before", budget=Budget(steps=3))
            run.model_call({"q": 1}, fn=lambda p: {"text": "ok"})
            run.model_call({"q": 2}, fn=lambda p: {"text": "ok"})
            with pytest.raises(BudgetExceeded):
                run.model_call({"q": 3}, fn=lambda p: {"text": "ok"})
            assert store.totals(run.root_id)["steps"] == 3
        assert _functions_exist(dsn)


@pytest.mark.postgres
def test_a_reservation_reads_only_its_own_scopes_ledger_rows(pg_dsn: str) -> None:
    """The regression: the first reservation function hash-joined every ledger row of the
    store, so each step cost more the more runs the store had ever recorded."""
    import psycopg

    from pollard.stores._pgtext import RESERVE_NAME

    with fresh_schema(pg_dsn) as dsn:
        with PostgresStore(dsn, store_id="wide", durable=False) as store, Runtime(store) as rt:
            for i in range(60):  # 60 runs, each a scope with three settled meters
                run = rt.run(f"r{i}", budget=Budget(steps=5, tokens=100))
                run.model_call(
                    {"i": i},
                    fn=lambda p: {"text": "ok", "usage": {"input_tokens": 1, "output_tokens": 1}},
                )
            scope = run.root_id
        assert row_count(dsn, "ledger", "wide") >= 180
        with psycopg.connect(dsn) as conn:  # one transaction: its own table statistics
            for held in (json.dumps([["b", scope, "steps", "1"]]), None):  # admitted, unheld
                conn.execute(
                    f"SELECT * FROM {RESERVE_NAME}('wide', NULL, '{{1}}', %s, %s, '{{5,100}}', "
                    "'{1,0}', '{}', '{}', '{}', '{}', '{}', 'probe', 60, %s)",
                    ([scope, scope], ["steps", "tokens"], held),
                ).fetchall()
            row = conn.execute(
                "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                "FROM pg_stat_xact_user_tables WHERE relname = 'pollard_ledger' "
                "AND schemaname = current_schema()"
            ).fetchone()
            conn.rollback()
        assert row is not None and row[0] <= 12, row  # its own scope's rows, not the store's 180


@pytest.mark.postgres
def test_a_role_that_may_not_create_the_functions_keeps_the_batches(pg_dsn: str) -> None:
    import psycopg

    with fresh_schema(pg_dsn) as dsn:
        PostgresStore(dsn, store_id="app").close()
        _drop_functions(dsn)  # an older store, opened by a role without CREATE privilege
        schema = dsn.rsplit("%3D", 1)[1]
        role = f"pollard_nc_{schema[-12:]}"
        tables = ", ".join(f"{schema}.pollard_{name}" for name in TABLES)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {role} LOGIN")
            admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role}")
        try:
            app_dsn = psycopg.conninfo.make_conninfo(dsn, user=role)
            with PostgresStore(app_dsn, store_id="app") as store, Runtime(store) as runtime:
                assert not store._functions
                run = runtime.run("batches", budget=Budget(steps=2))
                run.model_call({"q": 0}, fn=lambda p: {"text": "ok"})
                run.model_call({"q": 1}, fn=lambda p: {"text": "ok"})
                with pytest.raises(BudgetExceeded):
                    run.model_call({"q": 2}, fn=lambda p: {"text": "ok"})
                assert store.totals(run.root_id)["steps"] == 2
            assert not _functions_exist(dsn)
        finally:
            with psycopg.connect(pg_dsn, autocommit=True) as admin:
                admin.execute(f"DROP OWNED BY {role}")
                admin.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_functions_dropped_behind_an_open_store_fall_back_to_the_batches(pg_dsn: str) -> None:
    with (
        fresh_schema(pg_dsn) as dsn,
        PostgresStore(dsn, store_id="gone") as store,
        Runtime(store) as runtime,
    ):
        run = runtime.run("gone", budget=Budget(steps=3))
        run.model_call({"q": 0}, fn=lambda p: {"text": "ok"})
        _drop_functions(dsn)
        run.model_call({"q": 1}, fn=lambda p: {"text": "ok"})  # reserve falls back
        assert not store._functions
        run.model_call({"q": 2}, fn=lambda p: {"text": "ok"})
        assert store.totals(run.root_id)["steps"] == 3
        with pytest.raises(BudgetExceeded):
            run.model_call({"q": 3}, fn=lambda p: {"text": "ok"})


def test_a_server_that_never_answers_fails_the_open_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # libpq waits forever for a server whose packets vanish; the store bounds the attempt
    # (unless the DSN or PGCONNECT_TIMEOUT sets its own) and reports the store unreachable.
    pytest.importorskip("psycopg")
    import socket

    from pollard import PollardError
    from pollard.stores import postgres

    monkeypatch.setattr(postgres, "CONNECT_TIMEOUT_S", 1)
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts, never speaks: the startup packet gets no answer
    port = silent.getsockname()[1]
    outcome: list[BaseException | None] = []

    def open_store() -> None:
        try:
            PostgresStore(f"postgresql://127.0.0.1:{port}/test", store_id="silent")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    opener = threading.Thread(target=open_store, daemon=True)
    opener.start()
    opener.join(60)  # far beyond the 1 s bound: only a hang gets here
    silent.close()
    assert not opener.is_alive(), "the open hung on a server that never answers"
    assert isinstance(outcome[0], PollardError)
    assert "cannot connect to the PostgreSQL server" in str(outcome[0])
