"""Store backends: ``memory`` and ``sqlite`` in the core; ``postgres`` and ``hashrope`` as extras.

Every backend implements the `pollard.Store` protocol; import the classes from ``pollard``.
"""
