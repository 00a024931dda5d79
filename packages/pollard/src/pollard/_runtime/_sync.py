"""``Runtime`` and ``Run``: the synchronous shell over the step machine (`pollard._step`).

The shells are the front door: they open the store, choose the default meters and, with a
registry, build the governance gate (`Firewall`) that the step machine is handed.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

from pollard._core._amounts import plain
from pollard._core._budget import Budget
from pollard._core._ledger import utc_now_iso
from pollard._core._node import Node, NodeKind, check_attempt
from pollard._core._store import Store
from pollard._governance._approvals import actor_name, is_request
from pollard._governance._firewall import Firewall
from pollard._step._charged import record_charged
from pollard._step._context import RuntimeCore, Scope
from pollard._step._cursor import PAYLOAD, RunState
from pollard._step._effects import Emit, Step, drive_sync, io
from pollard._step._protocols import Gate, Meter
from pollard._step._settle import DISPATCH_EVENTS
from pollard.errors import MissingRecording, PollardError

__all__ = [
    "ReplayMode",
    "Run",
    "RunView",
    "Runtime",
    "RuntimeBase",
    "branch_state",
    "check_limits",
    "run_state",
    "tool_step",
]

if TYPE_CHECKING:
    from pollard.policy import Policy
    from pollard.registry import Registry


class ReplayMode(str, Enum):
    """How a runtime treats recorded steps.

    * ``RECORD``: always execute and record. An identical call under the same parent is the
      same node: a repeat runs and is charged, and the recorded node stands.
    * ``HYBRID``: serve a recorded result when the step's id exists; otherwise execute and record.
    * ``REPLAY``: never call your function and never write; a missing step raises
      `MissingRecording`.
    """

    RECORD = "record"
    HYBRID = "hybrid"
    REPLAY = "replay"

    def __str__(self) -> str:
        return self.value


def _mode(value: str | ReplayMode) -> str:
    try:
        return ReplayMode(value).value
    except ValueError:
        raise ValueError(f"mode must be 'record', 'hybrid' or 'replay', got {value!r}") from None


def _default_meters(meters: Iterable[Meter] | None) -> list[Meter]:
    from pollard.meters import DepthMeter, StepMeter, TokenMeter, WallClockMeter

    if meters is None:
        return [StepMeter(), DepthMeter(), WallClockMeter(), TokenMeter()]
    chosen = list(meters)
    names: set[str] = set()
    for meter in chosen:
        name = getattr(meter, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{meter!r} is not a meter: it needs a non-empty str name")
        for method in ("charge", "precheck_estimate"):
            if not callable(getattr(meter, method, None)):
                raise TypeError(f"meter {name!r} has no {method}() method")
        if name in names:
            raise ValueError(f"two meters are named {name!r}; meter names must be unique")
        names.add(name)
    # Steps and tokens are always accounted: passing meters= never silently drops them.
    if "steps" not in names:
        chosen.append(StepMeter())
    if "tokens" not in names:
        chosen.append(TokenMeter())
    return chosen


def _open_store(store: Store | str | os.PathLike[str] | None, mode: str) -> tuple[Store, bool]:
    if store is None:
        from pollard.stores.memory import MemoryStore

        return MemoryStore(), True
    if isinstance(store, (str, os.PathLike)):
        from pollard.stores._spec import open_spec, parse_store_spec

        # One parser for paths and ``postgresql://...#store_id`` (the command line's too). A
        # store opened from a spec is closed with the runtime; replay opens it read-only.
        return open_spec(parse_store_spec(store), read_only=mode == "replay"), True
    for method in ("put", "get", "commit", "reserve", "totals"):
        if not callable(getattr(store, method, None)):
            raise TypeError(
                f"{type(store).__name__} is not a pollard Store (no {method}() method); pass a "
                "Store, a SQLite path, or None for a MemoryStore"
            )
    return store, False


class RuntimeBase:
    """What `Runtime` and `AsyncRuntime` share: construction, properties, opening runs."""

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        meters: Iterable[Meter] | None = None,
        registry: Registry | None = None,
        policies: Sequence[Policy] | None = None,
        dry_run: bool = False,
        mode: str | ReplayMode = "record",
        on_node: Callable[[Node], Any] | None = None,
        reservation_lease_seconds: float = 60,
    ) -> None:
        if isinstance(reservation_lease_seconds, bool) or not reservation_lease_seconds > 0:
            raise ValueError("reservation_lease_seconds must be a number > 0")
        if on_node is not None and not callable(on_node):
            raise TypeError("on_node must be callable")
        chosen_meters = _default_meters(meters)
        mode_value = _mode(mode)
        self._policies: tuple[Policy, ...] = tuple(policies or ())
        gate: Gate[RunState] | None = None
        if registry is not None:
            gate = Firewall(registry, self._policies)
        self._unrecorded = _unrecorded_path(store, mode_value)
        if self._unrecorded is not None:
            from pollard.stores.memory import MemoryStore

            # Nothing to replay and nothing to create: an empty store makes run() raise
            # MissingRecording, as for a store that lacks the run.
            opened: Store = MemoryStore()
            owned = True
        else:
            opened, owned = _open_store(store, mode_value)
        self._owned = owned
        self._core = RuntimeCore(
            opened,
            meters=chosen_meters,
            mode=mode_value,
            gate=gate,
            dry_run=bool(dry_run),
            on_node=on_node,
            lease_seconds=float(reservation_lease_seconds),
        )
        self._finalizer = weakref.finalize(self, _close, self._core, opened if owned else None)

    @property
    def store(self) -> Store:
        """The store this runtime records into."""
        return self._core.store

    @property
    def mode(self) -> str:
        """``"record"``, ``"hybrid"`` or ``"replay"``."""
        return self._core.mode

    @property
    def meters(self) -> tuple[Meter, ...]:
        """The meters in use (including the always-present steps and tokens meters)."""
        return tuple(self._core.meters)

    @property
    def registry(self) -> Registry | None:
        """The action registry, or None."""
        gate = self._core.gate
        return None if gate is None else cast("Registry", gate.registry)

    @property
    def policies(self) -> tuple[Policy, ...]:
        """The policies applied to registered tool calls."""
        return self._policies

    @property
    def dry_run(self) -> bool:
        """Whether side-effectful registered actions are recorded without running."""
        return self._core.dry_run

    def close(self) -> None:
        """Stop the lease keeper and close the store if this runtime opened it (idempotent)."""
        self._finalizer()

    def _open(self, label: str, budget: Budget | None, attempt: int, shared: bool = False) -> Step:
        if not isinstance(label, str) or not label:
            raise ValueError("a run label must be a non-empty str")
        core = self._core
        limits = check_limits(core.meter_names, budget)
        root = Node.create(NodeKind.ROOT, None, {"run": label}, attempt=attempt)
        found: Node | None = yield io(core.store.find, root.id)
        if found is None:
            if core.mode == "replay":
                where = (
                    "this store"
                    if self._unrecorded is None
                    else f"{self._unrecorded!r}: no store exists at that path"
                )
                raise MissingRecording(
                    f"replay: run {label!r} (attempt {attempt}) is not recorded in {where}",
                    root.id,
                    f"root run={label}",
                )
            meta: dict[str, Any] = {"created_at": utc_now_iso()}
            if limits:
                # The run's limits, for the views' budget burn-down (meta: not part of the id).
                meta["budget"] = {name: plain(limit) for name, limit in sorted(limits.items())}
            root = root.with_meta(meta)
            if (yield io(core.store.put, root)) and core.on_node is not None:
                yield Emit(core.on_node, root, swallow=True)
        else:
            yield io(core.verify_ancestry, found)
        state = RunState(core, label, root.id, root.id, 0, (Scope(root.id, limits),))
        state.owner = self
        state.shared = bool(shared)
        if core.gate is not None:
            core.gate.bind_root(state)
        return state

    def _resume(
        self, label: str, budget: Budget | None, attempt: int, shared: bool = False
    ) -> Step:
        root_id = Node.create(NodeKind.ROOT, None, {"run": label}, attempt=attempt).id
        if not (yield io(self._core.store.exists, root_id)):
            raise KeyError(f"run {label!r} (attempt {attempt}) is not in the store")
        state: RunState = yield from self._open(label, budget, attempt, shared)
        leaf, depth = yield io(_deepest_leaf, self._core.store, root_id)
        state.cursor_id, state.depth = leaf, depth
        return state


def _drive(gen: Step) -> Node:
    return cast(Node, drive_sync(gen))


def _close(core: RuntimeCore, store: Store | None) -> None:
    core.close(release=store is not None)
    if store is not None:
        store.close()


def _unrecorded_path(store: object, mode: str) -> str | None:
    """In replay, a SQLite path where no file exists (replay never creates one), else None."""
    if mode != "replay" or not isinstance(store, (str, os.PathLike)):
        return None
    text = os.fspath(store)
    if "://" in text or text == ":memory:" or os.path.exists(text):
        return None
    return text


def _on_path(node: Node) -> bool:
    """Whether the cursor can stand on ``node``: not pruned, not a note about a dispatch.

    Nor an approval request: the call stays where it was asked, so a resumed run asks (and,
    once approved, runs) it there, as the process that asked first would have.
    """
    if node.pruned or is_request(node):
        return False
    payload = node.payload
    return not (
        node.kind is NodeKind.NOTE
        and isinstance(payload, dict)
        and payload.get("event") in DISPATCH_EVENTS
        and "payload_digest" in payload
    )


def _deepest_leaf(store: Store, root_id: str) -> tuple[str, int]:
    """The deepest leaf the cursor can stand on (ties: smallest id), by one iterative walk."""
    best = (0, root_id)
    stack = [(root_id, 0)]
    while stack:
        node_id, depth = stack.pop()
        kids = [child for child in store.children(node_id) if _on_path(child.node)]
        if not kids and (depth > best[0] or (depth == best[0] and node_id < best[1])):
            best = (depth, node_id)
        stack.extend((child.id, depth + 1) for child in kids)
    return best[1], best[0]


def gate_of(state: RunState, what: str) -> Gate[RunState]:
    """The runtime's governance gate, or a `PollardError` saying ``what`` needs a registry."""
    gate = state.rt.gate
    if gate is None:
        raise PollardError(
            f"{what} needs a runtime with a registry", hint="pass registry= to the Runtime"
        )
    return gate


def run_state(run: RunView) -> RunState:
    """The cursor behind a `Run` or `AsyncRun` (for edge code driving steps itself)."""
    return run._state


class Runtime(RuntimeBase):
    """Runs governed execution trees: budgets before steps, record/hybrid/replay, audit nodes.

    Args:
        store: A `Store`, a SQLite file path (opened as `SQLiteStore` and closed with the
            runtime), a ``postgresql://`` DSN, optionally ending in ``#store_id`` as on the
            command line (opened as `PostgresStore` and closed with the runtime), or None for
            a new `MemoryStore`.
        meters: The meters to use. Default: ``StepMeter``, ``DepthMeter``, ``WallClockMeter``,
            ``TokenMeter``. A list without a ``"steps"`` or ``"tokens"`` meter gets one added,
            so token accounting is never dropped silently.
        registry: An action `Registry`; with one, ``tool_call`` resolves every call through it.
        policies: Policies applied to registered tool calls, in order.
        dry_run: Record side-effectful registered actions without running their handlers.
        mode: ``"record"``, ``"hybrid"`` or ``"replay"`` (see `ReplayMode`).
        on_node: A callable receiving each newly stored node (exceptions become warnings).
        reservation_lease_seconds: Lease of a budget reservation; renewed while a step runs.

    Raises:
        TypeError: If ``store`` is not a Store, path or None, or a meter is malformed.
        ValueError: For an unknown mode, duplicate meter names or a non-positive lease.

    Example:
        >>> from pollard import Budget, Runtime
        >>> with Runtime() as rt, rt.run("demo", budget=Budget(steps=2)) as run:
        ...     node = run.model_call({"model": "m"}, fn=lambda p: {"text": "ok"})
        >>> node.result["text"]
        'ok'
    """

    def run(
        self,
        label: str,
        *,
        budget: Budget | None = None,
        attempt: int = 0,
        shared: bool = False,
    ) -> Run:
        """Start (or re-enter) the run ``label``; the cursor is on its root.

        The root id is a pure function of ``(label, attempt)``, so the same label shares one
        tree and one budget scope across processes and re-runs. A run has one writer at a time
        (one runtime; its concurrent steps are one writer): a second process appending under
        the root while the first is open gets `WriterConflict`. Workers that each start their
        own steps under one label open it with ``shared=True``.

        Args:
            label: The run label.
            budget: Limits checked before each step of this run.
            attempt: The root attempt (a different attempt is a separate tree).
            shared: Many writers (workers, processes, hosts) append under the root at once;
                every node below it still has one writer.

        Raises:
            MissingRecording: In replay mode, when the run is not recorded.
            ValueError: For an empty label or budget limits without a meter.
        """
        return Run(drive_sync(self._open(label, budget, attempt, shared)))

    def resume(
        self,
        label: str,
        *,
        budget: Budget | None = None,
        attempt: int = 0,
        shared: bool = False,
    ) -> Run:
        """Re-enter an existing run with the cursor on its deepest unpruned leaf.

        ``shared`` is as in `run` (it matters when the cursor comes back to the root).

        Raises:
            KeyError: If the run does not exist.
        """
        return Run(drive_sync(self._resume(label, budget, attempt, shared)))

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunView:
    """What `Run` and `AsyncRun` share: the cursor's properties and the moves that need no step.

    Both shells hold one `RunState`; only the step methods differ (plain calls vs coroutines).
    """

    _state: RunState

    # -- properties ----------------------------------------------------------------------------

    @property
    def label(self) -> str:
        """The run label."""
        return self._state.label

    @property
    def root_id(self) -> str:
        """The run root's node id."""
        return self._state.root_id

    @property
    def cursor_id(self) -> str:
        """The id of the node new steps attach to."""
        return self._state.cursor_id

    @property
    def cursor(self) -> Node:
        """The node new steps attach to."""
        return self._state.store.get(self._state.cursor_id)

    @property
    def depth(self) -> int:
        """The cursor's depth (the root is 0)."""
        return self._state.depth

    @property
    def store(self) -> Store:
        """The runtime's store."""
        return self._state.store

    @property
    def mode(self) -> str:
        """``"record"``, ``"hybrid"`` or ``"replay"``."""
        return self._state.mode

    @property
    def limited(self) -> bool:
        """Whether a budget or a rate window can refuse this run's steps.

        A fan-out that must refuse the same steps on every run admits them in order only when
        this is true; without limits nothing can be refused.
        """
        return self._state.limited

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"<{name} {self.label!r} cursor={self.cursor_id[:12]} depth={self.depth}>"

    # -- cursor moves and accounting (no step, so the same for both shells) -------------------

    def rollback(self, node_id: str | None = None, *, steps: int = 1) -> Node:
        """Move the cursor to an ancestor (``node_id``) or ``steps`` levels up.

        Raises:
            ValueError: If ``node_id`` is not an ancestor or ``steps`` goes above the root.
        """
        return _rollback(self._state, node_id, steps)

    def checkout(self, node_id: str) -> Node:
        """Move the cursor to any node of this run's tree (for example a sibling tip).

        Raises:
            ValueError: If the node is not in this run (or not stored at all).
        """
        return _checkout(self._state, node_id)

    def prune(self) -> Node:
        """Mark the cursor node pruned (nothing is deleted) and move the cursor to its parent.

        Returns:
            The pruned node.

        Raises:
            ValueError: On the root.
            PollardError: In replay mode (replay never writes).
        """
        return _prune(self._state)

    def report(self, *, exact: bool = False) -> dict[str, dict[str, Any]]:
        """Charges by meter, as plain numbers (``json.dumps(run.report())`` works).

        Amounts are an ``int`` when integral, else a ``float``; the ledger itself stays exact.

        Args:
            exact: Give exact decimal strings instead (``"0.0000125"``), the audit form that
                `recompute_charges` also returns.

        Returns:
            ``{"spent": ..., "avoided": ..., "total": ...}``: ``spent`` settled through this run
            object, ``avoided`` served from recordings instead, ``total`` the root scope's ledger
            (every process and session that used this run label).
        """
        return self._state.report(exact=exact)


class Run(RunView):
    """A cursor in a run's tree; steps attach to the cursor and move it.

    Created by `Runtime.run`, `Runtime.resume` and `Run.branch`. A ``with`` block is optional
    (the run owns nothing to close).
    """

    def __init__(self, state: RunState) -> None:
        self._state = state

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    # -- steps ---------------------------------------------------------------------------------

    def model_call(
        self,
        payload: Any,
        *,
        fn: Callable[[Any], Any],
        attempt: int = 0,
        on_delta: Callable[[Any], Any] | None = None,
        keep_chunks: bool = False,
        resume: bool = False,
    ) -> Node:
        """Run a model call as one governed step.

        The payload is the call's identity; it is snapshotted before ``fn(payload)`` runs, so
        later changes to your object never change the record. ``fn`` returns a result dict or an
        iterator of chunk dicts (each forwarded to ``on_delta`` in order; with ``keep_chunks``
        they are stored under ``result["chunks"]`` and re-emitted on replay). Charges settle
        once, after the stream ends.

        Args:
            payload: The call payload (JSON; floats allowed).
            fn: Your model function.
            attempt: The attempt number (identical calls with different attempts are distinct).
            on_delta: Called with each chunk, in order.
            keep_chunks: Store the chunks with the result.
            resume: This call may have been dispatched before, by a run that was interrupted:
                in every mode its stored answer (the same call, parent and attempt) is served
                instead of sending it again, and what its cancelled dispatches were charged
                counts toward this one rather than adding to it (hybrid mode always resumes).

        Returns:
            The recorded (or served) node; the cursor moves onto it.

        Raises:
            BudgetExceeded: When a budget or window refuses the call (a refusal node is recorded).
            MissingRecording: In replay mode, when the call is not recorded.
            TypeError: If the payload is not JSON or ``fn`` returns something else.
        """
        if not callable(fn):
            raise TypeError("model_call needs fn=, the function that calls your model")
        return _drive(
            self._state.step(
                NodeKind.MODEL_CALL,
                payload,
                fn,
                PAYLOAD,
                attempt=attempt,
                on_delta=on_delta,
                keep_chunks=keep_chunks,
                resume=resume,
            )
        )

    def tool_call(
        self,
        name: str,
        args: Any,
        *,
        fn: Callable[[Any], Any] | None = None,
        version: str | None = None,
        attempt: int = 0,
        actor: object = None,
    ) -> Node:
        """Run a tool call as one governed step.

        Without a registry the call is unfenced: ``fn(payload)`` runs with the identity payload
        ``{"tool": name, "args": args}`` (plus ``"version"`` when given), as in pollard 0.8.
        With a registry the call resolves through it (``fn`` is ignored): unknown tools, wrong
        versions, invalid arguments, denials and missing confirmations are recorded refusals.

        Args:
            name: The tool name.
            args: The tool arguments (JSON).
            fn: The tool function (required without a registry), called with the whole payload
                (read the arguments as ``payload["args"]``).
            version: The tool version.
            attempt: The attempt number.
            actor: Who makes the call (a str, or an object with a ``.name`` such as a team
                agent); policies see it (``PolicyContext.actor``) and a stored approval is
                bound to it. Default: none. Ignored without a registry.

        Returns:
            The recorded (or served) node. Non-dict tool results are stored as
            ``{"value": result}``.

        Raises:
            BudgetExceeded: When a budget refuses the call.
            PolicyViolation: When the registry firewall refuses it.
            ConfirmationRequired: When a policy asks for confirmation.
            ApprovalRequired: When a policy requires a stored approval that is not decided
                yet (the request is recorded).
            ApprovalDenied: When that approval was denied.
            TypeError: Without a registry and without ``fn``.
        """
        gate = self._state.rt.gate
        if gate is not None:
            return _drive(
                gate.tool_call(
                    self._state,
                    name,
                    args,
                    version=version,
                    attempt=attempt,
                    actor=actor_name(actor),
                )
            )
        if not callable(fn):
            raise TypeError(
                "tool_call without a registry needs fn=, the function that runs the tool"
            )
        return _drive(self._state.step(*tool_step(name, args, fn, version), attempt=attempt))

    def confirm(self, token: str, *, args: Any = None) -> Node:
        """Execute a tool call a policy held for confirmation (``error.resume_token``).

        The pending call is stored, so a new runtime on the same store can confirm it. Policies
        are asked again (a CONFIRM is satisfied, a DENY still refuses) and dry run is honoured.

        Args:
            token: The ``resume_token`` of the `ConfirmationRequired` error.
            args: The original arguments. Needed only after a restart when the action has
                sensitive fields (they are never stored); checked against the recorded markers.

        Raises:
            PollardError: When no registry is configured.
            ValueError: When the token is not a pending confirmation of this run, or sensitive
                arguments are needed and missing or different.
        """
        gate = gate_of(self._state, "confirm()")
        return _drive(gate.confirm(self._state, token, args=args))

    def record_charged(
        self,
        kind: str | NodeKind,
        payload: Any,
        *,
        charges: Mapping[str, Any],
        fn: Callable[[Any], Any] | None = None,
        result: Any = None,
        parent: str | None = None,
        attempt: int = 0,
        meta: Mapping[str, Any] | None = None,
        unknown: Collection[str] = (),
    ) -> Node:
        """Record a node whose charges you measured yourself, exactly once.

        For work the runtime's meters cannot charge when it happens (a batch job: priced at
        another tier, known hours later, collected in another process). With ``fn``, the
        positive charges are admitted against every limit as exact estimates (refused, recorded
        and raised as `BudgetExceeded` before ``fn`` runs), then ``fn(payload)`` gives the result
        and the node commits with ``charges``. Without ``fn`` the ``result`` is recorded unchecked:
        a settlement, whose charges may be negative (a credit against an earlier charge). A node
        already stored at its id (a pure function of kind, payload, parent and attempt) is
        returned and charged nothing, so a settlement recorded twice counts once.

        Args:
            kind: The node kind (``"model_call"``, ``"note"``, ...).
            payload: The identity payload.
            charges: Meter name -> amount (a number, possibly negative).
            fn: Called once with ``payload`` after admission; returns the result.
            result: The result to record when there is no ``fn``.
            parent: Record under this node of the run (the cursor stays); default: the cursor
                (which then moves onto the node).
            attempt: The attempt number.
            meta: Extra meta for the node.
            unknown: Meters whose charge you cannot state (an unpriced model): a run limiting
                one of them refuses (``PollardError``, before ``fn`` runs); the node's meta
                lists them as ``"unknown_charges"``.

        Returns:
            The stored node (the earlier one when it was already recorded).

        Raises:
            BudgetExceeded: ``fn`` was given and a limit refused the charges (nothing ran).
            MissingRecording: Replay mode, and the node is not recorded.
        """
        return _drive(
            record_charged(
                self._state,
                kind,
                payload,
                charges=charges,
                fn=fn,
                result=result,
                parent=parent,
                attempt=attempt,
                meta=meta,
                unknown=unknown,
            )
        )

    def note(self, payload: Any, *, attempt: int = 0) -> Node:
        """Record a plain note under the cursor and move onto it (identical notes are reused)."""
        return _drive(self._state.note(payload, attempt=attempt))

    def branch(self, *, attempt: int = 0, budget: Budget | None = None) -> Run:
        """Create an alternate child cursor; this run's cursor does not move.

        Each call writes a branch anchor note ``{"branch": true}`` under the cursor. Repeated
        branches from one point get distinct anchors (attempt ``attempt + i`` for the i-th
        branch from that point in this run object), so callers need not invent attempts.

        Args:
            attempt: The first anchor attempt.
            budget: An extra budget scope anchored at the branch (the run's scopes still apply).

        Returns:
            A `Run` positioned on the anchor.

        Raises:
            ValueError: If ``attempt`` is not an int >= 0.
        """
        return Run(drive_sync(branch_state(self._state, attempt, budget)))


def tool_step(
    name: str, args: Any, fn: Callable[[Any], Any], version: str | None
) -> tuple[NodeKind, dict[str, Any], Callable[[Any], Any], Any]:
    if not isinstance(name, str) or not name:
        raise ValueError("a tool name must be a non-empty str")
    payload: dict[str, Any] = {"tool": name, "args": args}
    if version is not None:
        payload["version"] = version
    return NodeKind.TOOL_CALL, payload, fn, PAYLOAD


def check_limits(meter_names: frozenset[str], budget: Budget | None) -> dict[str, Decimal]:
    """The limits of ``budget`` (none for None), each of which must have a meter."""
    if budget is None:
        return {}
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a pollard.Budget, not {type(budget).__name__}")
    limits = budget.limits()
    unknown = sorted(set(limits) - meter_names - {"depth"})
    if unknown:
        raise ValueError(
            f"Budget limits {unknown} have no meter: add a meter with that name "
            "(for example CostMeter for usd, WallClockMeter for seconds)"
        )
    return limits


def branch_state(state: RunState, attempt: int, budget: Budget | None) -> Step:
    """Write a branch anchor under the cursor and return a new cursor on it."""
    check_attempt(attempt)  # before the branch is counted: a refusal must not shift anchors
    limits = check_limits(state.rt.meter_names, budget)
    offset = state.branch_counts.get(state.cursor_id, 0)
    state.branch_counts[state.cursor_id] = offset + 1
    child = RunState(
        state.rt, state.label, state.root_id, state.cursor_id, state.depth, state.scopes
    )
    child.owner = state.owner
    # A branch acts for the same agent, inside the same subtree.
    child.actor, child.tools, child.floor = state.actor, state.tools, state.floor
    child.shared = state.shared
    anchor: Node = yield from child.note({"branch": True}, attempt=attempt + offset)
    if limits:
        child.scopes = (*state.scopes, Scope(anchor.id, limits))
    return child


def _rollback(state: RunState, node_id: str | None, steps: int) -> Node:
    chain = state.ancestors(state.cursor_id)
    if node_id is None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError("steps must be an int >= 1")
        if steps >= len(chain):
            raise ValueError(f"cannot roll back {steps} steps: the cursor is {len(chain) - 1} deep")
        target = chain[steps]
    else:
        if node_id not in chain:
            raise ValueError(f"node {node_id} is not an ancestor of the cursor")
        target = node_id
    _check_floor(state, chain[chain.index(target) :])
    state.depth -= chain.index(target)
    state.cursor_id = target
    state.own_cursor = False  # a node this run may not have written
    _keep_scopes(state, chain[chain.index(target) :])
    return state.store.get(target)


def _check_floor(state: RunState, chain: Sequence[str]) -> None:
    """Refuse a move out of a team agent's subtree (``chain``: the target's ancestry)."""
    floor = state.floor
    if floor is not None and floor not in chain:
        raise ValueError(
            f"node {chain[0]} is outside agent {state.actor!r}'s subtree: an agent's cursor "
            f"stays under its anchor {floor}, where its budgets and identity hold"
        )


def _keep_scopes(state: RunState, chain: Sequence[str]) -> None:
    # A branch budget governs only its anchor's subtree: moving the cursor out of it drops it.
    # A shared scope is anchored at no node: it holds wherever the cursor goes.
    inside = set(chain)
    state.scopes = tuple(
        scope
        for i, scope in enumerate(state.scopes)
        if i == 0 or scope.shared or scope.id in inside
    )


def _checkout(state: RunState, node_id: str) -> Node:
    try:
        chain = state.ancestors(node_id)
    except KeyError:
        # The documented error for a node outside the run, also when no such node is stored.
        raise ValueError(f"node {node_id!r} is not in run {state.label!r}: no such node") from None
    _check_floor(state, chain)
    state.cursor_id = node_id
    state.own_cursor = False  # a node this run may not have written
    state.depth = len(chain) - 1
    _keep_scopes(state, chain)
    return state.store.get(node_id)


def _prune(state: RunState) -> Node:
    if state.mode == "replay":
        raise PollardError(
            "prune() writes metadata; replay mode never writes",
            hint="prune in record or hybrid mode",
        )
    node = state.store.get(state.cursor_id)
    if node.parent is None:
        raise ValueError("the root cannot be pruned")
    if node.id == state.floor:
        raise ValueError(f"agent {state.actor!r} cannot prune its own anchor")
    pruned = state.store.update_meta(node.id, {"pruned": True})
    state.cursor_id = node.parent
    state.own_cursor = False  # a node this run may not have written
    state.depth -= 1
    _keep_scopes(state, state.ancestors(node.parent))
    return pruned
