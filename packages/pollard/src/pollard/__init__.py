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
from .errors import BudgetExceeded as BudgetExceeded
from .errors import ConfirmationRequired as ConfirmationRequired
from .errors import IntegrityError as IntegrityError
from .errors import MissingRecording as MissingRecording
from .errors import PolicyViolation as PolicyViolation
from .errors import PollardError as PollardError
from .errors import UnsupportedSchema as UnsupportedSchema

if _typing.TYPE_CHECKING:
    from ._async import AsyncRun as AsyncRun
    from ._async import AsyncRuntime as AsyncRuntime
    from ._budget import Budget as Budget
    from ._gc import GCReport as GCReport
    from ._gc import gc as gc
    from ._merge import MergeReport as MergeReport
    from ._merge import merge as merge
    from ._node import Node as Node
    from ._node import NodeKind as NodeKind
    from ._runtime import ReplayMode as ReplayMode
    from ._runtime import Run as Run
    from ._runtime import Runtime as Runtime
    from ._seal import SealReport as SealReport
    from ._seal import VerifyFinding as VerifyFinding
    from ._seal import VerifyReport as VerifyReport
    from ._seal import recompute_charges as recompute_charges
    from ._seal import seal as seal
    from ._seal import verify as verify
    from ._store import Store as Store
    from ._transfer import ExportReport as ExportReport
    from ._transfer import ImportReport as ImportReport
    from ._transfer import export_subtree as export_subtree
    from ._transfer import import_subtree as import_subtree
    from .meters import WindowMeter as WindowMeter
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
    "AsyncRun": "pollard._async",
    "AsyncRuntime": "pollard._async",
    "SealReport": "pollard._seal",
    "VerifyReport": "pollard._seal",
    "VerifyFinding": "pollard._seal",
    "recompute_charges": "pollard._seal",
    "seal": "pollard._seal",
    "verify": "pollard._seal",
    "ActionSpec": "pollard.registry",
    "Budget": "pollard._budget",
    "Decision": "pollard.policy",
    "HashRopeStore": "pollard.stores.hashrope",
    "MemoryStore": "pollard.stores.memory",
    "Node": "pollard._node",
    "NodeKind": "pollard._node",
    "Policy": "pollard.policy",
    "PolicyContext": "pollard.policy",
    "PostgresStore": "pollard.stores.postgres",
    "Registry": "pollard.registry",
    "ReplayMode": "pollard._runtime",
    "Run": "pollard._runtime",
    "Runtime": "pollard._runtime",
    "SQLiteStore": "pollard.stores.sqlite",
    "Store": "pollard._store",
    "WindowMeter": "pollard.meters",
    "redact": "pollard.redaction",
    "ExportReport": "pollard._transfer",
    "GCReport": "pollard._gc",
    "ImportReport": "pollard._transfer",
    "MergeReport": "pollard._merge",
    "export_subtree": "pollard._transfer",
    "gc": "pollard._gc",
    "import_subtree": "pollard._transfer",
    "merge": "pollard._merge",
}

__all__ = [
    "ActionSpec",
    "AsyncRun",
    "AsyncRuntime",
    "Budget",
    "BudgetExceeded",
    "ConfirmationRequired",
    "Decision",
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
    "Run",
    "Runtime",
    "SQLiteStore",
    "SealReport",
    "Store",
    "UnsupportedSchema",
    "VerifyFinding",
    "VerifyReport",
    "WindowMeter",
    "__version__",
    "export_subtree",
    "gc",
    "import_subtree",
    "merge",
    "recompute_charges",
    "redact",
    "seal",
    "verify",
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
