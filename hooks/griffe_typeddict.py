"""Griffe extension: a TypedDict assembled from private TypedDicts shows their keys as its own.

``pollux.interaction.GenerationSettings`` and ``DeferredSettings`` are built from private pieces
(``_Sampling``, ``_ToolControl``, ``_ProviderOptions``) so both keep the seed's key order. The site
documents only the public classes, and griffe would list inherited keys in reverse base order; this
copies each private base's keys (their annotations and docstrings) onto the public class in the
order Python itself gives them, so the page lists them as ``help()`` and ``inspect`` do.
"""

from __future__ import annotations

from typing import Any

import griffe

__all__ = ["TypedDictKeys"]


class TypedDictKeys(griffe.Extension):
    """Flatten the keys of private TypedDict bases into the public TypedDict."""

    def on_class(self, *, cls: griffe.Class, **_: Any) -> None:
        """Copy the keys of ``cls``'s private bases (in base order) before its own keys."""
        module = cls.parent
        if module is None:
            return
        keys: list[griffe.Attribute] = []
        for base in cls.bases:
            name = str(base)
            piece = module.members.get(name) if name.startswith("_") else None
            if isinstance(piece, griffe.Class):
                keys.extend(m for m in piece.members.values() if isinstance(m, griffe.Attribute))
        if not keys:
            return
        own = dict(cls.members)
        for name in own:
            cls.del_member(name)
        for key in keys:
            docstring = key.docstring
            copy = griffe.Attribute(
                key.name,
                lineno=key.lineno,
                endlineno=key.endlineno,
                annotation=key.annotation,
                docstring=griffe.Docstring(
                    docstring.value, lineno=docstring.lineno, endlineno=docstring.endlineno
                )
                if docstring is not None
                else None,
            )
            copy.labels |= key.labels
            cls.set_member(key.name, copy)
        for name, member in own.items():
            cls.set_member(name, member)
