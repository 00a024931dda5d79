"""Policies: the decision a registered tool call needs after it resolved and validated.

A policy sees the resolved action and the original arguments and answers ``Decision.ALLOW``,
``Decision.DENY`` (a recorded refusal, ``PolicyViolation``) or ``Decision.CONFIRM`` (a recorded
refusal that can be confirmed later with ``run.confirm(token)``, ``ConfirmationRequired``).
Policies run in order; the first DENY wins, otherwise any CONFIRM asks for confirmation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .registry import ActionSpec

__all__ = ["Decision", "Policy", "PolicyContext"]


class Decision(str, Enum):
    """A policy's answer for one registered tool call."""

    ALLOW = "allow"
    """Run the call."""
    DENY = "deny"
    """Refuse the call: a refusal node is recorded and ``PolicyViolation`` is raised."""
    CONFIRM = "confirm"
    """Hold the call until ``run.confirm(token)``; ``ConfirmationRequired`` is raised."""


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
        actor: The name of the team agent making the call (`TeamAgent.name`), or None for a
            call outside a team. An approval bound to an actor reads it here.
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
