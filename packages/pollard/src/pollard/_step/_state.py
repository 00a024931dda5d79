"""`CursorState`: where one run's steps attach and what it spent, read by every stage.

The stage modules (admission, replay, execute, settle, charged) take a `CursorState`; the cursor
(`pollard._step._cursor.RunState`) subclasses it with the primitives that drive those stages. The
state lives below the stages and the primitives above them, so no stage imports the cursor, even
for typing (``tests/test_pollard_layers.py`` checks the package has no import cycle).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pollard._core._amounts import exact_map, plain_map
from pollard._core._ledger import ZERO
from pollard._core._node import Node
from pollard._step._context import RuntimeCore, Scope
from pollard._step._effects import Step, io
from pollard.errors import WriterConflict
from pollard.stores._host import holder_text, liveness

if TYPE_CHECKING:
    from pollard._core._store import Store

__all__ = ["CursorState"]

_SPENT_LOCK = threading.Lock()


class CursorState:
    """The cursor and accounting of one run (or branch), without the step primitives.

    The stage modules take this type; `pollard._step._cursor.RunState` adds the primitives that
    drive them.

    Attributes:
        rt: The runtime core.
        label: The run label.
        root_id: The root node id.
        cursor_id: The node new steps attach to.
        depth: The cursor depth (the root is 0).
        scopes: Budget scopes, outermost first (the root scope is always first).
        spent: Charges settled through this run object, by meter.
        avoided: Charges served from recordings instead of executed, by meter.
        branch_counts: Branches made from each node by this run object.
        owner: The runtime object that opened the run (kept alive while the run is used).
        leased: The node this run holds the append lease of (one writer per node), or None.
        own_cursor: Whether this runtime committed the cursor node itself.
        lapses: The writer's lease lapse count when this run last took its cursor.
        actor: Who makes this cursor's registered tool calls when a call names no actor (the
            team agent this cursor acts for; what policies see as ``PolicyContext.actor``), or
            None. Branches and forks inherit it.
        tools: The tools this cursor may call (an agent's permitted set, enforced by the
            registry firewall before dispatch), or None for any registered tool.
        floor: The node this cursor may not move above (a team agent's anchor: its budget
            scopes and identity hold only inside its subtree), or None.
        shared: Whether the run's root is shared by many writers (``run(..., shared=True)``).
    """

    __slots__ = (
        "_scope_ids",
        "_scopes",
        "actor",
        "avoided",
        "branch_counts",
        "cursor_id",
        "depth",
        "floor",
        "label",
        "lapses",
        "leased",
        "own_cursor",
        "owner",
        "root_id",
        "rt",
        "shared",
        "spent",
        "tools",
    )

    def __init__(
        self,
        rt: RuntimeCore,
        label: str,
        root_id: str,
        cursor_id: str,
        depth: int,
        scopes: tuple[Scope, ...],
    ) -> None:
        self.rt = rt
        self.label = label
        self.root_id = root_id
        self.cursor_id = cursor_id
        self.depth = depth
        self.scopes = scopes
        self.spent: dict[str, Decimal] = {}
        self.avoided: dict[str, Decimal] = {}
        self.branch_counts: dict[str, int] = {}
        # Holding the runtime keeps one created inline (``Runtime("runs.db").run(...)``) and its
        # store open for as long as the run is used.
        self.owner: Any = None
        # One writer per node: the cursor this run holds the append lease of, and whether this
        # runtime committed the cursor itself (then it holds the node without asking).
        self.leased: str | None = None
        self.own_cursor = False
        # The writer's lapse count when this run last took (or committed) its cursor: after a
        # lapse (a paused process whose lease ended) its nodes are taken again, never assumed.
        self.lapses = rt.keeper.writer_lapses
        self.actor: str | None = None
        self.tools: frozenset[str] | None = None
        self.floor: str | None = None
        # A root opened with shared=True takes no append lease: many workers start their own
        # lines under one label (each line below the root still has one writer).
        self.shared = False

    @property
    def store(self) -> Store:
        """The runtime's store."""
        return self.rt.store

    @property
    def mode(self) -> str:
        """``record``, ``hybrid`` or ``replay``."""
        return self.rt.mode

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """Budget scopes, outermost first (the root scope is always first)."""
        return self._scopes

    @scopes.setter
    def scopes(self, scopes: tuple[Scope, ...]) -> None:
        self._scopes = scopes
        # Charges settle into the root, every budgeted branch anchor and every team or agent
        # anchor (their totals are the per-agent accounting); computed once per change of
        # scopes rather than on every step.
        self._scope_ids = tuple(
            scope.id for i, scope in enumerate(scopes) if i == 0 or scope.limits or scope.tally
        )

    @property
    def limited(self) -> bool:
        """Whether a budget or a rate window can refuse this run's steps."""
        return any(scope.limits for scope in self.scopes) or bool(self.rt.windows)

    def move(self, node: Node) -> None:
        """Put the cursor on ``node``, a child of the current cursor."""
        self.cursor_id = node.id
        self.depth += 1
        self.own_cursor = False

    def scope_ids(self) -> tuple[str, ...]:
        """The scopes a charge settles into: the root and every budgeted branch anchor."""
        return self._scope_ids

    def add_spent(self, charges: Mapping[str, Decimal]) -> None:
        """Count settled charges as spent by this run object.

        Locked: a cancelled step's finished commit is counted from a worker thread.
        """
        with _SPENT_LOCK:
            spent = self.spent
            for name, amount in charges.items():
                spent[name] = spent.get(name, ZERO) + amount

    def writer_lapsed(self) -> bool:
        """Whether this writer's lease may have lapsed since this run last took its cursor."""
        return self.rt.writer_stale() or self.rt.keeper.writer_lapses != self.lapses

    def check_writer(self) -> Step:
        """Refuse (`WriterConflict`) when another live writer appends under the cursor.

        Every node has one writer at a time, the run's root included, unless the run was opened
        with ``shared=True`` (many workers start their own lines under one label). A node this
        runtime committed is its own; any other is taken once per runtime (a fencing token in
        the store), and again when this writer's liveness may have lapsed meanwhile (a paused
        process whose node another writer took over).
        """
        rt = self.rt
        parent = self.cursor_id
        at_root = parent == self.root_id
        if rt.mode == "replay" or (at_root and self.shared):
            return
        lapses = rt.keeper.writer_lapses
        stale = rt.writer_stale() or lapses != self.lapses
        if not stale and (
            self.own_cursor or self.leased == parent or rt.appending.get(parent) == lapses
        ):
            self.leased = parent
            return
        token = yield io(rt.store.take_append, parent, rt.writer)
        if not token:
            rt.appending.pop(parent, None)
            found: dict[str, Any] | None = yield io(_holder_of, rt.store, parent)
            holder = None if found is None else found.get("holder")
            state = liveness(holder)
            who = holder_text(holder, state)
            lease = 0.0 if found is None else float(found.get("lease_left") or 0.0)
            host = holder.get("host") if isinstance(holder, dict) else None
            pid = holder.get("pid") if isinstance(holder, dict) else None
            known: dict[str, Any] = {
                "host": host if isinstance(host, str) else None,
                "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                "alive": True if state == "alive" else None,
            }
            if state == "alive" and known["pid"] == os.getpid():
                wait = "close this process's other runtime on this store first"
            elif state == "alive":
                wait = (
                    f"wait for process {known['pid']} to finish (or stop it: a writer killed on "
                    "this host is taken over at once)"
                )
            else:
                wait = (
                    "wait for the other process to finish (its lease ends when it stops; one "
                    "that crashed where this host cannot check it holds the run until its lease "
                    f"ends, within {lease:.0f} s unless it is still renewed)"
                )
            if at_root:
                raise WriterConflict(
                    f"another process is writing run {self.label!r} (it holds the run's root, "
                    f"node {parent}; {who}): two writers under one root would fork the run, so "
                    "this one does not write",
                    parent,
                    hint=f"{wait}, or use another run label; for many workers on one label, "
                    "open the run with shared=True in every worker",
                    host=known["host"],
                    pid=known["pid"],
                    alive=known["alive"],
                )
            raise WriterConflict(
                f"another writer is appending to run {self.label!r} at node {parent} ({who}): "
                "two processes at one cursor would fork the run, so this one does not write",
                parent,
                hint=f"let one process write this run at a time: {wait}; or start your own "
                "line with run.branch(...) or another run label",
                host=known["host"],
                pid=known["pid"],
                alive=known["alive"],
            )
        rt.appending[parent] = lapses  # every cursor of this runtime is the same writer
        self.leased = parent
        self.lapses = lapses

    # -- reads ---------------------------------------------------------------------------------

    def ancestors(self, node_id: str) -> list[str]:
        """Ids from ``node_id`` up to the run root (inclusive), nearest first."""
        # SQL stores read the whole chain in one query (a round trip per node on PostgreSQL
        # made every rollback cost as many round trips as the run was deep).
        ancestry = getattr(self.rt.store, "ancestry", None)
        if ancestry is not None:
            chain = list(ancestry(node_id))
            if self.root_id in chain:
                return chain[: chain.index(self.root_id) + 1]
            raise ValueError(f"node {node_id} is not in run {self.label!r}")
        chain = []
        current: str | None = node_id
        while current is not None:
            chain.append(current)
            if current == self.root_id:
                return chain
            current = self.rt.store.get(current).parent
        raise ValueError(f"node {node_id} is not in run {self.label!r}")

    def report(self, *, exact: bool = False) -> dict[str, dict[str, Any]]:
        """Spent and avoided charges of this run object, plus the root scope's ledger totals.

        Plain numbers by default; ``exact=True`` gives exact decimal strings. Every meter of
        the runtime is listed, at zero when nothing was charged to it, so a report reads the
        same whether or not this run object spent anything (a replay, a refused step).
        """
        form = exact_map if exact else plain_map
        zeros = dict.fromkeys(self.rt.meter_names, Decimal(0))
        return {
            "spent": form(zeros | dict(self.spent)),
            "avoided": form(zeros | dict(self.avoided)),
            "total": form(zeros | dict(self.rt.store.totals(self.root_id))),
        }


def _holder_of(store: Store, node_id: str) -> dict[str, Any] | None:
    """Who holds ``node_id`` (for a refusal's message only), or None when it cannot be read."""
    read = getattr(store, "append_holder", None)  # a custom store may predate it
    if read is None:
        return None
    try:
        found = read(node_id)
    except Exception:  # the refusal stands; only its description is lost
        return None
    return found if isinstance(found, dict) else None
