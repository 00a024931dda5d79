"""Griffe extension: read the packages' docstrings as the Google dialect mkdocstrings renders.

Two habits of the docstrings would not render otherwise, and the sources stay untouched:

- an ``Example:`` section (singular) is read by griffe as a free-form admonition, so its ``>>>``
  session would be rendered as Markdown (``x["a"]["b"]`` looked like a link); it is read as
  ``Examples:``, which renders as code;
- a reST literal-block marker (``the problem::``) reads as a plain colon;
- a Sphinx role (``:class:`~pollux.Config```, ``:func:`run```, ``:meth:`Session.run```) becomes a
  cross-reference to the object when the site documents it, and plain code when it does not.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

__all__ = ["ExampleSections"]

_SINGULAR = re.compile(r"^(\s*)Example:\s*$", re.M)
_LITERAL_MARKER = re.compile(r"(?<=\w)::$", re.M)  # reST "text::" before an indented block
_ROLE = re.compile(r":(?:class|func|meth|attr|exc|data|mod|obj):`(?P<tilde>~?)(?P<name>[\w.]+)`")


def _identifier(obj: griffe.Object, name: str) -> str:
    """The full path ``name`` means where ``obj`` is documented (its module's names first)."""
    if name.startswith(("pollux.", "pollard.")) or name in {"pollux", "pollard"}:
        return name
    head, _, rest = name.partition(".")
    module = obj.module
    for scope in (obj, obj.parent, module):
        if scope is not None and head in scope.members:
            return ".".join(filter(None, [scope.members[head].path, rest]))
    return name


def _cross_reference(obj: griffe.Object, match: re.Match[str]) -> str:
    name = match.group("name")
    title = name.rsplit(".", 1)[-1] if match.group("tilde") else name
    identifier = html.escape(_identifier(obj, name), quote=True)
    # `optional`: an object the site does not document renders as plain code, not as a warning
    return (
        f'<autoref identifier="{identifier}" optional><code>{html.escape(title)}</code></autoref>'
    )


class ExampleSections(griffe.Extension):
    """Rewrite each docstring as it is loaded (the source files are untouched)."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        """Rename ``Example:`` sections and turn Sphinx roles into cross-references."""
        if obj.docstring is None:
            return
        text = _SINGULAR.sub(r"\1Examples:", obj.docstring.value)
        text = _LITERAL_MARKER.sub(":", text)
        obj.docstring.value = _ROLE.sub(lambda match: _cross_reference(obj, match), text)
