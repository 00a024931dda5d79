"""The tooling docs: every CLI command and option is documented, and the examples run."""

from __future__ import annotations

import argparse
import doctest
import importlib
import re
from pathlib import Path

import pytest

from pollard.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
CLI_DOC = DOCS / "pollard" / "cli.md"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_and_option_is_documented(name: str) -> None:
    text = CLI_DOC.read_text(encoding="utf-8")
    assert re.search(rf"^### `{name}\b", text, re.MULTILINE), f"no section for {name}"
    section = text.split(f"### `{name}", 1)[1].split("\n### ", 1)[0]
    command = _commands()[name]
    assert command.description, f"{name} has no --help description"
    for action in command._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                assert option in section, f"{name} {option} is not documented"


def test_the_docs_index_links_the_tooling_pages() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in ("pollard/cli.md", "pollard/observability.md", "pollard/testing.md"):
        assert f"]({page})" in index
        assert (DOCS / page).is_file()


@pytest.mark.parametrize(("page", "expected"), [("observability.md", 2)])
def test_python_examples_in_the_docs_run(page: str, expected: int) -> None:
    text = (DOCS / "pollard" / page).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= expected  # a changed fence or regex must not run nothing
    for block in blocks:
        exec(compile(block, f"{page}", "exec"), {"__name__": "docs_example"})


@pytest.mark.parametrize(
    "module",
    [
        "pollard.html",
        "pollard._edge._merge",
        "pollard._edge._gc",
        "pollard._edge._transfer",
        "pollard.otel",
    ],
)
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
