"""pollux's layering, read from the source: each layer imports only the layers below it.

Beside ``test_pollard_layers.py`` and the cross-package guards of ``test_foundation.py``. The
layers of ARCHITECTURE.md, bottom to top (a module may import its own layer and the ones below
it, including lazily inside functions and for typing):

0. leaves: ``pollux.errors``, ``pollux._scrub``, ``pollux._version``.
1. pure value types: ``pollux.config``, ``pollux.quota``, ``pollux.retry``, ``pollux.source``,
   ``pollux.interaction`` (no I/O), and ``pollux.media_tokens`` (estimates from an image's
   size; it reads a local source's header, as ``pollux.source`` reads a file to hash it).
2. providers: ``pollux.providers``, the Session-owned transport ``pollux.transport`` and its
   HTTP client ``pollux._transport``, the call spans of ``pollux._telemetry`` and the prices of
   ``pollux._pricing``.
3. the engine: ``pollux._engine`` (plan, schedule, retry, assemble, the call seam's runner).
4. ``pollux._session``: owns a provider's clients for its lifetime.
5. the module-level front doors: ``pollux._api``, ``pollux._deferred_api``.
6. the public door ``pollux`` (``__init__``).
7. the edge, built on the public door: ``pollux._cli``, and ``pollux.testing`` (which imports
   nothing of the library it tests, so it checks the wire formats independently).

The call description (``pollux.interaction.call``) and the call seam's types
(``pollux.interaction.intercept``) are value types, so the engine, the Session, the front doors
and the pollard bridge all build on one definition.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests._import_cycles import import_cycles

PKG = Path(__file__).resolve().parents[1] / "packages" / "pollux" / "src" / "pollux"

LAYERS: list[tuple[str, ...]] = [
    ("pollux.errors", "pollux._scrub", "pollux._version"),
    (
        "pollux.config",
        "pollux.quota",
        "pollux.retry",
        "pollux.source",
        "pollux.interaction",
        "pollux.media_tokens",
    ),
    (
        "pollux.providers",
        "pollux.transport",
        "pollux._transport",
        "pollux._telemetry",
        "pollux._pricing",
    ),
    ("pollux._engine",),
    ("pollux._session",),
    ("pollux._api", "pollux._deferred_api"),
    ("pollux",),
    ("pollux._cli", "pollux.testing"),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PKG.rglob("*.py"))}


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


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _reached(module: str) -> list[tuple[int, str]]:
    """``(line, pollux module)`` for every pollux module an import in ``module`` reaches."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = [(_resolve(module, node), [a.name for a in node.names])]
        else:
            continue
        for target, names in targets:
            if target != "pollux" and not target.startswith("pollux."):
                continue
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            # ``from pollux.x import submodule`` reaches the submodule, not x's other names.
            found.extend((node.lineno, sub) for sub in subs or [target])
    return found


def test_every_pollux_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_layer_imports_only_downward(module: str) -> None:
    own = _layer(module)
    upward = [
        f"line {line}: {reached} (layer {_layer(reached)} above layer {own})"
        for line, reached in _reached(module)
        if _layer(reached) > own
    ]
    assert upward == [], f"{module} imports upward"


def test_an_upward_import_is_reported() -> None:
    # The value types may not reach the engine; the seam's runner reaches the seam's types.
    assert _layer("pollux.interaction.call") < _layer("pollux._engine.execute")
    assert any(
        reached == "pollux.interaction.intercept"
        for _, reached in _reached("pollux._engine.execute")
    )


def test_the_emulator_imports_nothing_of_the_library_it_tests() -> None:
    # The emulator speaks the providers' wire formats from their specs, not from pollux's
    # compile code, so a bug in pollux cannot hide behind the same bug in its test double.
    leaks = [
        f"{module} line {line}: {reached}"
        for module in MODULES
        if module == "pollux.testing" or module.startswith("pollux.testing.")
        for line, reached in _reached(module)
        if not reached.startswith("pollux.testing")
    ]
    assert leaks == []


# Lazy-import cycles that arrived with the quota work, not broken yet (each is one function-level
# import): the CLI's ``inputs`` -> ``options`` -> ``ledger`` -> ``options``/``inputs`` for
# ``--quota``, and the emulator's ``_core`` -> ``_quota`` -> ``wires._gemini_common`` -> ``_core``
# for rate-limit errors. A new cycle fails the test; breaking one of these fails it too, so the
# list shrinks with the fix.
KNOWN_CYCLES = [
    ["pollux._cli.inputs", "pollux._cli.ledger", "pollux._cli.options"],
    [
        "pollux.testing._emulator._core",
        "pollux.testing._emulator._quota",
        "pollux.testing._emulator.wires._gemini_common",
    ],
]


def test_no_import_cycle_even_lazy_or_for_typing() -> None:
    # The gemini provider and its caching module imported each other (caching lazily, for the
    # client builder); the builder now lives in `gemini.client`, below both.
    graph = {module: {reached for _line, reached in _reached(module)} for module in MODULES}
    assert import_cycles(graph) == KNOWN_CYCLES
