"""pollard: governed execution trees for AI agents. Budget it, gate it, replay it.

Layering (each layer imports only the ones below it):

1. Pure core: canonical JSON and identity (node ids, digests, domain separation).
2. Nodes and the store protocol; backends memory, sqlite, postgres, hashrope.
3. The ledger: running totals per (scope, meter), reservations with leases, windows.
4. The runtime: one step state machine with a sync shell and an async shell.
5. Governance: registry, policies, redaction, meters, estimators.
6. The edge: seal, verify, merge, export/import, gc, CLI, HTML, OpenTelemetry, pytest plugin,
   and ``pollard.adapters``.

The core imports nothing outside the standard library.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from ._version import __version__ as __version__
from .errors import ApprovalConflict as ApprovalConflict
from .errors import ApprovalDenied as ApprovalDenied
from .errors import ApprovalRequired as ApprovalRequired
from .errors import BudgetExceeded as BudgetExceeded
from .errors import ConfirmationRequired as ConfirmationRequired
from .errors import EffectAmbiguous as EffectAmbiguous
from .errors import IntegrityError as IntegrityError
from .errors import MissingRecording as MissingRecording
from .errors import PolicyViolation as PolicyViolation
from .errors import PollardError as PollardError
from .errors import UnsupportedSchema as UnsupportedSchema
from .errors import WriterConflict as WriterConflict

if _typing.TYPE_CHECKING:
    from pollard._core._budget import Budget as Budget
    from pollard._core._ledger import WindowClaim as WindowClaim
    from pollard._core._node import Node as Node
    from pollard._core._node import NodeKind as NodeKind
    from pollard._core._store import Store as Store
    from pollard._edge._gc import GCReport as GCReport
    from pollard._edge._gc import gc as gc
    from pollard._edge._merge import MergeReport as MergeReport
    from pollard._edge._merge import merge as merge
    from pollard._edge._seal import SealReport as SealReport
    from pollard._edge._seal import VerifyFinding as VerifyFinding
    from pollard._edge._seal import VerifyReport as VerifyReport
    from pollard._edge._seal import recompute_charges as recompute_charges
    from pollard._edge._seal import seal as seal
    from pollard._edge._seal import verify as verify
    from pollard._edge._teams import ResultReference as ResultReference
    from pollard._edge._teams import record_dependency as record_dependency
    from pollard._edge._teams import record_handoff as record_handoff
    from pollard._edge._teams import team_report as team_report
    from pollard._edge._teams import verify_dependencies as verify_dependencies
    from pollard._edge._transfer import ExportReport as ExportReport
    from pollard._edge._transfer import ImportReport as ImportReport
    from pollard._edge._transfer import export_subtree as export_subtree
    from pollard._edge._transfer import import_subtree as import_subtree
    from pollard._governance._approvals import Approval as Approval
    from pollard._governance._approvals import decide_approval as decide_approval
    from pollard._governance._approvals import get_approval as get_approval
    from pollard._governance._approvals import list_approvals as list_approvals
    from pollard._runtime._approvals import arequest_approval as arequest_approval
    from pollard._runtime._approvals import request_approval as request_approval
    from pollard._runtime._async import AsyncRun as AsyncRun
    from pollard._runtime._async import AsyncRuntime as AsyncRuntime
    from pollard._runtime._sync import ReplayMode as ReplayMode
    from pollard._runtime._sync import Run as Run
    from pollard._runtime._sync import Runtime as Runtime
    from pollard._runtime._team import AgentCheckpoint as AgentCheckpoint
    from pollard._runtime._team import DelegationContext as DelegationContext
    from pollard._runtime._team import SharedBudget as SharedBudget
    from pollard._runtime._team import Team as Team
    from pollard._runtime._team import TeamAgent as TeamAgent
    from pollard._step._intent import idempotency_key as idempotency_key

    from .meters import WindowMeter as WindowMeter
    from .policy import ApprovalPolicy as ApprovalPolicy
    from .policy import Decision as Decision
    from .policy import Policy as Policy
    from .policy import PolicyContext as PolicyContext
    from .redaction import redact as redact
    from .registry import ActionSpec as ActionSpec
    from .registry import Registry as Registry
    from .stores.hashrope import HashRopeStore as HashRopeStore
    from .stores.memory import MemoryStore as MemoryStore
    from .stores.postgres import PostgresStore as PostgresStore
    from .stores.sqlite import SQLiteStore as SQLiteStore

# Public names loaded on first access, so `import pollard` stays cheap: name -> defining module.
# To add a lazily loaded export: add it here, to the TYPE_CHECKING block and to __all__ (sorted).
_LAZY: dict[str, str] = {
    "Approval": "pollard._governance._approvals",
    "ApprovalPolicy": "pollard.policy",
    "arequest_approval": "pollard._runtime._approvals",
    "decide_approval": "pollard._governance._approvals",
    "get_approval": "pollard._governance._approvals",
    "list_approvals": "pollard._governance._approvals",
    "request_approval": "pollard._runtime._approvals",
    "ResultReference": "pollard._edge._teams",
    "record_dependency": "pollard._edge._teams",
    "record_handoff": "pollard._edge._teams",
    "team_report": "pollard._edge._teams",
    "verify_dependencies": "pollard._edge._teams",
    "AgentCheckpoint": "pollard._runtime._team",
    "DelegationContext": "pollard._runtime._team",
    "SharedBudget": "pollard._runtime._team",
    "Team": "pollard._runtime._team",
    "TeamAgent": "pollard._runtime._team",
    "AsyncRun": "pollard._runtime._async",
    "AsyncRuntime": "pollard._runtime._async",
    "SealReport": "pollard._edge._seal",
    "VerifyReport": "pollard._edge._seal",
    "VerifyFinding": "pollard._edge._seal",
    "recompute_charges": "pollard._edge._seal",
    "seal": "pollard._edge._seal",
    "verify": "pollard._edge._seal",
    "ActionSpec": "pollard.registry",
    "Budget": "pollard._core._budget",
    "Decision": "pollard.policy",
    "HashRopeStore": "pollard.stores.hashrope",
    "MemoryStore": "pollard.stores.memory",
    "Node": "pollard._core._node",
    "NodeKind": "pollard._core._node",
    "Policy": "pollard.policy",
    "PolicyContext": "pollard.policy",
    "PostgresStore": "pollard.stores.postgres",
    "Registry": "pollard.registry",
    "ReplayMode": "pollard._runtime._sync",
    "Run": "pollard._runtime._sync",
    "Runtime": "pollard._runtime._sync",
    "SQLiteStore": "pollard.stores.sqlite",
    "Store": "pollard._core._store",
    "WindowClaim": "pollard._core._ledger",
    "WindowMeter": "pollard.meters",
    "redact": "pollard.redaction",
    "ExportReport": "pollard._edge._transfer",
    "GCReport": "pollard._edge._gc",
    "ImportReport": "pollard._edge._transfer",
    "MergeReport": "pollard._edge._merge",
    "export_subtree": "pollard._edge._transfer",
    "gc": "pollard._edge._gc",
    "idempotency_key": "pollard._step._intent",
    "import_subtree": "pollard._edge._transfer",
    "merge": "pollard._edge._merge",
}

__all__ = [
    "ActionSpec",
    "AgentCheckpoint",
    "Approval",
    "ApprovalConflict",
    "ApprovalDenied",
    "ApprovalPolicy",
    "ApprovalRequired",
    "AsyncRun",
    "AsyncRuntime",
    "Budget",
    "BudgetExceeded",
    "ConfirmationRequired",
    "Decision",
    "DelegationContext",
    "EffectAmbiguous",
    "ExportReport",
    "GCReport",
    "HashRopeStore",
    "ImportReport",
    "IntegrityError",
    "MemoryStore",
    "MergeReport",
    "MissingRecording",
    "Node",
    "NodeKind",
    "Policy",
    "PolicyContext",
    "PolicyViolation",
    "PollardError",
    "PostgresStore",
    "Registry",
    "ReplayMode",
    "ResultReference",
    "Run",
    "Runtime",
    "SQLiteStore",
    "SealReport",
    "SharedBudget",
    "Store",
    "Team",
    "TeamAgent",
    "UnsupportedSchema",
    "VerifyFinding",
    "VerifyReport",
    "WindowClaim",
    "WindowMeter",
    "WriterConflict",
    "__version__",
    "arequest_approval",
    "decide_approval",
    "export_subtree",
    "gc",
    "get_approval",
    "idempotency_key",
    "import_subtree",
    "list_approvals",
    "merge",
    "recompute_charges",
    "record_dependency",
    "record_handoff",
    "redact",
    "request_approval",
    "seal",
    "team_report",
    "verify",
    "verify_dependencies",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pollard' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
