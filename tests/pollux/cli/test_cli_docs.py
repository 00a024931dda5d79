"""docs/pollux/cli.md documents every command and option, and the demo shows its commands."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from pollux._cli.main import build_parser

ROOT = Path(__file__).resolve().parents[3]
CLI_DOC = ROOT / "docs" / "pollux" / "cli.md"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_is_in_the_synopsis() -> None:
    text = CLI_DOC.read_text(encoding="utf-8")
    synopsis = text.split("```\n", 2)[1]
    for name in _commands():
        assert f"pollux {name}" in synopsis


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_and_option_is_documented(name: str) -> None:
    text = CLI_DOC.read_text(encoding="utf-8")
    assert re.search(rf"^### `{name}`", text, re.MULTILINE), f"no section for {name}"
    section = text.split(f"### `{name}`", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    command = _commands()[name]
    assert command.description, f"{name} has no --help description"
    for action in command._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                assert f"`{option}" in section, f"{name} {option} is not documented"


def test_the_governance_options_have_their_own_table() -> None:
    text = CLI_DOC.read_text(encoding="utf-8")
    section = text.split("## Governance: `--ledger`", 1)[1].split("\n## ", 1)[0]
    for option in ("--ledger", "--label", "--max-usd", "--max-tokens", "--max-calls", "--replay"):
        assert f"| `{option}" in section


def test_docs_index_and_readme_link_the_page() -> None:
    assert "](pollux/cli.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert "](docs/pollux/cli.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return re.sub(r"\\\n\s*", "", text)  # join shell line continuations


def test_the_docs_and_readme_show_the_commands_the_demo_runs() -> None:
    from examples.cli_fanout import RECORD, REPLAY

    commands = [
        "pollux " + " ".join([*RECORD, "--out", "answers.jsonl"]),
        'pollard report runs.db "pollux many questions.txt"',
        "pollux " + " ".join([*REPLAY, "--out", "replayed.jsonl"]),
    ]
    for page in (CLI_DOC, ROOT / "README.md"):
        text = _flat(page.read_text(encoding="utf-8"))
        for command in commands:
            assert command in text, (page.name, command)
