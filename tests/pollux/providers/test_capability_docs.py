"""The capability tables in docs/pollux/providers.md agree with the providers' ``Capabilities``.

Each provider section has a ``### Capabilities`` table written for readers (one row per
capability, prose in the support cell). The engine enforces the ``Capabilities`` object, so a
row that says "yes" for a flag the engine refuses (or "no" for one it accepts) is a lie. This
test reads every row that names a flag and checks its support cell against the flag.
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import pytest

from pollux.providers.anthropic import CAPABILITIES as ANTHROPIC
from pollux.providers.azure_openai import CAPABILITIES as AZURE_OPENAI
from pollux.providers.base import Capabilities
from pollux.providers.gemini import CAPABILITIES as GEMINI
from pollux.providers.openai.provider import CAPABILITIES as OPENAI
from pollux.providers.vertex import CAPABILITIES as VERTEX

DOC = Path(__file__).parents[3] / "docs" / "pollux" / "providers.md"

SECTIONS: dict[str, Capabilities] = {
    "OpenAI provider": OPENAI,
    "Azure OpenAI provider": AZURE_OPENAI,
    "Anthropic provider": ANTHROPIC,
    "Gemini provider": GEMINI,
    "Vertex AI provider": VERTEX,
}

#: Flag -> a pattern the row's first cell matches. Every flag here must have a row in every
#: provider's table, except the OPTIONAL ones (checked when the row exists).
ROWS: dict[str, str] = {
    "streaming": r"`stream`",
    "structured_outputs": r"^Structured output",
    "reasoning": r"^`reasoning_effort`",
    "reasoning_budget_tokens": r"^`reasoning_budget_tokens`",
    "tools": r"^Function tools",
    "tool_result_errors": r"^`ToolResult\.is_error`",
    "conversation": r"^Continuation",
    "uploads": r"^Local files",
    "persistent_cache": r"^Persistent cache",
    "deferred_delivery": r"^Deferred delivery",
    "temperature": r"`temperature`",
    "top_p": r"`top_p`",
    "max_tokens": r"`max_tokens`",
    "seed": r"`seed`",
    "prompt_cache_ttl": r"^Prompt caching",
    "implicit_caching": r"^Automatic cache breakpoints",
}
OPTIONAL = {"prompt_cache_ttl"}
#: Declared but not something a reader chooses (the engine does not branch on it).
UNDOCUMENTED: set[str] = set()


def capability_rows(section: str) -> list[tuple[str, str]]:
    """The (capability, support) rows of one provider section's ``### Capabilities`` table."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else len(text)]
    table = body[body.index("### Capabilities") :]
    table = table[: table.find("\n### ") if "\n### " in table else len(table)]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and line.startswith("|") and cells[0] not in ("Capability", "---"):
            rows.append((cells[0], cells[1]))
    return rows


def supported(cell: str) -> bool:
    return not re.match(r"no\b", cell, re.IGNORECASE)


def test_every_flag_is_mapped_to_a_row() -> None:
    flags = {f.name for f in fields(Capabilities)}
    assert flags == set(ROWS) | UNDOCUMENTED, "map the new capability to its docs row"


def mismatches(section: str, capabilities: Capabilities) -> list[str]:
    """Every way the section's table contradicts ``capabilities``."""
    rows = capability_rows(section)
    if not rows:
        return [f"no capability table under '## {section}'"]
    wrong = []
    for flag, pattern in ROWS.items():
        matching = [(name, cell) for name, cell in rows if re.search(pattern, name)]
        if not matching:
            if flag not in OPTIONAL:
                wrong.append(f"{flag}: no row matches {pattern!r}")
            continue
        declared = getattr(capabilities, flag)
        for name, cell in matching:
            if supported(cell) != declared:
                wrong.append(f"{flag}={declared} but the row {name!r} says {cell[:60]!r}")
    return wrong


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_the_table_says_what_the_capabilities_declare(section: str) -> None:
    wrong = mismatches(section, SECTIONS[section])
    assert not wrong, "\n".join(wrong)


def test_a_contradicting_table_is_caught() -> None:
    (wrong,) = mismatches("Gemini provider", replace(GEMINI, seed=False))
    assert wrong.startswith("seed=False but the row '`temperature`, `top_p`, `max_tokens`, `seed`'")
    assert mismatches("Anthropic provider", replace(ANTHROPIC, persistent_cache=True))


def test_the_config_reference_lists_every_overridable_capability() -> None:
    from pollux.config import KNOWN_CAPABILITIES

    page = (DOC.parent / "api-types.md").read_text(encoding="utf-8")
    (row,) = [line for line in page.splitlines() if line.startswith("| `capabilities` |")]
    listed = row.split("):", 1)[1].split("; values", 1)[0]
    assert set(re.findall(r"`(\w+)`", listed)) == KNOWN_CAPABILITIES
