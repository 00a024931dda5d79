"""Teams of agents: identities in the tree, one cursor each, nested budgets, delegation.

A team and each of its agents is an anchor note in the run's tree (``{"pollard": "team"}``,
``{"pollard": "agent"}``). An agent is a cursor of its own on its anchor (agents run
concurrently without forking anything: each appends under its own node, guarded by the
per-node writer lease), acting for its name (``PolicyContext.actor``) with the tools it was
given (the registry firewall refuses any other before dispatch, as a recorded refusal).

Budgets nest as ledger scopes: every step of an agent is admitted by one atomic
``Store.reserve`` over its whole scope chain (the run root, a `SharedBudget` shared by
independent roots, the team, each enclosing agent, the agent itself), so parallel agents draw
on their parents' limits at admission and can never pass them together. Team and agent
anchors always tally their charges, which is the per-agent accounting of ``team_report``.

An agent's anchor payload is its whole delegation: identity, tools, its own limits and every
inherited scope. The node id is a hash of it, so a `DelegationContext` handed to another
process is checked against the stored node before that worker may act: a forged or widened
context does not match and is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

from pollard._core._budget import Budget
from pollard._core._ledger import decimal_text, to_decimal
from pollard._core._node import Node, NodeKind
from pollard._runtime._async import AsyncRun, AsyncRuntime, on_state
from pollard._runtime._sync import Run, Runtime, check_limits, run_state
from pollard._step._context import Scope
from pollard._step._cursor import RunState
from pollard._step._effects import drive_sync
from pollard.errors import IntegrityError, PollardError

if TYPE_CHECKING:
    from pollard._core._store import Store

__all__ = [
    "AgentCheckpoint",
    "DelegationContext",
    "SharedBudget",
    "Team",
    "TeamAgent",
    "agent_info",
    "shared_scope_id",
]

R = TypeVar("R", Run, AsyncRun)
"""The kind of run a team works in: its agents' runs are of the same kind."""

_SHARED_PREFIX = "shared:"
_CONTEXT_VERSION = 1


def shared_scope_id(name: str) -> str:
    """The ledger scope of the shared budget ``name`` (anchored at no node)."""
    return _SHARED_PREFIX + name


def _limits_text(limits: Mapping[str, Decimal]) -> dict[str, str]:
    return {meter: decimal_text(amount) for meter, amount in sorted(limits.items())}


def _limits_of(texts: Mapping[str, Any]) -> dict[str, Decimal]:
    return {str(meter): to_decimal(amount) for meter, amount in texts.items()}


def _nonempty(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty str, got {value!r}")
    return value


@dataclass(frozen=True)
class SharedBudget:
    """A named budget scope shared by independent roots (runs, teams, workers, processes).

    Every step under a scope chain that includes it is admitted against it in the same atomic
    reserve as its other limits, so runs that never share a root still share these limits.
    A name is declared once per store: opening it again with different limits fails before
    anything is dispatched (pick a new name for new limits).

    Args:
        name: The scope name (its ledger scope is ``shared:<name>``).
        budget: Its limits (``depth`` is a tree limit, meaningless across roots: refused).

    Raises:
        ValueError: For an empty name or a depth limit.
        TypeError: When ``budget`` is not a `Budget`.

    Example:
        >>> from pollard import Budget, SharedBudget
        >>> SharedBudget("nightly", Budget(steps=100)).scope_id
        'shared:nightly'
    """

    name: str
    budget: Budget

    def __post_init__(self) -> None:
        _nonempty(self.name, "a SharedBudget name")
        if not isinstance(self.budget, Budget):
            raise TypeError(f"SharedBudget budget must be a Budget, not {type(self.budget)}")
        if "depth" in self.budget.limits():
            raise ValueError(
                f"SharedBudget {self.name!r} has a depth limit; depth belongs to one tree, "
                "so set it on the run, team or agent budget instead"
            )

    @property
    def scope_id(self) -> str:
        """The ledger scope the shared totals are kept under."""
        return shared_scope_id(self.name)


def _declare_shared(store: Store, shared: SharedBudget) -> None:
    """Record the limits of a shared scope once; refuse a different declaration (no dispatch)."""
    mine = json.dumps(_limits_text(shared.budget.limits()), sort_keys=True)
    winner = store.claim(f"pollard/shared-budget/{shared.name}", mine)
    if winner != mine:
        raise PollardError(
            f"shared budget {shared.name!r} is declared with limits {winner} in this store, "
            f"not {mine}: one scope name has one set of limits",
            hint="use the declared limits, or a new name for new limits",
        )


def _declare_windows(state: RunState) -> None:
    """Named window scopes across roots: one name, one limit (checked before any dispatch)."""
    if state.mode == "replay":  # replay never writes (its store may be read-only)
        return
    for meter in state.rt.windows:
        scope = getattr(meter, "scope", None)
        if not isinstance(scope, str) or scope == "run":
            continue
        key = meter.key(state.root_id)
        mine = decimal_text(meter.limit)
        winner = state.store.claim(f"pollard/window-scope/{key}", mine)
        if winner != mine:
            raise PollardError(
                f"window {meter.name!r} of scope {scope!r} is declared with limit {winner} in "
                f"this store, not {mine}: one window scope has one limit",
                hint="use the declared limit, or a new scope name for a new limit",
            )


def _shared_list(shared: SharedBudget | Iterable[SharedBudget]) -> tuple[SharedBudget, ...]:
    items = (shared,) if isinstance(shared, SharedBudget) else tuple(shared)
    for item in items:
        if not isinstance(item, SharedBudget):
            raise TypeError(f"shared= takes SharedBudget values, got {type(item).__name__}")
    return items


def _scope_entry(scope: Scope) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": scope.id, "limits": _limits_text(scope.limits)}
    if scope.shared:
        entry["shared"] = True
    if scope.tally:
        entry["tally"] = True
    return entry


def _scope_of(entry: Mapping[str, Any]) -> Scope:
    return Scope(
        str(entry["id"]),
        _limits_of(entry.get("limits", {})),
        tally=bool(entry.get("tally", False)),
        shared=bool(entry.get("shared", False)),
    )


def _inherit(
    parent: RunState, shared: Sequence[SharedBudget]
) -> tuple[tuple[Scope, ...], list[dict[str, Any]]]:
    """The parent's scopes plus the new shared ones (declared first), and their payload form."""
    present = {scope.id for scope in parent.scopes}
    scopes = list(parent.scopes)
    for item in shared:
        check_limits(parent.rt.meter_names, item.budget)  # before anything is declared
    for item in shared:
        if parent.mode != "replay":  # replay never writes (its store may be read-only)
            _declare_shared(parent.store, item)
        if item.scope_id not in present:
            scopes.append(Scope(item.scope_id, item.budget.limits(), shared=True))
            present.add(item.scope_id)
    return tuple(scopes), [_scope_entry(scope) for scope in scopes]


def _child(parent: RunState, payload: dict[str, Any], scopes: tuple[Scope, ...]) -> RunState:
    """Write an anchor note under ``parent``'s cursor; a new cursor on it (``parent`` stays)."""
    child = RunState(parent.rt, parent.label, parent.root_id, parent.cursor_id, parent.depth, ())
    child.scopes = scopes
    child.owner = parent.owner
    child.actor, child.tools, child.floor = parent.actor, parent.tools, parent.floor
    drive_sync(child.note(payload))
    return child


def _as_view(like: R, state: RunState) -> R:
    if isinstance(like, AsyncRun):
        return on_state(like, state)
    return Run(state)


def _state_of(run: object) -> RunState:
    if isinstance(run, (Run, AsyncRun)):
        return run_state(run)
    raise TypeError(
        "a pollard run is needed (from Runtime(...).run() or AsyncRuntime(...).run()), "
        f"got {type(run).__name__}"
    )


class Team(Generic[R]):
    """A team of agents: an anchor in a run's tree with its own budget scope.

    Creating a team writes its anchor note under the run's cursor (the run's cursor does not
    move). Its budget is carved from the run's: every step of its agents is admitted against
    the run's limits, each `SharedBudget` given here, the team's and the agent's own, in one
    atomic reserve. The same name, budget and shared scopes under the same cursor are the same
    team (re-entering it after a restart, say; in replay mode, serving it).

    Args:
        run: The `Run` or `AsyncRun` the team works in (agents get the same kind of run).
        name: The team name.
        budget: The team's limits (all of its agents together).
        shared: Named scopes shared with other roots (see `SharedBudget`).

    Raises:
        PollardError: A shared or window scope name is declared with other limits in the
            store (nothing was dispatched).
        ValueError: For an empty name or limits without a meter.

    Example:
        >>> from pollard import Budget, Runtime, Team
        >>> with Runtime() as rt, rt.run("plan") as run:
        ...     team = Team(run, "research", budget=Budget(steps=4))
        ...     scout = team.agent("scout", role="researcher", task="find sources")
        ...     node = scout.run.model_call({"q": "a"}, fn=lambda p: {"text": "ok"})
        ...     rt.store.totals(scout.node_id)["steps"]
        Decimal('1')
    """

    def __init__(
        self,
        run: R,
        name: str,
        *,
        budget: Budget | None = None,
        shared: SharedBudget | Iterable[SharedBudget] = (),
    ) -> None:
        parent = _state_of(run)
        self._name: str = _nonempty(name, "a team name")
        self._like: R = run
        limits = check_limits(parent.rt.meter_names, budget)
        _declare_windows(parent)
        inherited: tuple[Scope, ...]
        inherited, entries = _inherit(parent, _shared_list(shared))
        payload = {
            "pollard": "team",
            "name": self._name,
            "limits": _limits_text(limits),
            "scopes": entries,
        }
        state = _child(parent, payload, inherited)
        state.scopes = (*inherited, Scope(state.cursor_id, limits, tally=True))
        self._state = state
        self._agents: dict[str, TeamAgent[R]] = {}

    @property
    def name(self) -> str:
        """The team name."""
        return self._name

    @property
    def node_id(self) -> str:
        """The team's anchor node (its ledger scope)."""
        return self._state.cursor_id

    @property
    def agents(self) -> tuple[TeamAgent[R], ...]:
        """The agents created through this object (sub-agents are on their parents)."""
        return tuple(self._agents.values())

    def agent(
        self,
        name: str,
        *,
        role: str = "",
        task: str = "",
        budget: Budget | None = None,
        tools: Iterable[str] | None = None,
        shared: SharedBudget | Iterable[SharedBudget] = (),
    ) -> TeamAgent[R]:
        """Create (or re-enter) an agent of this team, with a cursor of its own.

        Args:
            name: The agent's name: its identity, and the actor policies and approvals see.
            role: What kind of agent it is (``"researcher"``); reports group by it.
            task: What it was asked to do; reports group by it.
            budget: Its own limits, carved from the team's (both apply to every step).
            tools: The registered tools it may call (None: any); needs a runtime with a
                registry, which refuses any other tool before dispatch.
            shared: More shared scopes for this agent alone.

        Raises:
            PollardError: ``tools`` without a registry, or a conflicting shared scope.
            ValueError: Unknown tool names, empty names or limits without a meter.
        """
        agent = _spawn(
            self._state, self._like, self._name, (), name, role, task, budget, tools, shared
        )
        self._agents[agent.node_id] = agent
        return agent


def _check_tools(
    state: RunState, tools: Iterable[str] | None, inherited: frozenset[str] | None
) -> frozenset[str] | None:
    if tools is None:
        return inherited
    if isinstance(tools, str):
        raise TypeError("tools= takes a collection of tool names, not one str")
    chosen = frozenset(tools)
    gate = state.rt.gate
    if gate is None:
        raise PollardError(
            "an agent's tools= is enforced by the registry firewall: the runtime has no registry",
            hint="pass registry= to the Runtime",
        )
    registry = gate.registry
    unknown = sorted(name for name in chosen if registry.find(name) is None)
    if unknown:
        raise ValueError(f"tools {unknown} are not registered")
    if inherited is not None and not chosen <= inherited:
        wider = sorted(chosen - inherited)
        raise ValueError(
            f"a delegation cannot widen its parent's tools: {wider} are not permitted to the "
            "delegating agent"
        )
    return chosen


def _spawn(
    parent: RunState,
    like: R,
    team: str,
    path: tuple[str, ...],
    name: str,
    role: str,
    task: str,
    budget: Budget | None,
    tools: Iterable[str] | None,
    shared: SharedBudget | Iterable[SharedBudget],
) -> TeamAgent[R]:
    _nonempty(name, "an agent name")
    for what, value in (("role", role), ("task", task)):
        if not isinstance(value, str):
            raise TypeError(f"an agent's {what} must be a str, got {type(value).__name__}")
    limits = check_limits(parent.rt.meter_names, budget)
    permitted = _check_tools(parent, tools, parent.tools)
    inherited: tuple[Scope, ...]
    inherited, entries = _inherit(parent, _shared_list(shared))
    payload: dict[str, Any] = {
        "pollard": "agent",
        "name": name,
        "role": role,
        "task": task,
        "team": team,
        "path": [*path, name],
        "tools": None if permitted is None else sorted(permitted),
        "limits": _limits_text(limits),
        "scopes": entries,
    }
    state = _child(parent, payload, inherited)
    state.scopes = (*inherited, Scope(state.cursor_id, limits, tally=True))
    state.actor, state.tools, state.floor = name, permitted, state.cursor_id
    return TeamAgent(state, _as_view(like, state), payload)


class TeamAgent(Generic[R]):
    """An agent of a `Team`: a recorded identity with a cursor, tools and limits of its own.

    Created by `Team.agent`, `TeamAgent.delegate`, `TeamAgent.attach` (another process,
    from a `DelegationContext`) and `TeamAgent.resume` (from an `AgentCheckpoint`). Its
    steps go through ``agent.run`` (a `Run` or an `AsyncRun`, like the team's), so anything
    that takes a run (the pollux bridge's ``governed_*`` functions included) works for an agent.
    """

    def __init__(self, state: RunState, run: R, payload: Mapping[str, Any]) -> None:
        self._state = state
        self._run: R = run
        self._payload = dict(payload)
        self._anchor = state.cursor_id

    # -- identity ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The agent's name: the actor its steps act for (``PolicyContext.actor``)."""
        return str(self._payload["name"])

    @property
    def role(self) -> str:
        """The agent's role."""
        return str(self._payload["role"])

    @property
    def task(self) -> str:
        """The agent's task."""
        return str(self._payload["task"])

    @property
    def team(self) -> str:
        """The name of the team it belongs to."""
        return str(self._payload["team"])

    @property
    def path(self) -> tuple[str, ...]:
        """Agent names from the team's top-level agent down to this one."""
        return tuple(str(part) for part in self._payload["path"])

    @property
    def node_id(self) -> str:
        """The agent's anchor node: its identity in the tree and its ledger scope."""
        return self._anchor

    @property
    def tools(self) -> frozenset[str] | None:
        """The registered tools it may call, or None for any."""
        return self._state.tools

    @property
    def limits(self) -> dict[str, Decimal]:
        """Its own limits (its parents' limits apply as well)."""
        return _limits_of(self._payload["limits"])

    @property
    def run(self) -> R:
        """The run its steps go through (its own cursor in the shared tree)."""
        return self._run

    @property
    def cursor_id(self) -> str:
        """Where its next step attaches."""
        return self._state.cursor_id

    def __repr__(self) -> str:
        return f"TeamAgent({self.name!r}, role={self.role!r}, task={self.task!r})"

    # -- work ----------------------------------------------------------------------------------

    def delegate(
        self,
        name: str,
        *,
        role: str = "",
        task: str = "",
        budget: Budget | None = None,
        tools: Iterable[str] | None = None,
        shared: SharedBudget | Iterable[SharedBudget] = (),
    ) -> TeamAgent[R]:
        """Delegate to a sub-agent under this agent's cursor (this cursor does not move).

        The sub-agent's limits are carved from this agent's (every enclosing limit applies to
        each of its steps), and its tools are at most this agent's.

        Raises:
            ValueError: ``tools`` wider than this agent's, or limits without a meter.
        """
        return _spawn(
            self._state,
            self._run,
            self.team,
            self.path,
            name,
            role,
            task,
            budget,
            tools,
            shared,
        )

    # -- across processes ----------------------------------------------------------------------

    def context(self) -> DelegationContext:
        """The serializable delegation another worker attaches to (see `TeamAgent.attach`)."""
        chain = self._state.ancestors(self._anchor)
        ancestry = tuple(
            node.id
            for node in (self._state.store.get(i) for i in reversed(chain[1:]))
            if agent_info(node) is not None or _team_info(node) is not None
        )
        root = self._state.store.get(self._state.root_id)
        return DelegationContext(
            store_id=self._state.store.store_id,
            run=self._state.label,
            attempt=root.attempt,
            root_id=self._state.root_id,
            node_id=self._anchor,
            ancestry=ancestry,
            agent=self.name,
            role=self.role,
            task=self.task,
            team=self.team,
            path=self.path,
            tools=None if self.tools is None else tuple(sorted(self.tools)),
            limits=dict(self._payload["limits"]),
            scopes=tuple(dict(entry) for entry in self._payload["scopes"]),
        )

    def checkpoint(self) -> AgentCheckpoint:
        """An exact-cursor checkpoint: `TeamAgent.resume` continues at this very node."""
        return AgentCheckpoint(self.context(), self._state.cursor_id, self._state.depth)

    @overload
    @staticmethod
    def attach(runtime: Runtime, context: DelegationContext) -> TeamAgent[Run]: ...

    @overload
    @staticmethod
    def attach(runtime: AsyncRuntime, context: DelegationContext) -> TeamAgent[AsyncRun]: ...

    @staticmethod
    def attach(
        runtime: Runtime | AsyncRuntime, context: DelegationContext
    ) -> TeamAgent[Run] | TeamAgent[AsyncRun]:
        """Act for a delegated agent in this runtime (another process, say), once verified.

        The context is checked against the ledger before the agent may act: its agent node
        must be stored in this store, intact, and say exactly what the context says (identity,
        tools, limits, inherited scopes) under exactly the ancestry it names; a forged or
        widened context is refused. A live writer appending at the same node still holds it
        (`WriterConflict` at the first step): one writer per cursor.

        Raises:
            PollardError: The context does not match the ledger (nothing was written).
            TypeError: ``runtime`` is not a runtime or ``context`` not a `DelegationContext`.
        """
        if not isinstance(context, DelegationContext):
            raise TypeError(f"attach needs a DelegationContext, got {type(context).__name__}")
        if not isinstance(runtime, (Runtime, AsyncRuntime)):
            raise TypeError(f"attach needs a Runtime or AsyncRuntime, got {type(runtime)}")
        store = runtime.store
        node, depth = _verified(store, context)
        run = runtime.run(context.run, attempt=context.attempt)
        base = run_state(run)
        payload = cast("dict[str, Any]", node.payload)
        inherited: tuple[Scope, ...] = tuple(_scope_of(e) for e in payload["scopes"])
        own = Scope(node.id, _limits_of(payload["limits"]), tally=True)
        limited = {meter for scope in (*inherited, own) for meter in scope.limits}
        unmetered = sorted(limited - base.rt.meter_names - {"depth"})
        if unmetered:
            # A limit no meter charges would never be reached here: refuse rather than let
            # this worker spend past its parents' limits.
            raise PollardError(
                f"agent {context.agent!r} is limited on {unmetered}, which this runtime does "
                "not meter",
                hint="give the worker's runtime the same meters as the delegating one",
            )
        state = RunState(base.rt, base.label, base.root_id, node.id, depth, (*inherited, own))
        state.owner = base.owner
        tools = payload["tools"]
        state.actor, state.floor = str(payload["name"]), node.id
        state.tools = None if tools is None else frozenset(str(t) for t in tools)
        if isinstance(run, AsyncRun):
            return TeamAgent(state, on_state(run, state), payload)
        return TeamAgent(state, Run(state), payload)

    @overload
    @staticmethod
    def resume(runtime: Runtime, checkpoint: AgentCheckpoint) -> TeamAgent[Run]: ...

    @overload
    @staticmethod
    def resume(runtime: AsyncRuntime, checkpoint: AgentCheckpoint) -> TeamAgent[AsyncRun]: ...

    @staticmethod
    def resume(
        runtime: Runtime | AsyncRuntime, checkpoint: AgentCheckpoint
    ) -> TeamAgent[Run] | TeamAgent[AsyncRun]:
        """Attach to a checkpoint's agent with the cursor exactly where the checkpoint was.

        Raises:
            PollardError: The context does not match the ledger, or the cursor is not a node
                of the agent's subtree.
        """
        if not isinstance(checkpoint, AgentCheckpoint):
            raise TypeError(f"resume needs an AgentCheckpoint, got {type(checkpoint).__name__}")
        agent = TeamAgent.attach(runtime, checkpoint.context)
        state = agent._state
        try:
            chain = state.ancestors(checkpoint.cursor_id)
        except (KeyError, ValueError):
            chain = []
        if agent.node_id not in chain:
            raise PollardError(
                f"checkpoint cursor {checkpoint.cursor_id} is not a node of agent "
                f"{agent.name!r}'s subtree in this store",
                hint="resume from a checkpoint this agent wrote (agent.checkpoint())",
            )
        state.cursor_id = checkpoint.cursor_id
        state.depth = len(chain) - 1
        return agent


def _team_info(node: Node) -> dict[str, Any] | None:
    payload = node.payload
    if (
        node.kind is NodeKind.NOTE
        and isinstance(payload, dict)
        and payload.get("pollard") == "team"
    ):
        return payload
    return None


def agent_info(node: Node) -> dict[str, Any] | None:
    """The identity payload of an agent anchor (name, role, task, team, ...), else None."""
    payload = node.payload
    if (
        node.kind is NodeKind.NOTE
        and isinstance(payload, dict)
        and payload.get("pollard") == "agent"
    ):
        return payload
    return None


def _refused(context: DelegationContext, why: str) -> PollardError:
    return PollardError(
        f"delegation context for agent {context.agent!r} refused: {why}",
        hint="attach with the context the delegating agent gave (agent.context()), unchanged",
    )


def _verified(store: Store, context: DelegationContext) -> tuple[Node, int]:
    """The context's agent node and its depth, once the context matches the ledger."""
    if context.store_id != store.store_id:
        raise _refused(
            context, f"it names store {context.store_id!r}, this runtime's is {store.store_id!r}"
        )
    node = store.find(context.node_id)
    if node is None:
        raise _refused(context, f"no delegation node {context.node_id} is stored")
    try:
        node.check()
    except IntegrityError as exc:
        raise _refused(context, f"its node does not verify ({exc})") from None
    info = agent_info(node)
    if info is None:
        raise _refused(context, f"node {node.id} is not an agent's delegation")
    expected = context.payload()
    if info != expected:
        fields = sorted(k for k in set(info) | set(expected) if info.get(k) != expected.get(k))
        raise _refused(context, f"it differs from the stored delegation in {fields}")
    chain: list[Node] = []
    current: Node | None = node
    while current is not None:
        chain.append(current)
        current = None if current.parent is None else store.find(current.parent)
    root = chain[-1]
    if root.id != context.root_id or root.payload != {"run": context.run}:
        raise _refused(context, f"its node is not in run {context.run!r}")
    if root.attempt != context.attempt:
        raise _refused(context, f"its node is not in attempt {context.attempt}")
    anchors = tuple(
        n.id for n in reversed(chain[1:]) if agent_info(n) is not None or _team_info(n) is not None
    )
    if anchors != tuple(context.ancestry):
        raise _refused(context, "its ancestry differs from the stored one")
    return node, len(chain) - 1


@dataclass(frozen=True)
class DelegationContext:
    """What a worker needs to act for a delegated agent: identity, ancestry, permissions, scopes.

    JSON round-trips (`to_json`, `from_json`); `TeamAgent.attach` verifies it against the
    ledger before the worker may act, so it carries no secret and grants nothing by itself.

    Attributes:
        store_id: The ledger it belongs to.
        run: The run label; ``attempt``: the root attempt; ``root_id``: the run root.
        node_id: The agent's delegation node (whose stored content must match the rest).
        ancestry: The team and agent anchors above it, top first.
        agent: The agent name; ``role``, ``task``, ``team`` and ``path`` as on `TeamAgent`.
        tools: The permitted tools (sorted), or None for any.
        limits: Its own limits (exact decimal texts).
        scopes: The inherited scopes (root, shared, team, enclosing agents) and their limits.
    """

    store_id: str
    run: str
    attempt: int
    root_id: str
    node_id: str
    ancestry: tuple[str, ...]
    agent: str
    role: str
    task: str
    team: str
    path: tuple[str, ...]
    tools: tuple[str, ...] | None
    limits: Mapping[str, str] = field(default_factory=dict)
    scopes: tuple[Mapping[str, Any], ...] = ()

    def payload(self) -> dict[str, Any]:
        """The agent node payload this context claims (what the ledger must hold)."""
        return {
            "pollard": "agent",
            "name": self.agent,
            "role": self.role,
            "task": self.task,
            "team": self.team,
            "path": list(self.path),
            "tools": None if self.tools is None else list(self.tools),
            "limits": dict(self.limits),
            "scopes": [dict(entry) for entry in self.scopes],
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (see `from_dict`)."""
        return {
            "version": _CONTEXT_VERSION,
            "store_id": self.store_id,
            "run": self.run,
            "attempt": self.attempt,
            "root_id": self.root_id,
            "node_id": self.node_id,
            "ancestry": list(self.ancestry),
            **{k: v for k, v in self.payload().items() if k not in ("pollard", "name")},
            "agent": self.agent,
        }

    def to_json(self) -> str:
        """The context as JSON text."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DelegationContext:
        """Read a context written by `to_dict`.

        Raises:
            ValueError: An unknown version or a missing or malformed field.
        """
        if not isinstance(data, Mapping) or data.get("version") != _CONTEXT_VERSION:
            raise ValueError("not a pollard delegation context (version 1)")
        try:
            tools = data["tools"]
            return cls(
                store_id=str(data["store_id"]),
                run=str(data["run"]),
                attempt=int(data["attempt"]),
                root_id=str(data["root_id"]),
                node_id=str(data["node_id"]),
                ancestry=tuple(str(i) for i in data["ancestry"]),
                agent=str(data["agent"]),
                role=str(data["role"]),
                task=str(data["task"]),
                team=str(data["team"]),
                path=tuple(str(p) for p in data["path"]),
                tools=None if tools is None else tuple(str(t) for t in tools),
                limits={str(k): str(v) for k, v in dict(data["limits"]).items()},
                scopes=tuple(dict(entry) for entry in data["scopes"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed delegation context: {exc!r}") from None

    @classmethod
    def from_json(cls, text: str) -> DelegationContext:
        """Read a context written by `to_json`."""
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class AgentCheckpoint:
    """An agent's delegation and its exact cursor, to resume it after a restart.

    Attributes:
        context: The agent's `DelegationContext`.
        cursor_id: The node its next step attaches to.
        depth: That node's depth (checked again on resume).
    """

    context: DelegationContext
    cursor_id: str
    depth: int

    def to_json(self) -> str:
        """The checkpoint as JSON text."""
        return json.dumps(
            {"context": self.context.to_dict(), "cursor_id": self.cursor_id, "depth": self.depth},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> AgentCheckpoint:
        """Read a checkpoint written by `to_json`.

        Raises:
            ValueError: A malformed checkpoint.
        """
        data = json.loads(text)
        try:
            return cls(
                DelegationContext.from_dict(data["context"]),
                str(data["cursor_id"]),
                int(data["depth"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed agent checkpoint: {exc!r}") from None
