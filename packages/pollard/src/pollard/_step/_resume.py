"""Resume: a call dispatched before (by an interrupted process) is never charged twice.

A resumed step (hybrid mode, or ``model_call(..., resume=True)``) asks the ledger first:

* an answer already stored at the step's id is served (the call is not sent again);
* otherwise the charges of the call's earlier *cancelled* dispatches (the ``call_cancelled``
  notes beside it, charged what the call may have cost) count toward this dispatch: the
  budget holds only what the call may cost beyond them, and the answer is charged only what it
  cost beyond them. A prompt that was cancelled in flight and then resumed is therefore charged
  once (one step, its cost), not once per dispatch.

Failed dispatches (``call_failed``) are not credited: the provider answered them, so they are
calls of their own.

The notes are found by id, not by listing siblings (a fan-out's root has one child per prompt):
a cancellation note's id is a pure function of the call's id fields and its error type, and
the notes of one call take attempts 0, 1, 2, ... (`settle.commit_new`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

from pollard._core._amounts import read_charges
from pollard._core._ledger import ZERO
from pollard._core._node import Node, NodeKind
from pollard._step._effects import Step, io

if TYPE_CHECKING:
    from pollard._core._store import Store
    from pollard._step._state import CursorState

__all__ = ["CANCELLED_ERRORS", "credit", "lookup", "net_charges"]

CANCELLED_ERRORS = ("CancelledError", "KeyboardInterrupt")
"""The error types a ``call_cancelled`` note names for a cancelled task and a Ctrl-C."""


def lookup(state: CursorState, node: Node) -> Step:
    """``(answer, credit)`` of a resumed step, in one store effect (one hop to the I/O thread).

    ``answer`` is the stored answer of ``node`` (a node at its id with a result) or None; when
    there is none, ``credit`` holds the charges of its earlier cancelled dispatches.
    """
    return (yield io(_lookup, state.rt.store, node))


def credit(state: CursorState, node: Node) -> Step:
    """The charges of ``node``'s earlier cancelled dispatches, by meter (empty: none)."""
    return (yield io(_credit, state.rt.store, node))


def _lookup(store: Store, node: Node) -> tuple[Node | None, dict[str, Decimal]]:
    found = store.find(node.id)
    if found is not None and found.result is not None:
        return found, {}
    return None, _credit(store, node)


def _credit(store: Store, node: Node) -> dict[str, Decimal]:
    digest = hashlib.sha256(node.canonical_payload or b"").hexdigest()
    total: dict[str, Decimal] = {}
    for error in CANCELLED_ERRORS:
        payload = {
            "event": "call_cancelled",
            "kind": node.kind.value,
            "attempt": node.attempt,
            "payload_digest": digest,
            "error": error,
        }
        attempt = 0
        while True:
            note = store.find(Node.create(NodeKind.NOTE, node.parent, payload, attempt=attempt).id)
            if note is None:
                break
            for name, amount in read_charges(note.meta).items():
                total[name] = total.get(name, ZERO) + amount
            attempt += 1
    return {name: amount for name, amount in total.items() if amount > 0}


def net_charges(
    charges: Mapping[str, Decimal], credit: Mapping[str, Decimal]
) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """The charges beyond the credit, and the part of the credit they used, by meter.

    A dispatch that cost less than its cancelled predecessors were charged is charged nothing
    more (the earlier charge stands: the cancelled call may have cost it).
    """
    net: dict[str, Decimal] = {}
    used: dict[str, Decimal] = {}
    for name, amount in charges.items():
        held = credit.get(name, ZERO)
        if amount > held:
            net[name] = amount - held
        if held > 0:
            used[name] = min(amount, held)
    return net, used
