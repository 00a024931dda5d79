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
    from ._node import Node as Node
    from ._node import NodeKind as NodeKind
    from ._store import Store as Store
    from .stores.memory import MemoryStore as MemoryStore

# Public names loaded on first access, so `import pollard` stays cheap: name -> defining module.
# To add a lazily loaded export: add it here, to the TYPE_CHECKING block and to __all__ (sorted).
_LAZY: dict[str, str] = {
    "MemoryStore": "pollard.stores.memory",
    "Node": "pollard._node",
    "NodeKind": "pollard._node",
    "Store": "pollard._store",
}

__all__ = [
    "BudgetExceeded",
    "ConfirmationRequired",
    "IntegrityError",
    "MemoryStore",
    "MissingRecording",
    "Node",
    "NodeKind",
    "PolicyViolation",
    "PollardError",
    "Store",
    "UnsupportedSchema",
    "__version__",
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
