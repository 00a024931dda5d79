"""Griffe extension: read a Google-style ``Example:`` section as ``Examples:``.

The packages' docstrings say ``Example:`` (singular), which griffe reads as a free-form admonition,
so their ``>>>`` sessions would be rendered as Markdown (and ``x["a"]["b"]`` looked like a link).
Reading them as an examples section renders them as code without editing every docstring.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["ExampleSections"]

_SINGULAR = re.compile(r"^(\s*)Example:\s*$", re.M)


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` section headers to ``Examples:`` as objects are loaded."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        """Rewrite the object's docstring in place (the source files are untouched)."""
        if obj.docstring is not None:
            obj.docstring.value = _SINGULAR.sub(r"\1Examples:", obj.docstring.value)
