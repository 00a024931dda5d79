"""Every Python block on the site runs, and the output a page shows is the output it prints.

One runner for all site pages: each page's blocks run in order in one namespace, in a fresh working
directory, offline (the mock provider, the emulator, SQLite in the working directory). The page
markers are described in ``tests/docs/_blocks.py``. The concept pages that predate the site keep
their own tests (listed in ``DEDICATED``); this module checks that every page in the navigation is
run by one or the other, so a new page cannot be left out.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib.util
import inspect
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import PROVIDER_KEY_VARS

from ._blocks import Block, page_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Pages with their own tests (they run the page's blocks with assertions of their own).
DEDICATED: dict[str, str] = {
    "bridge.md": "tests/integration/test_bridge_docs.py",
    "pollard/runtime.md": "tests/pollard/core/test_docs.py",
    "pollard/governance.md": "tests/pollard/governance/test_docs.py",
    "pollard/observability.md": "tests/pollard/tooling/test_docs.py",
    "pollard/stores.md": "tests/pollard/core/test_postgres.py",
    "pollard/testing.md": "tests/pollard/tooling/test_docs.py",
    "pollard/cli.md": "tests/pollard/tooling/test_docs.py",
    "pollux/api-types.md": "tests/pollux/test_api_types_doc.py",
    "pollux/deferred.md": "tests/pollux/deferred/test_docs.py",
    "pollux/emulator.md": "tests/pollux/testing/test_docs.py",
    # from the cli branch (an optional page in hooks/docs.py until it is on main)
    "pollux/cli.md": "tests/pollux/cli/test_cli_docs.py",
}
# Concept pages whose blocks are fragments that need a real provider, files of the reader's own
# or a pytest fixture: their facts are checked by the tests named here, not by running the blocks.
# Shrink this list; never grow it.
FRAGMENTS: dict[str, str] = {
    "pollux/providers.md": "tests/pollux/providers",
    "architecture.md": "tests/test_pollux_layers.py",
}
# Concept pages written as fragments over names their prose introduces (`source`, `prompts`, ...):
# the names are defined here, offline, and the blocks run (top-level `await` included).
PRELUDES: dict[str, str] = {
    "pollux/engine.md": """
from pollux import Config, Source

config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
source = Source.from_text("Castor and Pollux are the twins of Greek myth.")
prompts = ["Who?", "Why?", "Where?"]


def get_weather(city="Paris"):
    return f"{city}: sunny"
""",
}
# Pages that are prose or generated reference only: they must have no Python block.
NO_CODE = {
    "reference/pollux.md",
    "reference/pollux-testing.md",
    "reference/pollard.md",
    "reference/pollard-stores.md",
    "reference/pollard-adapters-pollux.md",
    "reference/pollard-modules.md",
    "reference/pollux-modules.md",
    "reference/errors.md",
    "contributing/docs.md",
    "reliability.md",  # from the pollard branch (an optional page in hooks/docs.py)
}


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def _load_mkdocs_yml() -> dict[str, Any]:
    # mkdocs.yml may use !! tags for Python objects; this test only needs the nav.
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    loaded: dict[str, Any] = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    return loaded


NAV = _nav_pages(_load_mkdocs_yml()["nav"])
RUN_HERE = [page for page in NAV if page not in DEDICATED and page not in FRAGMENTS]


def test_every_page_in_the_navigation_is_run_by_a_test() -> None:
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert set(NAV) == on_disk, "every page is in the navigation, and every nav entry exists"
    for page, test in DEDICATED.items():
        if not (DOCS / page).exists():  # an optional page whose branch is not merged yet
            continue
        assert page in NAV
        test_text = (ROOT / test).read_text(encoding="utf-8")
        assert Path(page).name in test_text or page in test_text, f"{test} does not run {page}"
    for page, where in FRAGMENTS.items():
        assert page in NAV and (ROOT / where).exists()
    assert len(RUN_HERE) >= 20


def _run_block(block: Block, page: Path, namespace: dict[str, Any]) -> str:
    source = "\n" * (block.line - 1) + block.code  # tracebacks point at the page's own lines
    # a fragment may `await` at top level, as in an async REPL: it then runs in its own loop
    code = compile(source, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if code.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(code, namespace))
        else:
            exec(code, namespace)
    return out.getvalue()


@pytest.mark.parametrize("page", RUN_HERE)
def test_page_blocks_run_and_print_what_the_page_shows(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = DOCS / page
    blocks = page_blocks(path)
    if page in NO_CODE:
        assert blocks == [], f"{page} is listed as prose only but has Python blocks"
        return
    runnable = [b for b in blocks if b.skip is None]
    assert runnable, f"{page} has no block that runs: a runner must never pass on zero"
    for var in PROVIDER_KEY_VARS:  # the site's examples run offline, whatever the machine has
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    # Twice in the same folder: a reader runs a page again where its files (a ledger, a budget
    # spent under a run label) are still there, and must see what the page shows both times.
    missing: list[str] = []
    for attempt in ("first run", "second run in the same folder"):
        missing = _run_page(page, path, runnable, attempt)
    if missing:
        pytest.skip(
            f"{page}: {len(missing)} block(s) need {sorted(set(missing))}, not in this build"
        )


def _run_page(page: str, path: Path, runnable: list[Block], attempt: str) -> list[str]:
    """Run a page's blocks in order in a fresh namespace; return the modules that were missing."""
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    if page in PRELUDES:
        exec(PRELUDES[page], namespace)
    executed, missing = 0, []
    environment = dict(os.environ)  # a block may set variables (a base URL): none outlives the page
    try:
        for block in runnable:
            if block.requires and not _importable(block.requires):
                missing.append(block.requires)
                continue
            printed = _run_block(block, path, namespace)
            executed += 1
            if block.output is not None:
                shown = [line.rstrip() for line in block.output.strip("\n").splitlines()]
                got = [line.rstrip() for line in printed.strip("\n").splitlines()]
                assert got == shown, (
                    f"{page}:{block.line} ({attempt}): printed output differs from the page"
                )
    finally:
        os.environ.clear()
        os.environ.update(environment)
    assert executed + len(missing) == len(runnable)
    return missing


def _importable(module: str) -> bool:
    """Whether ``module`` can be imported here (a provider merged from another branch, say)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_getting_started_end_to_end_in_one_fresh_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer follows the Getting started pages in order, offline, and sees what they show."""
    pages = [page for page in NAV if page.startswith("getting-started/")]
    assert pages == [
        "getting-started/install.md",
        "getting-started/first-answer.md",
        "getting-started/real-provider.md",
        "getting-started/governed-run.md",
    ]
    for var in PROVIDER_KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    checked = 0
    for page in pages:
        namespace: dict[str, Any] = {"__name__": "__newcomer__"}  # a fresh session per page
        for block in page_blocks(DOCS / page):
            if block.skip is not None:
                continue
            printed = _run_block(block, DOCS / page, namespace)
            if block.output is not None:
                assert printed.strip("\n").splitlines() == block.output.strip("\n").splitlines()
                checked += 1
    assert checked >= 7
    assert (tmp_path / "ledger.db").is_file()  # the governed run left its ledger to inspect
    text = (DOCS / pages[-1]).read_text(encoding="utf-8")
    for command in ("pollard runs ledger.db", "pollard show ledger.db faq"):
        assert command in text
        args = command.split()[1:]
        done = subprocess.run(
            [sys.executable, "-m", "pollard.cli", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0 and "faq" in done.stdout, done.stderr
