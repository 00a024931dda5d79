"""Layer 1: the pure core. Canonical JSON and identity, nodes, the ledger rule, the store protocol.

Nothing here does I/O or imports anything outside the standard library and `pollard.errors`.
"""

__all__: list[str] = []
