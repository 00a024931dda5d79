"""PostgresStore on a real server: reads never write, lost connections, round trips per step."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from pollard import Budget, PollardError, PostgresStore, Runtime
from pollard._core._ledger import BudgetClaim
from tests.pollard._postgres import drop_store, fresh_schema, fresh_store_id, row_count

pytestmark = pytest.mark.postgres


@pytest.fixture
def store_id(pg_dsn: str) -> Iterator[str]:
    name = fresh_store_id("rel")
    yield name
    drop_store(pg_dsn, name)


def _terminate(dsn: str, store: PostgresStore) -> None:
    """Kill the server process behind this thread's store connection, as a restart would."""
    import psycopg

    pid = store._local.conn.info.backend_pid
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def test_a_read_only_open_creates_no_tables(pg_dsn: str) -> None:
    import psycopg

    with fresh_schema(pg_dsn) as dsn:
        with pytest.raises(PollardError, match="no pollard store") as info:
            PostgresStore(dsn, store_id="x", read_only=True)
        assert "never creates" in (info.value.hint or "")
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = conn.execute("SELECT to_regclass('pollard_nodes')").fetchone()
        assert found == (None,)


def test_a_read_only_open_of_an_unknown_store_id_fails_and_writes_nothing(
    pg_dsn: str, store_id: str
) -> None:
    with PostgresStore(pg_dsn, store_id=store_id) as known:
        Runtime(known).run("exists").note({"n": 1})
    typo = f"{store_id}-typo"
    with pytest.raises(PollardError, match=f"no store '{typo}'") as info:
        PostgresStore(pg_dsn, store_id=typo, read_only=True)
    assert store_id in (info.value.hint or "")  # the ids that do exist are named
    assert row_count(pg_dsn, "kv", typo) == 0
    with PostgresStore(pg_dsn, store_id=store_id, read_only=True) as reader:
        assert [r.payload["run"] for r in reader.roots()] == ["exists"]
        with pytest.raises(PollardError, match="read-only"):
            Runtime(reader).run("new").note({"n": 2})


def test_replay_on_postgres_opens_read_only(pg_dsn: str, store_id: str) -> None:
    with pytest.raises(PollardError, match="no store"):
        Runtime(f"{pg_dsn}#{store_id}", mode="replay")
    assert row_count(pg_dsn, "kv", store_id) == 0


def _answer(payload: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 2, "output_tokens": 1}}


def test_a_connection_killed_during_a_step_reconnects_and_settles_once(
    pg_dsn: str, store_id: str
) -> None:
    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store) as runtime:
        run = runtime.run("restart", budget=Budget(steps=3))
        run.model_call({"q": 0}, fn=_answer)

        def killed(payload: Any) -> dict[str, Any]:
            _terminate(pg_dsn, store)  # between the reservation and the commit
            return _answer(payload)

        node = run.model_call({"q": 1}, fn=killed)
        assert store.find(node.id) is not None
        assert store.totals(run.root_id)["steps"] == 2  # charged exactly once
        assert row_count(pg_dsn, "reservations", store_id) == 0  # the commit released it
        run.model_call({"q": 2}, fn=_answer)


def test_a_connection_killed_before_a_reservation_is_a_pollard_error(
    pg_dsn: str, store_id: str
) -> None:
    import psycopg

    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store) as runtime:
        run = runtime.run("restart", budget=Budget(steps=3))
        run.model_call({"q": 0}, fn=_answer)
        _terminate(pg_dsn, store)
        with pytest.raises(PollardError, match="lost the connection") as info:
            run.model_call({"q": 1}, fn=_answer)
        assert not isinstance(info.value, psycopg.Error)
        assert "reconnects" in (info.value.hint or "")
        assert row_count(pg_dsn, "reservations", store_id) == 0
        run.model_call({"q": 1}, fn=_answer)  # the next step reconnects
        assert store.totals(run.root_id)["steps"] == 2


def test_a_commit_that_cannot_reconnect_keeps_the_reservation_counted(
    pg_dsn: str, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store) as runtime:
        run = runtime.run("down", budget=Budget(steps=2))

        def server_down(*args: Any, **kwargs: Any) -> bool:
            raise psycopg.OperationalError("connection refused")

        monkeypatch.setattr(store, "_commit", server_down)
        with pytest.raises(PollardError, match="during a commit") as info:
            run.model_call({"q": 0}, fn=_answer)
        assert "lease" in (info.value.hint or "")
    # The dispatch may have cost money: its hold still counts against the budget.
    assert row_count(pg_dsn, "reservations", store_id) == 1


def _count_batches(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    batch = store._batch
    cursor = store._cursor

    def counted_batch(queue: Any) -> Any:
        calls.append(len(queue.items))
        return batch(queue)

    def counted_cursor() -> Any:
        calls.append(0)
        return cursor()

    monkeypatch.setattr(store, "_batch", counted_batch)
    monkeypatch.setattr(store, "_cursor", counted_cursor)
    return calls


def test_a_budgeted_step_costs_two_round_trips(
    pg_dsn: str, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store) as runtime:
        run = runtime.run("trips", budget=Budget(steps=100, tokens=10_000))
        run.model_call({"q": -1}, fn=_answer)
        calls = _count_batches(store, monkeypatch)
        for i in range(10):
            run.model_call({"q": i}, fn=_answer)
        assert len(calls) == 20, calls  # reserve: one batch; commit: one batch
        assert store.totals(run.root_id)["steps"] == 11


def test_walk_reads_a_subtree_in_batches(
    pg_dsn: str, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store) as runtime:
        run = runtime.run("walk")
        for i in range(600):
            run.note({"i": i, "text": "y" * 1500})  # interned: blobs load in batches too
        calls = _count_batches(store, monkeypatch)
        nodes = list(store.walk(run.root_id))
    assert len(nodes) == 601
    assert [n.payload.get("i") for n in nodes[1:]] == list(range(600))
    assert len(calls) <= 4, calls  # the shape, then ceil(601 / 256) batches


def test_exact_budget_holds_under_threads_with_kills(pg_dsn: str, store_id: str) -> None:
    store = PostgresStore(pg_dsn, store_id=store_id)
    ran: list[int] = []
    runtime = Runtime(store)
    # Threads each get their own connection; close() closes them all.

    def worker(index: int) -> None:
        run = runtime.run("shared", budget=Budget(steps=12))
        for i in range(6):
            try:
                run.model_call({"w": index, "i": i}, fn=lambda p: ran.append(1) or _answer(p))
            except PollardError:
                run.rollback()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runtime.close()
    store.close()
    with PostgresStore(pg_dsn, store_id=store_id) as check:
        root = Runtime(check).run("shared").root_id
        assert check.totals(root)["steps"] == len(ran) == 12
    claim = BudgetClaim(root, "steps", Decimal(12), Decimal(1))
    with PostgresStore(pg_dsn, store_id=store_id) as check:
        assert check.reserve([claim], lease_seconds=5).shortfall is not None


def test_the_server_side_rule_agrees_with_admit(pg_dsn: str, store_id: str) -> None:
    """Random reserve/settle/release sequences: PostgreSQL admits exactly what MemoryStore does."""
    import random

    from pollard import MemoryStore, Node
    from pollard._core._ledger import WindowClaim, WindowEvent

    from .conftest import FakeClock

    rng = random.Random(13)
    clock = FakeClock()
    memory = MemoryStore(clock=clock)
    with PostgresStore(pg_dsn, store_id=store_id, clock=clock) as pg:
        root = Node.create("root", None, {"run": "agree"})
        for store in (memory, pg):
            store.put(root)
        held: list[tuple[str | None, str | None]] = []
        parent = root.id
        for i in range(120):
            limit = Decimal(rng.choice([3, 5, 8]))
            amount = rng.choice([None, Decimal(0), Decimal(1), Decimal(2), Decimal("0.5")])
            claims = [BudgetClaim(root.id, "steps", limit, amount)]
            windows = []
            if rng.random() < 0.3:
                windows = [WindowClaim("k", "requests", Decimal(4), 30, rng.choice([None, 1]))]
            a = memory.reserve(claims, windows, lease_seconds=20)
            b = pg.reserve(claims, windows, lease_seconds=20)
            assert a.ok == b.ok, (i, a, b)
            if a.shortfall is not None and b.shortfall is not None:
                assert (a.shortfall.reason, a.shortfall.remaining, a.shortfall.spent) == (
                    b.shortfall.reason,
                    b.shortfall.remaining,
                    b.shortfall.spent,
                )
            held.append((a.reservation_id, b.reservation_id))
            action = rng.random()
            if action < 0.4 and held:
                ra, rb = held.pop(rng.randrange(len(held)))
                node = Node.create("model_call", parent, {"i": i}, result={})
                charge = {"steps": Decimal(rng.choice([0, 1, 1, 2]))}
                events = [WindowEvent("k", "requests", Decimal(1))]
                memory.commit(
                    node, scopes=[root.id], charges=charge, windows=events, reservation_id=ra
                )
                pg.commit(node, scopes=[root.id], charges=charge, windows=events, reservation_id=rb)
                parent = node.id
            elif action < 0.6 and held:
                ra, rb = held.pop(rng.randrange(len(held)))
                for store, rid in ((memory, ra), (pg, rb)):
                    if rid is not None:
                        store.release(rid)
            clock.advance(rng.choice([0, 1, 5]))
        assert memory.totals(root.id) == pg.totals(root.id)


@pytest.mark.parametrize("durable", [True, False])
def test_steps_survive_prepared_statements_dropped_behind_the_store(
    pg_dsn: str, store_id: str, durable: bool
) -> None:
    """As behind a pooling proxy that hands the store another server session.

    Not durable, both calls of a step are prepared extended-protocol calls; durable, the
    commit is a batch with its own PREPAREs.
    """
    with (
        PostgresStore(pg_dsn, store_id=store_id, durable=durable) as store,
        Runtime(store) as runtime,
    ):
        run = runtime.run("pooled", budget=Budget(steps=5))
        run.model_call({"q": 0}, fn=_answer)
        for i in range(1, 3):
            store._local.conn.execute("DEALLOCATE ALL")
            run.model_call({"q": i}, fn=_answer)
        assert store.totals(run.root_id)["steps"] == 3
        assert [n.payload["q"] for n in store.walk(run.root_id) if "q" in n.payload] == [0, 1, 2]


def test_a_step_call_another_client_prepared_on_the_session_is_used(
    pg_dsn: str, store_id: str
) -> None:
    """Behind a pooling proxy another client may have prepared the same call on the session."""
    from pollard.stores._pgtext import RESERVE_NAME

    with (
        PostgresStore(pg_dsn, store_id=store_id, durable=False) as store,
        Runtime(store) as runtime,
    ):
        run = runtime.run("shared-session", budget=Budget(steps=5))
        run.model_call({"q": 0}, fn=_answer)
        conn = store._local.conn
        conn.execute("DEALLOCATE ALL")
        marks = ", ".join(f"${i}" for i in range(1, 16))
        conn.execute(f"PREPARE {RESERVE_NAME}_call AS SELECT * FROM {RESERVE_NAME}({marks})")
        store._local.wire.prepared.clear()  # this client has not prepared it on this session
        run.model_call({"q": 1}, fn=_answer)
        assert store.totals(run.root_id)["steps"] == 2


def test_verify_reports_nodes_no_run_reaches_on_postgres(
    pg_dsn: str, store_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    from pollard.cli import main

    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store) as runtime:
        run = runtime.run("stray")
        middle = run.note({"n": 1})
        run.note({"n": 2})
    spec = f"{pg_dsn}#{store_id}"
    assert main(["verify", spec]) == 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # delete an ancestor behind pollard
        conn.execute(
            "DELETE FROM pollard_nodes WHERE store_id = %s AND id = %s",
            (store_id, bytes.fromhex(middle.id)),
        )
    capsys.readouterr()
    assert main(["verify", spec]) == 1
    out = capsys.readouterr().out
    assert "unreachable from any run" in out and middle.id in out


def test_durable_follows_the_dsn_unless_given(pg_dsn: str, store_id: str) -> None:
    sep = "&" if "?" in pg_dsn else "?"
    cases = {
        pg_dsn: True,  # PostgreSQL's own default: a step is acknowledged after its flush
        f"{pg_dsn}{sep}options=-csynchronous_commit%3Don": True,
        f"{pg_dsn}{sep}options=-csynchronous_commit%3Dremote_apply": True,
        f"{pg_dsn}{sep}options=-csynchronous_commit%3Doff": False,
    }
    for dsn, durable in cases.items():
        with PostgresStore(dsn, store_id=store_id) as store:
            assert store.durable is durable, dsn
    with PostgresStore(pg_dsn, store_id=store_id, durable=True) as store:
        assert store.durable is True
    with pytest.raises(TypeError, match="durable"):
        PostgresStore(pg_dsn, store_id=store_id, durable="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("durable", [False, True])
def test_a_durable_commit_forces_the_flush_in_the_same_round_trip(
    pg_dsn: str, store_id: str, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    with PostgresStore(pg_dsn, store_id=store_id, durable=durable) as store:
        sent: list[list[str]] = []
        batch = store._batch

        def recorded(queue: Any) -> Any:
            sent.append([sql for sql, _ in queue.items])
            return batch(queue)

        monkeypatch.setattr(store, "_batch", recorded)
        with Runtime(store) as runtime:
            run = runtime.run("flush", budget=Budget(steps=5))
            node = run.model_call({"q": 0}, fn=_answer)
        assert store.totals(run.root_id)["steps"] == 1
        assert store.find(node.id) is not None
    from pollard.stores._pgtext import COMMIT_FUNCTION, COMMIT_NAME

    commits = [s for s in sent if any(COMMIT_NAME in sql for sql in s)]
    assert len(commits) == 2  # the run's root and its step
    # The step's transaction never waits for a disk flush, so its row locks are not held
    # through one: the commit function turns the flush off for its own transaction.
    assert "set_config('synchronous_commit', 'off', true)" in COMMIT_FUNCTION
    for statements in commits:
        flushes = [i for i, sql in enumerate(statements) if "pg_logical_emit_message(true" in sql]
        if durable:  # the flush is a transaction of its own, after the step's COMMIT
            assert statements[0] == "BEGIN"  # no SET LOCAL: the function turns the flush off
            assert not any(sql.startswith("SET LOCAL") for sql in statements)
            assert flushes == [len(statements) - 1]
            assert statements[-2] == "COMMIT"
        else:  # one statement: the function call is its own transaction
            assert flushes == []
            assert len(statements) == 1


def _hold(store: PostgresStore) -> str:
    admission = store.reserve(
        [BudgetClaim(scope="scope-a", meter="steps", limit=Decimal(1), amount=Decimal(1))],
        lease_seconds=60,
    )
    assert admission.reservation_id is not None
    return admission.reservation_id


def test_a_commit_whose_hold_was_lost_is_refused_on_another_session(
    pg_dsn: str, store_id: str
) -> None:
    """A crash that loses an acknowledged hold never lets its step's charge past the limit."""
    import psycopg

    from pollard._core._node import Node, NodeKind

    with PostgresStore(pg_dsn, store_id=store_id) as store:
        root = Node.create(NodeKind.ROOT, None, {"label": "lost"})
        store.put(root)
        rid = _hold(store)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:  # the crash loses the hold
            admin.execute(
                "DELETE FROM pollard_reservations WHERE store_id = %s AND id = %s",
                (store_id, rid),
            )
        # Another writer takes the capacity the lost hold no longer counts.
        other = _hold(store)
        store._discard()  # the crash ended the session: the commit goes on a new one
        step = Node.create(NodeKind.MODEL_CALL, root.id, {"q": 0})
        with pytest.raises(PollardError, match="no longer exists") as info:
            store.commit(
                step, scopes=["scope-a"], charges={"steps": Decimal(1)}, reservation_id=rid
            )
        assert "cannot be overspent" in (info.value.hint or "")
        assert store.find(step.id) is None
        assert store.totals("scope-a") == {}
        winner = Node.create(NodeKind.MODEL_CALL, root.id, {"q": 1})
        assert store.commit(
            winner, scopes=["scope-a"], charges={"steps": Decimal(1)}, reservation_id=other
        )
        assert store.totals("scope-a") == {"steps": Decimal(1)}  # never past the limit


def test_a_commit_on_another_session_settles_a_hold_that_survived(
    pg_dsn: str, store_id: str
) -> None:
    from pollard._core._node import Node, NodeKind

    with PostgresStore(pg_dsn, store_id=store_id) as store:
        root = Node.create(NodeKind.ROOT, None, {"label": "kept"})
        store.put(root)
        rid = _hold(store)
        result: list[bool] = []
        step = Node.create(NodeKind.MODEL_CALL, root.id, {"q": 0})

        def settle() -> None:  # another thread: its own session, so the guard checks the row
            result.append(
                store.commit(
                    step, scopes=["scope-a"], charges={"steps": Decimal(1)}, reservation_id=rid
                )
            )

        thread = threading.Thread(target=settle)
        thread.start()
        thread.join()
        assert result == [True]
        assert store.totals("scope-a") == {"steps": Decimal(1)}
        assert row_count(pg_dsn, "reservations", store_id) == 0


def test_a_rollback_reads_the_ancestry_in_one_query(
    pg_dsn: str, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store) as runtime:
        run = runtime.run("deep")
        nodes = [run.note({"i": i}) for i in range(30)]
        calls = _count_batches(store, monkeypatch)
        target = run.rollback(steps=10)
        assert target.id == nodes[-11].id
        assert len(calls) <= 2, calls  # the chain in one query, then the target node
        assert store.ancestry(nodes[5].id)[-1] == run.root_id
        assert store.ancestry(nodes[5].id)[:2] == [nodes[5].id, nodes[4].id]
        with pytest.raises(KeyError):
            store.ancestry("ab" * 32)


def test_a_claim_is_flushed_even_when_the_dsn_turns_flushing_off(
    pg_dsn: str, store_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sep = "&" if "?" in pg_dsn else "?"
    dsn = f"{pg_dsn}{sep}options=-csynchronous_commit%3Doff"
    with PostgresStore(dsn, store_id=store_id) as store:
        assert store.durable is False
        seen: list[str] = []
        transaction = store._transaction

        @contextlib.contextmanager
        def watched() -> Iterator[Any]:
            with transaction() as cur:
                yield cur
                row = cur.execute("SELECT current_setting('synchronous_commit')").fetchone()
                seen.append(row[0])

        monkeypatch.setattr(store, "_transaction", watched)
        assert store.claim("confirm:1", "a") == "a"
        assert store.claim("confirm:1", "b") == "a"  # exactly one winner
    assert seen == ["on", "on"]


def test_the_flush_transaction_waits_for_the_disk(pg_dsn: str) -> None:
    """The durable path's extra transaction writes WAL, so its commit really flushes."""
    import psycopg

    from pollard.stores.postgres import _FLUSH

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")  # as a non-durable DSN would
        row = conn.execute(_FLUSH).fetchone()  # one statement: its own transaction
        assert row is not None
        flushed = conn.execute(
            "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (str(row[1]),)
        ).fetchone()
    assert flushed == (True,)  # acknowledged only once its WAL was on disk


def test_a_step_function_body_never_changes_under_its_name() -> None:
    """A store creates a step function only when its name is missing, so stores made by an
    earlier version keep the body they got: an edited body must come with a new name (``_vN``).
    This pins each released body's digest to its name."""
    import hashlib

    from pollard.stores._pgtext import FUNCTION_NAMES, FUNCTIONS

    released = {
        "pollard_reserve_v2": "8cc0efbca1793b54c7aa3282c91b36dd3520b1ef7e55f211a8e7ebec271bc506",
        "pollard_commit_v1": "73b05fdc089d8b801679495e2e3f0a961aefeccd7db8b6a401ed76bc31f967d7",
    }
    for name, body in zip(FUNCTION_NAMES, FUNCTIONS, strict=True):
        assert f"FUNCTION {name}(" in body
        digest = hashlib.sha256(body.encode()).hexdigest()
        assert released.get(name, digest) == digest, f"{name}'s body changed: give it a new name"


def test_hot_path_literals_round_trip_through_the_server(pg_dsn: str) -> None:
    """The store's own quoting reads back exactly what the driver's would."""
    import psycopg

    from pollard.stores._pgtext import literal

    tricky = ["", "it's", "a\\b", 'say "hi"', "{x,y}", "NULL", "é ☃ 𝄞", "''\\\\'", " lead", "a,b"]
    cases: list[tuple[Any, str]] = [(s, "text") for s in tricky]
    cases += [
        (tricky, "text[]"),
        ([], "text[]"),
        (b"\x00\xff'\\", "bytea"),
        (Decimal("1E+3"), "numeric"),
        (Decimal("-0.000001"), "numeric"),
        ([Decimal("1"), Decimal("2.50")], "numeric[]"),
        (float("inf"), "float8"),
        (0.1, "float8"),
        ([1.5, 2.0], "float8[]"),
        (-(2**63), "bigint"),
        ([2**63 - 1, -1], "bigint[]"),
        (None, "text"),
    ]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for value, kind in cases:
            text = literal(value)
            assert text is not None, value
            row = conn.execute(f"SELECT ({text})::{kind}").fetchone()
            assert row is not None
            expected = [Decimal(str(v)) for v in value] if kind == "numeric[]" else value
            assert row[0] == expected, (value, text, row[0])
    assert literal("nul\x00") is None  # left to the driver, which refuses it as before
    assert literal(["ok", "nul\x00"]) is None
    assert literal(True) is None and literal((1, 2)) is None


def test_hot_path_text_params_round_trip_through_the_server(pg_dsn: str) -> None:
    """The bound parameters of the prepared step calls read back exactly as given.

    Arrays of several plain strings take the one-pass path and arrays holding a quote or a
    backslash the escaping one (a regression: the separator's own quotes once sent every
    array of two or more strings down the escaping path); both must mean the same to the
    server.
    """
    import psycopg

    from pollard.stores._pgtext import text_params

    plain = ["343c5d01", "steps", "", "NULL", "{x,y}", "a,b", " lead", "é ☃ 𝄞"]
    tricky = [*plain, "it's", "a\\b", 'say "hi"', "''\\\\'", '\\"']
    cases: list[tuple[Any, str]] = [
        ('it\'s \\ "q"', "text"),
        (plain, "text[]"),
        (tricky, "text[]"),
        (["only"], "text[]"),
        (['"'], "text[]"),
        ([], "text[]"),
        (b"\x00\xff'\\", "bytea"),
        ([Decimal("1"), Decimal("2.50")], "numeric[]"),
        ([1.5, 2.0], "float8[]"),
        ([2**63 - 1, -1], "bigint[]"),
        (None, "text"),
    ]
    params = text_params([value for value, _ in cases])
    assert params is not None
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        pgconn = conn.pgconn
        for (value, kind), param in zip(cases, params, strict=True):
            res = pgconn.exec_params(f"SELECT $1::{kind}::text".encode(), [param])
            assert res.error_message == b"", (value, res.error_message)
            raw = res.get_value(0, 0)
            row = conn.execute(f"SELECT %s::{kind}::text", (value,)).fetchone()
            assert row is not None
            expected = row[0]  # the driver's own adaptation, as the server reads it
            assert (None if raw is None else raw.decode()) == expected, (value, param)
    assert text_params(["ok", "nul\x00"]) is None  # left to the driver, which refuses NUL
    assert text_params([["a", 1]]) is None and text_params([True]) is None


def test_after_a_restart_async_steps_fail_once_not_once_per_worker_thread(
    pg_dsn: str, store_id: str
) -> None:
    # AsyncRuntime offloads a PostgreSQL store's I/O to the loop's worker threads, one connection
    # each. A restart kills them all; the first step that notices reports it, and every other
    # thread replaces its connection before its next use instead of failing a step of its own.
    import asyncio

    import psycopg

    from pollard import AsyncRuntime

    async def answer(payload: Any) -> dict[str, Any]:
        return _answer(payload)

    async def main() -> list[str]:
        with PostgresStore(pg_dsn, store_id=store_id) as store:
            async with AsyncRuntime(store) as runtime:
                run = runtime.run("restart", budget=Budget(steps=40))
                await asyncio.gather(
                    *(run.fork().model_call({"q": i}, fn=answer) for i in range(12))
                )
                pids = [conn.info.backend_pid for _, conn in store._connections]
                assert len(pids) > 1  # several worker threads, several connections
                with psycopg.connect(pg_dsn, autocommit=True) as admin:
                    for pid in pids:
                        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                outcomes = []
                for i in range(12, 24):
                    try:
                        await run.model_call({"q": i}, fn=answer)
                        outcomes.append("ok")
                    except PollardError as exc:
                        assert "lost the connection" in str(exc)
                        outcomes.append("lost")
                assert store.totals(run.root_id)["steps"] == 12 + outcomes.count("ok")
                return outcomes

    outcomes = asyncio.run(main())
    assert outcomes.count("lost") <= 1
    assert outcomes[-10:] == ["ok"] * 10


def test_a_database_that_does_not_exist_is_named_not_called_a_restart(pg_dsn: str) -> None:
    import psycopg

    missing = psycopg.conninfo.make_conninfo(pg_dsn, dbname="pollard_no_such_db")
    with pytest.raises(PollardError, match="rejected the DSN") as info:
        PostgresStore(missing, store_id="x")
    assert "pollard_no_such_db" in str(info.value)  # the server's own words name it
    assert "restarted" not in str(info.value) + (info.value.hint or "")
    assert "database name" in (info.value.hint or "")


PG_LEDGER_DAMAGE = {
    # Read by the reservation (the budgeted meter's total, a live hold, a window's events).
    "total_text": ("UPDATE pollard_ledger SET total = 'abc' WHERE meter = 'steps'", "abc"),
    "total_nan": ("UPDATE pollard_ledger SET total = 'NaN' WHERE meter = 'steps'", "'NaN'"),
    "reservation_text": (
        "INSERT INTO pollard_reservations (store_id, id, expires, claims) "
        "VALUES (%(store)s, 'r1', 1e12, 'garbage')",
        "json",
    ),
    "reservation_amount": (
        "INSERT INTO pollard_reservations (store_id, id, expires, claims) "
        """VALUES (%(store)s, 'r1', 1e12, '[["b", "x", "steps", "zz"]]')""",
        "zz",
    ),
    "window_amount": ("UPDATE pollard_window_events SET amount = 'zz'", "zz"),
    # Not budgeted, so only the commit reads it (adding the step's charge to it).
    "unbudgeted_total": ("UPDATE pollard_ledger SET total = 'abc' WHERE meter = 'requests'", "abc"),
}


@pytest.mark.parametrize("case", sorted(PG_LEDGER_DAMAGE))
def test_a_damaged_postgres_ledger_row_is_an_integrity_error_with_a_hint(
    case: str, pg_dsn: str, store_id: str
) -> None:
    """A row pollard never wrote is an IntegrityError naming the store, not a driver error."""
    import psycopg

    from pollard import WindowMeter
    from pollard.errors import IntegrityError
    from pollard.meters import StepMeter

    meters = [StepMeter(), WindowMeter("requests", 100, 3600)]
    step = {"text": "x"}
    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store, meters=meters) as rt:
        rt.run("damaged", budget=Budget(steps=10)).model_call({"i": 0}, fn=lambda _p: step)
    statement, message = PG_LEDGER_DAMAGE[case]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        if "%(store)s" not in statement:
            statement += (
                " AND store_id = %(store)s"
                if " WHERE " in statement
                else (" WHERE store_id = %(store)s")
            )
        conn.execute(statement, {"store": store_id})
    with PostgresStore(pg_dsn, store_id=store_id) as store, Runtime(store, meters=meters) as rt:
        run = rt.run("damaged", budget=Budget(steps=10))
        with pytest.raises(IntegrityError, match=message) as caught:
            run.model_call({"i": 1}, fn=lambda _p: step)
        assert caught.value.hint is not None and "restore the store" in caught.value.hint
        assert "postgresql://" not in str(caught.value)
        # The store stays usable for reads after the refusal.
        assert store.get(run.root_id) is not None
