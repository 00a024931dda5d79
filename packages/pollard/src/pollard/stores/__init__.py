"""Store backends: ``memory`` and ``sqlite`` in the core; ``postgres`` and ``hashrope`` as extras.

Every backend implements the `pollard.Store` protocol; import the classes from ``pollard``.
`parse_store_spec` reads a store given as text (a SQLite path, a ``postgresql://`` URL or a libpq
keyword DSN with an optional ``#store_id``) the way ``Runtime(...)`` and the ``pollard`` command
do, for a tool that takes the same specs.
"""

from pollard.stores._spec import StoreSpec, parse_store_spec

__all__ = ["StoreSpec", "parse_store_spec"]
