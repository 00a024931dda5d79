"""Guards for the repository's promises: import boundaries, public namespaces, versions."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = {name: ROOT / "packages" / name / "src" / name for name in ("pollux", "pollard")}


def _run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return result.stdout


def test_importing_pollard_loads_no_third_party_module() -> None:
    code = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        "import pollard\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    loaded = json.loads(_run_python(code))
    stdlib = sys.stdlib_module_names
    third_party = sorted(
        name
        for name in loaded
        if name.split(".")[0] not in stdlib and name.split(".")[0] != "pollard"
    )
    assert third_party == []
    assert "pollard" in loaded


def test_importing_pollux_does_not_import_provider_sdks() -> None:
    code = (
        "import sys, json\n"
        "import pollux\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'openai', 'anthropic', 'google', 'pollard', 'rich'})))\n"
    )
    assert json.loads(_run_python(code)) == []


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _top_level_imports(package: str) -> dict[Path, set[str]]:
    return {
        path: {name.split(".")[0] for name in _imported_modules(path)}
        for path in SRC[package].rglob("*.py")
    }


def test_pollux_never_imports_pollard() -> None:
    # The one exception is the command line's --ledger module: the `pollux` command is an
    # application over both libraries (pollux-ai[cli] installs pollard), loaded only by the command.
    allowed = SRC["pollux"] / "_cli" / "ledger.py"
    offenders = [
        path
        for path, mods in _top_level_imports("pollux").items()
        if "pollard" in mods and path != allowed
    ]
    assert offenders == []


def test_pollard_imports_pollux_only_from_its_adapter() -> None:
    allowed = SRC["pollard"] / "adapters" / "pollux"  # the bridge package
    offenders = [
        path
        for path, mods in _top_level_imports("pollard").items()
        if "pollux" in mods and allowed not in path.parents
    ]
    assert offenders == []


@pytest.mark.parametrize("package", ["pollux", "pollard"])
def test_all_matches_public_namespace(package: str) -> None:
    module = importlib.import_module(package)
    public = {
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), type(sys))
    }
    exported = set(module.__all__)
    assert public - {"annotations"} <= exported, "public names missing from __all__"
    assert all(hasattr(module, name) for name in exported), "__all__ names that do not exist"
    assert list(module.__all__) == sorted(module.__all__), "__all__ is kept sorted"


@pytest.mark.parametrize(
    ("package", "distribution"), [("pollux", "pollux-ai"), ("pollard", "pollard")]
)
def test_version_is_exposed_and_matches_metadata(package: str, distribution: str) -> None:
    module = importlib.import_module(package)
    assert isinstance(module.__version__, str) and module.__version__
    assert module.__version__ == metadata.version(distribution)
