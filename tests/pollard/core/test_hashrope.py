"""HashRopeStore specifics: the op log round-trips and verifies."""

from __future__ import annotations

import pytest

from pollard import Budget, HashRopeStore, IntegrityError, Runtime, seal


def test_log_round_trip_keeps_nodes_ledger_and_meta() -> None:
    store = HashRopeStore()
    run = Runtime(store).run("hashrope-demo", budget=Budget(steps=5))
    run.note({"checkpoint": "stored in a hashrope log"})
    run.model_call(
        {"model": "m", "t": 0.7},
        fn=lambda p: {"text": "x", "usage": {"input_tokens": 2, "output_tokens": 3}},
    )
    run.prune()
    snapshot = store.to_bytes()
    reopened = HashRopeStore(snapshot)
    assert reopened.get(run.root_id).payload == {"run": "hashrope-demo"}
    assert seal(reopened, run.root_id).digest == seal(store, run.root_id).digest
    assert reopened.totals(run.root_id) == store.totals(run.root_id)
    assert reopened.to_bytes() == snapshot
    assert store.validate_log() == len(snapshot.splitlines())
    assert isinstance(store.content_hash(), int) and store.content_hash() != 0


def test_compact_rewrites_the_log_as_puts() -> None:
    store = HashRopeStore()
    run = Runtime(store).run("gc")
    for i in range(3):
        run.note({"i": i})
    store.update_meta(run.cursor_id, {"x": 1})
    before = store.to_bytes()
    assert store.compact() == 0
    after = store.to_bytes()
    assert b'"op":"meta"' in before and b'"op":"meta"' not in after
    assert HashRopeStore(after).get(run.cursor_id).meta["x"] == 1


def test_tampered_log_is_rejected() -> None:
    store = HashRopeStore()
    Runtime(store).run("t").note({"a": 1})
    forged = store.to_bytes().replace(b'"a":1', b'"a":2')
    with pytest.raises(IntegrityError):
        HashRopeStore(forged)


@pytest.mark.parametrize(
    "data",
    [
        b"not json\n",
        b"[1, 2]\n",
        b'{"op": "put", "node": 5}\n',
        b'{"op": "put", "node": {"kind": "note"}}\n',
        b'{"op": "commit", "node": {}, "scopes": 1, "charges": {}}\n',
        b'{"op": "put", "node": {"id": "x", "parent": null, "kind": [[]], "attempt": 0, '
        b'"payload": {}, "result": null, "meta": {}}}\n',
    ],
)
def test_a_malformed_log_line_is_an_integrity_error(data: bytes) -> None:
    pytest.importorskip("hashrope")
    with pytest.raises(IntegrityError, match="op log line 1"):
        HashRopeStore(data)
