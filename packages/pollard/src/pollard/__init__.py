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

from ._version import __version__ as __version__

__all__ = ["__version__"]
