"""Policies: the decision a registered tool call needs after it resolved and validated.

A policy sees the resolved action and the original arguments and answers ``Decision.ALLOW``,
``Decision.DENY`` (a recorded refusal, ``PolicyViolation``) or ``Decision.CONFIRM`` (a recorded
refusal that can be confirmed later with ``run.confirm(token)``, ``ConfirmationRequired``) or
``Decision.REQUIRE_APPROVAL`` (the call runs only with a decided, stored approval,
``ApprovalRequired``; `ApprovalPolicy` answers it for the actions it names).
Policies run in order; the first DENY wins, then any REQUIRE_APPROVAL needs its stored approval,
then any CONFIRM asks for confirmation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .registry import ActionSpec

__all__ = ["ApprovalPolicy", "Decision", "Policy", "PolicyContext"]


class Decision(str, Enum):
    """A policy's answer for one registered tool call."""

    ALLOW = "allow"
    """Run the call."""
    DENY = "deny"
    """Refuse the call: a refusal node is recorded and ``PolicyViolation`` is raised."""
    CONFIRM = "confirm"
    """Hold the call until ``run.confirm(token)``; ``ConfirmationRequired`` is raised."""
    REQUIRE_APPROVAL = "require_approval"
    """Run the call only under a decided, stored approval bound to its actor, action, registry
    and arguments (recorded as a request and ``ApprovalRequired`` raised until then). Neither
    ``run.confirm`` nor a resume token satisfies it."""


@dataclass(frozen=True)
class PolicyContext:
    """What a policy can see about one registered tool call.

    Attributes:
        spec: The resolved action.
        args: The original arguments (sensitive fields NOT redacted: policies may need them; do not
            log them). A private copy, so a policy cannot change what the handler receives.
        cursor_id: The node the call would be recorded under.
        run_label: The run's label.
        counters: What the run has spent so far per meter (``run.report()["spent"]``).
        confirmed: True when the call is being executed through ``run.confirm(token)``; a
            CONFIRM answer is then satisfied, a DENY still refuses.
        dry_run: True when the runtime is in dry-run mode.
        actor: Who makes the call (``tool_call(..., actor=...)``, or the actor of the run's
            cursor: a team agent's ``TeamAgent.name``), or ``None``. An approval bound to an
            actor reads it here.
    """

    spec: ActionSpec
    args: Mapping[str, Any]
    cursor_id: str
    run_label: str
    counters: Mapping[str, Decimal] = field(default_factory=dict)
    confirmed: bool = False
    dry_run: bool = False
    actor: str | None = None


@runtime_checkable
class Policy(Protocol):
    """Decides whether a resolved, schema-valid registered tool call may run.

    Example:
        >>> class ConfirmWrites:
        ...     def decide(self, context: PolicyContext) -> Decision:
        ...         return Decision.CONFIRM if context.spec.side_effects else Decision.ALLOW
    """

    def decide(self, context: PolicyContext) -> Decision:
        """Return ALLOW, DENY or CONFIRM for the call described by ``context``."""
        ...


class ApprovalPolicy:
    """Requires a stored, decided approval before matching registered actions run.

    A matching call without an approved request records one (bound to the actor, the action,
    the registry digest and the argument digest) and raises `ApprovalRequired` naming it; a
    person or another process decides it (`pollard.decide_approval`, ``pollard approve``); the
    same call made again, in any process, then runs exactly once. Process-local confirmation
    (``run.confirm``) never satisfies it. A dry run records without running, so it needs no
    approval.

    Args:
        actions: The registered action names that need approval; ``None`` (the default): every
            action with ``side_effects=True``.
        actors: Only calls by these actors need approval (``None``: every actor, including
            calls that name none).
        when: A further predicate on the `PolicyContext` (for example an amount above a
            threshold); the call needs approval only when it returns True.
        name: The policy's name in refusal details.

    Example:
        >>> policy = ApprovalPolicy(["refund"])
        >>> policy.name
        'approval'
    """

    def __init__(
        self,
        actions: Iterable[str] | None = None,
        *,
        actors: Iterable[str] | None = None,
        when: Callable[[PolicyContext], bool] | None = None,
        name: str = "approval",
    ) -> None:
        if isinstance(actions, str) or isinstance(actors, str):
            raise TypeError("actions and actors are collections of names, not one str")
        if when is not None and not callable(when):
            raise TypeError("when must be a callable taking a PolicyContext")
        if not isinstance(name, str) or not name:
            raise ValueError("an ApprovalPolicy name must be a non-empty str")
        self.actions = None if actions is None else frozenset(actions)
        self.actors = None if actors is None else frozenset(actors)
        self.when = when
        self.name = name

    def __repr__(self) -> str:
        actions = "side-effecting" if self.actions is None else sorted(self.actions)
        return f"ApprovalPolicy({actions!r}, name={self.name!r})"

    def decide(self, context: PolicyContext) -> Decision:
        """Answer ``REQUIRE_APPROVAL`` for a matching call (``ALLOW`` otherwise, and in dry run).

        ``context.confirmed`` changes nothing: a confirmation is not a stored approval.
        """
        if context.dry_run:
            return Decision.ALLOW
        if self.actions is None:
            matched = bool(context.spec.side_effects)
        else:
            matched = context.spec.name in self.actions
        if matched and self.actors is not None:
            matched = context.actor in self.actors
        if matched and self.when is not None:
            matched = bool(self.when(context))
        return Decision.REQUIRE_APPROVAL if matched else Decision.ALLOW
