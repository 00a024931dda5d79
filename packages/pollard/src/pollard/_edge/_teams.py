"""Team accounting and verifiable references between agents.

``team_report`` reads each agent's running totals from the ledger (team and agent anchors
tally every charge of their subtree in the step's own transaction), so a sub-agent's work is
in its parents' totals once and reported once: ``own`` is an agent's total minus its direct
sub-agents' totals. Work outside any agent is reported as ``unattributed``, so the parts always
add up to the whole.

``record_dependency`` and ``record_handoff`` write notes that name other nodes by id and result
digest; ``verify_dependencies`` checks that every node so named is still stored, intact and
holds the very result that was referenced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pollard._core._amounts import exact_map, plain_map
from pollard._core._ledger import ZERO
from pollard._core._node import Node, NodeKind
from pollard._core._store import Store
from pollard._edge._seal import VerifyFinding, VerifyReport
from pollard._runtime._async import AsyncRun
from pollard._runtime._sync import Run, run_state
from pollard._runtime._team import TeamAgent, agent_info
from pollard._step._cursor import RunState
from pollard._step._effects import drive_sync
from pollard.errors import IntegrityError

__all__ = [
    "ResultReference",
    "record_dependency",
    "record_handoff",
    "team_report",
    "verify_dependencies",
]


def _add(into: dict[str, Decimal], amounts: Mapping[str, Decimal], sign: int = 1) -> None:
    for meter, amount in amounts.items():
        into[meter] = into.get(meter, ZERO) + sign * amount


def team_report(store: Store, node_id: str, *, exact: bool = False) -> dict[str, Any]:
    """Charges by agent, task and role under a node (a run root, a team or an agent).

    Amounts come from the ledger: each agent's ``total`` is its anchor's running totals
    (its sub-agents included) and ``own`` that total minus its direct sub-agents' totals
    (meters at zero left out), so
    ``by_agent``, ``by_task`` and ``by_role`` sum ``own`` amounts and count nested work once.
    ``unattributed`` is what the node's total holds outside every agent; the ``own`` amounts
    plus ``unattributed`` add up to ``total``.

    Args:
        store: The store.
        node_id: The run root, team or agent anchor to report on.
        exact: Exact decimal texts (the audit form) instead of plain numbers.

    Returns:
        ``{"node_id", "total", "agents": [...], "teams": [...], "by_agent", "by_task",
        "by_role", "unattributed"}``; each agent as ``{"name", "role", "task", "team",
        "path", "node_id", "parent", "total", "own"}`` (``parent``: the enclosing agent's
        node id, or None).

    Raises:
        KeyError: If ``node_id`` is not stored.

    Example:
        >>> from pollard import Runtime, Team, team_report
        >>> from pollard.meters import StepMeter
        >>> with Runtime(meters=[StepMeter()]) as rt, rt.run("plan") as run:
        ...     lead = Team(run, "desk").agent("lead", role="planner")
        ...     helper = lead.delegate("helper", role="researcher")
        ...     for agent in (lead, helper, helper):
        ...         _ = agent.run.model_call({"q": agent.cursor_id}, fn=lambda p: {})
        ...     report = team_report(rt.store, run.root_id)
        >>> report["by_role"], report["total"]
        ({'planner': {'steps': 1}, 'researcher': {'steps': 2}}, {'steps': 3})
    """
    top = store.get(node_id)
    form = exact_map if exact else plain_map
    agents: list[dict[str, Any]] = []
    teams: list[dict[str, Any]] = []
    owner: dict[str, str | None] = {top.id: None}  # node -> nearest agent anchor at or above
    totals: dict[str, dict[str, Decimal]] = {}
    own: dict[str, dict[str, Decimal]] = {}
    top_level: list[str] = []
    for node in store.walk(node_id):
        above = owner.get(node.parent or "") if node.id != top.id else None
        info = agent_info(node)
        if info is not None and node.id != top.id:
            totals[node.id] = store.totals(node.id)
            own[node.id] = dict(totals[node.id])
            if above is None:
                top_level.append(node.id)
            else:
                _add(own[above], totals[node.id], -1)
            agents.append(
                {
                    "name": info.get("name"),
                    "role": info.get("role"),
                    "task": info.get("task"),
                    "team": info.get("team"),
                    "path": list(info.get("path", [])),
                    "node_id": node.id,
                    "parent": above,
                }
            )
            owner[node.id] = node.id
        else:
            owner[node.id] = above
            payload = node.payload
            if (
                node.kind is NodeKind.NOTE
                and isinstance(payload, dict)
                and payload.get("pollard") == "team"
            ):
                teams.append(
                    {
                        "name": payload.get("name"),
                        "node_id": node.id,
                        "total": form(store.totals(node.id)),
                    }
                )
    whole = store.totals(top.id)
    if agent_info(top) is not None:
        # Reporting on an agent: its own work is its own, not unattributed.
        own[top.id] = dict(whole)
        for child in top_level:
            _add(own[top.id], totals[child], -1)
        top_level = [top.id]
        totals[top.id] = whole
        info = agent_info(top) or {}
        agents.insert(
            0,
            {
                "name": info.get("name"),
                "role": info.get("role"),
                "task": info.get("task"),
                "team": info.get("team"),
                "path": list(info.get("path", [])),
                "node_id": top.id,
                "parent": None,
            },
        )
    unattributed = dict(whole)
    for child in top_level:
        _add(unattributed, totals[child], -1)
    by: dict[str, dict[str, dict[str, Decimal]]] = {"name": {}, "task": {}, "role": {}}
    for agent in agents:
        agent["total"] = form(totals[agent["node_id"]])
        agent["own"] = form({k: v for k, v in own[agent["node_id"]].items() if v})
        for key, groups in by.items():
            _add(groups.setdefault(str(agent[key]), {}), own[agent["node_id"]])
    return {
        "node_id": top.id,
        "total": form(whole),
        "agents": agents,
        "teams": teams,
        "by_agent": {name: form(v) for name, v in sorted(by["name"].items())},
        "by_task": {task: form(v) for task, v in sorted(by["task"].items())},
        "by_role": {role: form(v) for role, v in sorted(by["role"].items())},
        "unattributed": form({k: v for k, v in unattributed.items() if v}),
    }


@dataclass(frozen=True)
class ResultReference:
    """A reference to one node's result: its id and the digest of the result it held.

    Attributes:
        node_id: The referenced node.
        result_digest: The digest of its result when referenced (``Node.result_digest``).
        agent: The name of the agent whose subtree it is in, or None.

    Example:
        >>> from pollard import ResultReference, Runtime, verify_dependencies
        >>> from pollard import record_dependency
        >>> with Runtime() as rt, rt.run("plan") as run:
        ...     found = run.model_call({"q": "sources"}, fn=lambda p: {"text": "3"})
        ...     _ = record_dependency(run, ResultReference.of(found), note="cites it")
        ...     verify_dependencies(rt.store, run.root_id).ok
        True
    """

    node_id: str
    result_digest: str
    agent: str | None = None

    @classmethod
    def of(cls, node: Node, *, agent: str | None = None) -> ResultReference:
        """Reference ``node``'s result.

        Raises:
            ValueError: The node has no result (a note, a refusal, a dry run).
        """
        if node.result_digest is None:
            raise ValueError(f"node {node.id} has no result to reference")
        return cls(node.id, node.result_digest, agent)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {"node_id": self.node_id, "result_digest": self.result_digest, "agent": self.agent}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultReference:
        """Read `to_dict` data.

        Raises:
            ValueError: A missing field.
        """
        try:
            agent = data.get("agent")
            return cls(
                str(data["node_id"]),
                str(data["result_digest"]),
                None if agent is None else str(agent),
            )
        except KeyError as exc:
            raise ValueError(f"malformed result reference: missing {exc}") from None


Worker = Run | AsyncRun | TeamAgent[Run] | TeamAgent[AsyncRun]


def _state(who: Worker) -> RunState:
    if isinstance(who, TeamAgent):
        return run_state(who.run)
    if isinstance(who, (Run, AsyncRun)):
        return run_state(who)
    raise TypeError(f"a run or a TeamAgent is needed, got {type(who).__name__}")


def _refs(references: Iterable[ResultReference]) -> list[dict[str, Any]]:
    out = []
    for ref in references:
        if not isinstance(ref, ResultReference):
            raise TypeError(f"references must be ResultReference values, got {type(ref)}")
        out.append(ref.to_dict())
    return out


def record_dependency(who: Worker, reference: ResultReference, *, note: str = "") -> Node:
    """Record that ``who``'s work depends on a referenced result (a note; the cursor moves).

    Args:
        who: The agent (or run) whose work depends on it.
        reference: The result it depends on.
        note: Why, in words.

    Returns:
        The dependency note.
    """
    state = _state(who)
    payload = {
        "pollard": "dependency",
        "by": state.actor,
        "refs": _refs([reference]),
        "note": str(note),
    }
    node: Node = drive_sync(state.note(payload))
    return node


def record_handoff(
    source: TeamAgent[Run] | TeamAgent[AsyncRun],
    target: TeamAgent[Run] | TeamAgent[AsyncRun],
    references: Iterable[ResultReference] = (),
    *,
    note: str = "",
) -> Node:
    """Record that ``source`` hands work (and results) to ``target`` (a note under ``source``).

    Returns:
        The handoff note (``source``'s cursor moves onto it).
    """
    if not isinstance(target, TeamAgent):
        raise TypeError(f"a handoff goes to a TeamAgent, got {type(target).__name__}")
    state = _state(source)
    payload = {
        "pollard": "handoff",
        "by": state.actor,
        "to": target.name,
        "to_node": target.node_id,
        "refs": _refs(references),
        "note": str(note),
    }
    node: Node = drive_sync(state.note(payload))
    return node


def _referenced(store: Store, note: Node, ref: Mapping[str, Any]) -> str | None:
    """What is wrong with one reference, or None."""
    target = store.find(str(ref.get("node_id")))
    if target is None:
        return f"references node {ref.get('node_id')}, which is not stored"
    try:
        target.check()
    except IntegrityError as exc:
        return f"references node {target.id}, which does not verify: {exc}"
    if target.result_digest != ref.get("result_digest"):
        return (
            f"references node {target.id} with result digest {ref.get('result_digest')}, "
            f"but it holds {target.result_digest}: the result changed"
        )
    return None


def verify_dependencies(store: Store, node_id: str) -> VerifyReport:
    """Check every dependency and handoff note under a node against what it references.

    A reference fails when its node is missing, does not verify against its content, or holds
    another result than the one referenced; a handoff fails when its target agent is missing.

    Returns:
        A `VerifyReport` whose ``nodes`` counts the references checked.

    Raises:
        KeyError: If ``node_id`` is not stored.
    """
    store.get(node_id)
    findings: list[VerifyFinding] = []
    checked = 0
    for node in store.walk(node_id):
        payload = node.payload
        if node.kind is not NodeKind.NOTE or not isinstance(payload, dict):
            continue
        if payload.get("pollard") not in ("dependency", "handoff"):
            continue
        if payload.get("pollard") == "handoff":
            checked += 1
            target = store.find(str(payload.get("to_node")))
            if target is None or agent_info(target) is None:
                findings.append(
                    VerifyFinding(node.id, f"hands off to agent {payload.get('to')!r}, not stored")
                )
        for ref in payload.get("refs") or []:
            checked += 1
            problem = _referenced(store, node, ref if isinstance(ref, Mapping) else {})
            if problem is not None:
                findings.append(VerifyFinding(node.id, problem))
    return VerifyReport(not findings, tuple(findings), checked)
