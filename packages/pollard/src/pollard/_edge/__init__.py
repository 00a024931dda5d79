"""Layer 6: edge tools over a store: seal and verify, merge, export/import, gc, the tree view."""

__all__: list[str] = []
