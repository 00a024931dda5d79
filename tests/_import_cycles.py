"""Import cycles in a module graph, for the layer tests of both packages.

A cycle counts every import: module level, lazy (inside a function) and typing-only. A lazy or
``TYPE_CHECKING`` import hides a cycle from the interpreter, not from the reader, and such a
cycle is how a module ends up knowing the one that drives it (the stage that imports its cursor).
"""

from __future__ import annotations

from collections.abc import Mapping, Set


def import_cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module, each sorted, sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target == module:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(groups)
