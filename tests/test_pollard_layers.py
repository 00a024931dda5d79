"""pollard's layering, read from the source: each layer imports only downward, privacy holds.

Beside the cross-package guards of ``test_foundation.py``. The layers, bottom to top (a module may
import its own layer and the ones below it, including lazily inside functions and for typing):

0. ``pollard.errors``, ``pollard._version``: leaves.
1. ``pollard._core``: canonical JSON and identity, nodes, the ledger rule, amounts, the store
   protocol (no I/O).
2. ``pollard.stores``: the backends.
3. ``pollard._step``: the step machine (effects, cursor, admission, replay, execute, settle) and the
   protocols of its collaborators (meters, the gate).
4. governance: ``pollard._governance`` (the firewall gate, schemas), ``registry``, ``policy``,
   ``redaction``, ``meters``, ``estimators``.
5. ``pollard._runtime``: the shells, which compose the machine with stores, meters and the gate.
6. the edge: ``pollard._edge`` (seal, merge, transfer, gc, view), ``_cli``/``cli``, ``html``,
   ``otel``, ``mcp``, ``pytest_plugin``, ``adapters``.
7. ``pollard`` itself (``__init__``): the public door.
8. the pollux bridge, ``pollard.adapters.pollux``: a client of the public door, built only on
   what a user could build it on (pollard's and pollux's public names and modules).

Privacy: no module imports a ``_private`` name from another module, or reads a ``_private``
attribute that its own source never defines (``run._state`` from an adapter, say). Private
*modules* are the package's own business; private *names* stay in the module that owns them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests._import_cycles import import_cycles

PKG = Path(__file__).resolve().parents[1] / "packages" / "pollard" / "src" / "pollard"

LAYERS: list[tuple[str, ...]] = [
    ("pollard.errors", "pollard._version"),
    ("pollard._core",),
    ("pollard.stores",),
    ("pollard._step",),
    (
        "pollard._governance",
        "pollard.registry",
        "pollard.policy",
        "pollard.redaction",
        "pollard.meters",
        "pollard.estimators",
    ),
    ("pollard._runtime",),
    (
        "pollard._edge",
        "pollard._cli",
        "pollard.cli",
        "pollard.html",
        "pollard.otel",
        "pollard.mcp",
        "pollard.pytest_plugin",
        "pollard.adapters",
    ),
    ("pollard",),
    ("pollard.adapters.pollux",),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer): the longest prefix wins
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best[1]


MODULES = {_module_name(path): path for path in sorted(PKG.rglob("*.py"))}


def _is_module(name: str) -> bool:
    return name in MODULES


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[int, str, list[str]]]:
    """``(line, imported module, names)`` for every import in ``module`` (any nesting)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _resolve(module, node), [a.name for a in node.names]))
    return found


def _pollard_targets(target: str, names: list[str]) -> list[str]:
    """The pollard modules an import reaches (``from pkg import submodule`` reaches both)."""
    if target != "pollard" and not target.startswith("pollard."):
        return []
    out = [target]
    out.extend(f"{target}.{name}" for name in names if _is_module(f"{target}.{name}"))
    return out


def test_every_pollard_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_layer_imports_only_downward(module: str) -> None:
    own = _layer(module)
    upward = [
        f"line {line}: {reached} (layer {_layer(reached)} above layer {own})"
        for line, target, names in _imports(module)
        for reached in _pollard_targets(target, names)
        if _layer(reached) > own
    ]
    assert upward == [], f"{module} imports upward"


def _defined_private_names(tree: ast.Module) -> set[str]:
    """Private names this module's own source defines (functions, classes, attributes, slots)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries and setattr(obj, "_x", ...)
    return {name for name in names if name.startswith("_")}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_is_used_across_modules(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    own = _defined_private_names(tree)
    offences: list[str] = []
    for line, target, names in _imports(module):
        for name in names:
            if _private(name) and not _is_module(f"{target}.{name}"):
                offences.append(f"line {line}: from {target} import {name}")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue  # the object's own (or inherited) state
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "super"
        ):
            continue
        if node.attr in own:
            continue  # a private name this module defines (another instance of its class)
        offences.append(f"line {node.lineno}: {ast.unparse(node)}")
    assert offences == [], f"{module} uses private names of other modules"


BRIDGE = "pollard.adapters.pollux"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(BRIDGE)))
def test_the_bridge_uses_only_public_modules_of_pollard_and_pollux(module: str) -> None:
    # The bridge is built on what any user could build it on: pollard's and pollux's public
    # doors and documented submodules, never a private module (its own package aside).
    offences = [
        f"line {line}: {target}"
        for line, target, _names in _imports(module)
        if target.split(".")[0] in ("pollard", "pollux")
        and not target.startswith(BRIDGE)
        and any(part.startswith("_") for part in target.split("."))
    ]
    assert offences == [], f"{module} imports private modules"


# The package door's lazy helpers: `GenAIPricesCostMeter` reads `split_usage`/`token_usage` from
# `pollard.meters`, which re-exports the meter (a door and its own submodule, not two stages).
KNOWN_CYCLES = [["pollard.meters", "pollard.meters._prices"]]


def test_no_import_cycle_even_lazy_or_for_typing() -> None:
    # The stages once imported `RunState` from `_cursor` for typing while `_cursor` imported the
    # stages; the stages now take `_state.CursorState`, which sits below them.
    graph = {
        module: {
            reached
            for _line, target, names in _imports(module)
            for reached in _pollard_targets(target, names)
            if reached in MODULES
        }
        for module in MODULES
    }
    assert import_cycles(graph) == KNOWN_CYCLES


def test_an_import_cycle_is_reported() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
