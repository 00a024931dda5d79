"""The engine page's examples run against the mock provider, so they cannot rot."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "pollux" / "engine.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_first_example_runs_as_a_script() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_blocks()[0], str(DOC), "exec"), {})
    assert "ok" in out.getvalue()


async def test_the_other_examples_run_with_top_level_await() -> None:
    import pollux

    namespace: dict[str, object] = {
        "config": pollux.Config(provider="openai", model="gpt-5-nano", use_mock=True),
        "source": pollux.Source.from_text("Castor and Pollux are twins."),
        "prompts": ["Who?", "Why?"],
        "get_weather": lambda city: f"sunny in {city}",
    }
    blocks = _blocks()[1:]
    assert len(blocks) >= 4
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            code = compile(block, str(DOC), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)
            if inspect.iscoroutine(result):
                await result
    assert namespace["result"] is not None
    assert "Mock answer" in out.getvalue()
