"""The API page's examples and the value types' docstring examples run, so they cannot rot."""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "pollux" / "api-types.md"
MODULES = [
    "pollux.errors",
    "pollux.config",
    "pollux.retry",
    "pollux.source",
    "pollux.media_tokens",
    "pollux.interaction.call",
    "pollux.interaction.continuation",
    "pollux.interaction.deferred",
    "pollux.interaction.environment",
    "pollux.interaction.events",
    "pollux.interaction.input",
    "pollux.interaction.messages",
    "pollux.interaction.output",
    "pollux.interaction.requirements",
    "pollux.interaction.settings",
    "pollux.interaction.tools",
]


def test_api_page_examples_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 8
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
    printed = out.getvalue()
    assert "[REDACTED]" in printed and "sk-example" not in printed
    assert "https://arxiv.org/pdf/1706.03762v7.pdf" in printed
    assert "partial" in printed


def test_index_links_the_api_page() -> None:
    assert "pollux/api-types.md" in (DOC.parents[1] / "index.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0  # a module without examples runs nothing


def test_interaction_namespace_is_sorted_and_complete() -> None:
    import pollux.interaction as interaction

    public = {n for n in dir(interaction) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(interaction, n)).__name__ == "module"}
    assert public - modules - {"annotations"} <= set(interaction.__all__)
    assert list(interaction.__all__) == sorted(interaction.__all__)


def test_every_value_type_is_documented() -> None:
    import pollux
    import pollux.errors
    import pollux.interaction

    text = DOC.read_text(encoding="utf-8")
    names = set(pollux.errors.__all__) | {
        n for n in pollux.interaction.__all__ if n[0].isupper() and hasattr(pollux, n)
    }
    names |= {"Config", "RetryPolicy", "Source"}
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", text))
    assert missing == []
