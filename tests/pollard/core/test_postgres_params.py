"""PostgresStore's step parameters: the encoded shortcuts send the bytes of the plain encoding.

A budgeted step's reservation reuses the text parameters of its claim set, and its commit
writes the node's parameters directly (issue 26: client CPU per step). Both must be the bytes
`text_params` makes of the statement's values, which the previous store sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from pollard import PostgresStore
from pollard._core._ledger import BudgetClaim, WindowClaim, WindowEvent
from pollard._core._node import Node, NodeKind
from pollard.stores._pgtext import text_params
from tests.pollard._postgres import drop_store, fresh_store_id

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    name = fresh_store_id("params")
    with PostgresStore(pg_dsn, store_id=name, durable=False) as opened:
        yield opened
    drop_store(pg_dsn, name)


def _plain_commit(store: PostgresStore, *args: Any) -> list[bytes | None] | None:
    queue, at = store._commit_queue(*args)
    assert len(queue.items) == 1 and at == 0
    return text_params(queue.items[0][1])


def test_a_commit_sends_the_bytes_of_its_values(store: PostgresStore) -> None:
    root = Node.create(NodeKind.ROOT, None, {"run": "p"})
    step = Node.create(NodeKind.MODEL_CALL, root.id, {"q": "é\"'\\", "t": 0.25}, attempt=2)
    step = step.with_result({"text": "ok ✓", "n": 1.5e-7}, {"created_at": "x", "f": 0.1})
    note = Node.create(NodeKind.NOTE, step.id, [1, None, "a,b}"], meta={"k": [1, 2]})
    scopes = (root.id, 'shared:team "a"', root.id)
    charges = {"steps": Decimal(1), "usd": Decimal("0.0000125"), "tokens": Decimal("1E+3")}
    windows = (WindowEvent("rpm:key", "requests", Decimal(1)),)
    cases: list[tuple[Any, ...]] = [
        (root, (), {}, (), (), None, None),
        (step, scopes, charges, windows, (), None, "w.r1"),
        (step, scopes, charges, (), (), "w.r2", "w.r2"),
        (note, (root.id,), {"steps": Decimal(1)}, (), (1765.5,), None, None),
        (note, (root.id,), {"steps": Decimal(1)}, (), (), None, None),  # the arrays cached
    ]
    for case in cases:
        fast = store._commit_params(*case)
        assert fast is not None
        assert list(fast) == _plain_commit(store, *case)
        assert fast.raw() == store._commit_queue(*case)[0].items[0][1]


def test_a_commit_the_shortcut_does_not_cover_takes_the_plain_path(
    store: PostgresStore,
) -> None:
    root = Node.create(NodeKind.ROOT, None, {"run": "p"})
    big = Node.create(NodeKind.MODEL_CALL, root.id, {"q": "x" * 2000})  # interned
    read = Node(id=root.id, parent=None, kind=NodeKind.ROOT, attempt=0, payload={"run": "p"})
    for node in (big, read):
        assert store._commit_params(node, (root.id,), {}, (), (), None, None) is None
    nul = "w.\x00"
    assert store._commit_params(root, (), {}, (), (), nul, None) is None


def test_a_reservation_reuses_the_bytes_of_its_claim_set(store: PostgresStore) -> None:
    claims = [
        BudgetClaim("a" * 64, "steps", Decimal(10), Decimal(1)),
        BudgetClaim('shared:"t"', "usd", Decimal("2.5"), Decimal("0.001"), True),
        BudgetClaim("a" * 64, "tokens", Decimal(10**12), None),
    ]
    windows = [WindowClaim("rpm:k", "requests", Decimal(60), 60, Decimal(1))]
    held = [("b", "a" * 64, "steps", Decimal(1)), ("b", 'shared:"t"', "usd", Decimal("0.001"))]
    for rid in ("w.first", "w.second", "w.third"):  # the first encodes, the others reuse
        for case in ((claims, windows, 60.0, held), (claims, [], 30.0, [])):
            sent = store._reserve_params(*case, rid)
            assert list(sent) == text_params(store._reserve_values(*case, rid))
    # Equal amounts written differently are different texts in the held JSON: not reused.
    one = [BudgetClaim("s", "steps", Decimal(5), Decimal("1"))]
    one_0 = [BudgetClaim("s", "steps", Decimal(5), Decimal("1.0"))]
    for claim_set in (one, one_0, one):
        held_set = [("b", "s", "steps", claim_set[0].amount)]
        sent = store._reserve_params(claim_set, [], 60.0, held_set, "w.x")
        assert list(sent) == text_params(
            store._reserve_values(claim_set, [], 60.0, held_set, "w.x")
        )


def test_reservation_ids_are_read_ahead_and_never_shared_with_a_forked_child() -> None:
    import os

    from pollard.stores import postgres

    ids = {postgres._random_id() for _ in range(1_000)}  # several read-aheads
    assert len(ids) == 1_000
    assert all(len(rid) == 32 and int(rid, 16) >= 0 for rid in ids)
    postgres._random_id()  # the read-ahead holds the parent's next ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, postgres._random_id().encode("ascii"))
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode("ascii")
    os.close(read)
    os.close(write)
    assert child != postgres._random_id()  # the child did not take the parent's next one
