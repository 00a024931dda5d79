"""MkDocs hook: tables generated from the code, so the pages cannot drift from it.

A page asks for a generated block with a marker comment on a line of its own:

- ``<!-- generated: capability-table -->``: every provider registered in
  ``pollux.providers._registry.PROVIDERS`` (plus the mock), one column each, one row per
  ``Capabilities`` field, read from the provider class's ``CAPABILITIES`` table;
- ``<!-- generated: error-tree pollux -->`` / ``<!-- generated: error-tree pollard -->``: the error
  hierarchy of that package, drawn from the classes themselves.

The functions are plain so tests can call them too (``tests/docs/test_site.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

__all__ = [
    "capability_table",
    "error_tree",
    "on_page_markdown",
    "render",
    "repository_links",
]

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([a-z]+))? -->$", re.M)

# One line per capability: what a reader wants to know, in the words of the guides.
_ROWS: dict[str, str] = {
    "streaming": "`stream()`",
    "structured_outputs": "Structured output (`output=`)",
    "reasoning": "`reasoning_effort`",
    "reasoning_budget_tokens": "`reasoning_budget_tokens`",
    "tools": "Function tools, `tool_choice`",
    "conversation": "`history` and `continuation`",
    "uploads": "Local files (uploaded or inlined)",
    "persistent_cache": "`CachePolicy` (explicit cache)",
    "implicit_caching": 'Implicit prefix caching (declared; `cache="auto"` is accepted everywhere)',
    "deferred_delivery": "`defer()` (batch APIs)",
    "temperature": "`temperature`",
    "top_p": "`top_p`",
    "seed": "`seed`",
    "max_tokens": "`max_tokens`",
    "tool_result_errors": "`ToolResult.is_error`",
    "prompt_cache_ttl": "`CachePolicy` TTL for prompt caching",
}


def _field_comments(cls: type) -> dict[str, str]:
    """Each field's ``#:`` comment, joined, for a capability the words above do not cover yet."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
        elif (field := re.match(r"(\w+): bool\b", stripped)) and pending:
            comments[field.group(1)] = " ".join(pending).rstrip(".").replace("``", "`")
            pending = []
        elif not stripped.startswith("#"):
            pending = []
    return comments


def _providers() -> list[tuple[str, Any]]:
    """(name, provider class) for the mock and every registered provider, in a stable order."""
    from pollux.providers._registry import PROVIDERS
    from pollux.providers.mock import MockProvider

    found: list[tuple[str, Any]] = [("mock", MockProvider)]
    for name in sorted(PROVIDERS):
        module_name, class_name = PROVIDERS[name]
        found.append((name, getattr(importlib.import_module(module_name), class_name)))
    return found


def capability_table() -> str:
    """The capability table of every provider in this build, as Markdown."""
    from pollux.providers.base import Capabilities

    providers = _providers()
    names = [f.name for f in dataclasses.fields(Capabilities)]
    described = {**_field_comments(Capabilities), **_ROWS}
    lines = [
        "| Capability | " + " | ".join(f"`{name}`" for name, _ in providers) + " |",
        "|---|" + "---|" * len(providers),
    ]
    for field in names:
        cells = ["yes" if getattr(cls.CAPABILITIES, field) else "no" for _, cls in providers]
        lines.append(f"| {described.get(field, f'`{field}`')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def error_tree(package: str) -> str:
    """The public error classes of ``package`` as an indented tree in a text block."""
    module = importlib.import_module(package)
    public = {
        obj
        for name in module.__all__
        if isinstance(obj := getattr(module, name), type) and issubclass(obj, BaseException)
    }
    roots = [cls for cls in public if not any(b in public for b in cls.__mro__[1:])]
    lines: list[str] = []

    def children(cls: type) -> list[type]:
        found = (c for c in public if c.__bases__[0] is cls)
        return sorted(found, key=lambda c: c.__name__)

    def label(cls: type) -> str:
        outside = [b.__name__ for b in cls.__bases__ if b not in public and b is not Exception]
        return cls.__name__ + (f"  (also {', '.join(outside)})" if outside else "")

    def draw(cls: type, prefix: str) -> None:
        kids = children(cls)
        for number, child in enumerate(kids, start=1):
            last = number == len(kids)
            lines.append(prefix + ("└── " if last else "├── ") + label(child))
            draw(child, prefix + ("    " if last else "│   "))

    for root in sorted(roots, key=lambda c: c.__name__):
        lines.append(label(root))
        draw(root, "")
    return "```text\n" + "\n".join(lines) + "\n```"


def render(kind: str, argument: str | None) -> str:
    """The Markdown for one marker."""
    if kind == "capability-table":
        return capability_table()
    if kind == "error-tree" and argument:
        return error_tree(argument)
    raise ValueError(f"unknown generated block {kind!r} {argument!r}")


def repository_links(markdown: str, page_path: str, docs_dir: Path) -> str:
    """Turn links to repository files outside ``docs/`` into their repository path.

    Pages link to ``examples/*.py`` so they work when read on a forge; on the site those files do
    not exist, so the link becomes the path in code. A link to a file that does not exist in the
    repository is left alone, and the strict build reports it.
    """
    page_dir = (docs_dir / page_path).parent
    root = docs_dir.parent

    def rewrite(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        if "://" in target or target.startswith("#"):
            return match.group(0)
        resolved = (page_dir / target.split("#")[0]).resolve()
        if resolved.is_relative_to(docs_dir.resolve()) or not resolved.is_file():
            return match.group(0)
        relative = resolved.relative_to(root.resolve()).as_posix()
        return text if text.strip("`") == relative else f"{text} (`{relative}` in the repository)"

    return _LINK.sub(rewrite, markdown)


def on_page_markdown(markdown: str, *, page: Any, config: Any, **_: Any) -> str:
    """Replace each marker with its generated block; point repository links at their paths."""
    markdown = _MARKER.sub(lambda m: render(m.group(1), m.group(2)), markdown)
    return repository_links(markdown, page.file.src_uri, Path(config["docs_dir"]))
