"""pollux's layers, as docs/architecture.md draws them, checked from the source.

Each module belongs to one layer and imports pollux modules only from its own layer or the ones
below it; ``pollux.testing`` (the emulator) imports nothing from the library it tests, so it checks
the wire formats independently. A new top-level module must be placed in a layer here (and on the
architecture page), or this test fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "packages" / "pollux" / "src"
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

# top-level name under pollux -> layer (1 is the public door, 5 the pure value types)
LAYERS: dict[str, int] = {
    "__init__": 1,
    "_api": 1,
    "_deferred_api": 1,
    "_session": 2,
    "_engine": 3,
    "providers": 4,
    "_transport": 4,
    "errors": 5,
    "config": 5,
    "retry": 5,
    "source": 5,
    "interaction": 5,
    "_scrub": 5,
    "_version": 5,
}
APPLICATIONS = {"_cli"}  # the command line is an application over the library: it may import it all
TESTING = "testing"


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted((SRC / "pollux").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return found


def _imports(module: str, path: Path) -> list[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.append(".".join([*base, node.module] if node.module else base))
            elif node.module:
                names.append(node.module)
    return [name for name in names if name == "pollux" or name.startswith("pollux.")]


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_layer() -> None:
    tops = {_top(module) for module, _ in _modules()}
    unplaced = tops - set(LAYERS) - APPLICATIONS - {TESTING}
    assert not unplaced, f"place {sorted(unplaced)} in a layer here and in docs/architecture.md"


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_imports_go_only_downward(module: str, path: Path) -> None:
    top = _top(module)
    if top in APPLICATIONS:
        return
    for imported in _imports(module, path):
        target = _top(imported)
        if top == TESTING:
            assert target == TESTING, f"{module} imports {imported}: the emulator stands alone"
            continue
        assert target != TESTING, f"{module} imports the test toolkit {imported}"
        if imported == "pollux":
            raise AssertionError(f"{module} imports the public door; import the defining module")
        assert target not in APPLICATIONS, f"{module} imports the application {imported}"
        assert LAYERS[target] >= LAYERS[top], (
            f"{module} (layer {LAYERS[top]}) imports {imported} (layer {LAYERS[target]}): "
            "a layer imports only the ones below it (docs/architecture.md)"
        )


def test_the_architecture_page_names_the_layers() -> None:
    page = ARCHITECTURE.read_text(encoding="utf-8")
    for name in (
        "`Session`",
        "`_engine/prepared.py`",
        "`providers/_registry.py`",
        "`pollux.testing`",
    ):
        assert name in page, name
