"""The step machine's collaborators, typed: meters (and their optional abilities) and the gate.

The shells classify each meter once, when a runtime is built, so a step never asks ``hasattr``:
it iterates typed lists (`RuntimeCore.windows`, ``measurers``, ``annotators``).

Governance plugs in through `Gate`: the front door (``pollard._runtime``) builds the registry
firewall and hands it to the step machine, which never imports governance.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any, Protocol, TypeVar, runtime_checkable

from pollard._step._effects import Step

__all__ = ["Amount", "Annotator", "Gate", "Measurer", "Meter", "Readings", "WindowedMeter"]

Amount = int | float | Decimal

#: The run cursor a `Gate` is handed. The step machine only carries the gate (its shells call
#: it), so the protocol is generic in the cursor rather than importing it: the cursor imports
#: the context, which imports this module.
CursorT_contra = TypeVar("CursorT_contra", contravariant=True)


@runtime_checkable
class Meter(Protocol):
    """What the runtime needs from a meter."""

    name: str

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> Amount:
        """Return the actual charge of a finished step (``result`` is None for failed steps)."""
        ...

    def precheck_estimate(self, kind: str, payload: Any) -> Amount | None:
        """Return the charge expected before the step runs, or None when unknown."""
        ...


@runtime_checkable
class WindowedMeter(Meter, Protocol):
    """A meter that is also a sliding rate window (`pollard.WindowMeter`)."""

    limit: Decimal
    window_seconds: float

    def key(self, root_id: str) -> str:
        """The window's ledger key for a run rooted at ``root_id``."""
        ...


@runtime_checkable
class Readings(Protocol):
    """What a measurement yields: extra meta for the node (for example joules)."""

    def readings(self) -> Mapping[str, Any]:
        """Return the meta entries measured around the step function."""
        ...


@runtime_checkable
class Measurer(Protocol):
    """A meter that measures around the step function (``with meter.measure() as reader``)."""

    def measure(self) -> AbstractContextManager[Any]:
        """Return a context manager wrapped around the call; what it yields may be `Readings`."""
        ...


@runtime_checkable
class Annotator(Protocol):
    """A meter that adds meta to an executed step (never called for served steps)."""

    def settle_meta(
        self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """Return extra meta for the node, or None."""
        ...


class Gate(Protocol[CursorT_contra]):
    """Governance as the step machine sees it: the registered branch of tool calls.

    Both step methods are generators of effects, driven by whichever shell runs the call.
    """

    @property
    def registry(self) -> Any:
        """The action registry the gate resolves calls against."""
        ...

    @property
    def policies(self) -> tuple[Any, ...]:
        """The policies asked before a registered call runs."""
        ...

    def tool_call(
        self,
        state: CursorT_contra,
        name: str,
        args: Any,
        *,
        version: str | None,
        attempt: int,
        actor: str | None = None,
    ) -> Step:
        """Resolve, validate, redact, ask policies and run one registered tool call.

        ``actor`` (who makes the call; None: the cursor's own actor) binds stored approvals.
        """
        ...

    def confirm(self, state: CursorT_contra, token: str, *, args: Any = None) -> Step:
        """Run a call a policy held for confirmation."""
        ...

    def bind_root(self, state: CursorT_contra) -> None:
        """Note the gate's audit facts on a run root (once per opened run)."""
        ...
