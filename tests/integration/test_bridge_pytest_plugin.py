"""The bridge under the pytest plugin: a pollux agent's test recorded, then replayed offline."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

AGENT_TEST = """
import asyncio
import os

from pollard.adapters.pollux import governed_run_many
from pollux import Config
from pollux.providers.mock import MockProvider

real_execute = MockProvider.execute


async def guarded_execute(self, compiled):
    if os.environ.get("POLLARD_TEST_FORBID_CALLS") == "1":
        raise AssertionError("pollux called its provider during replay")
    return await real_execute(self, compiled)


MockProvider.execute = guarded_execute
CONFIG = Config(provider="openai", model="gpt-5-nano", use_mock=True)


def test_faq(pollard_run):
    answers = asyncio.run(governed_run_many(pollard_run, ["Who?", "Why?"], config=CONFIG))
    assert answers.status == "ok"
    assert all(answer.startswith("Mock answer") for answer in answers.answers)
"""

# A subprocess per session: in-process runs re-import pollard's modules between sessions while
# the plugin keeps classes from the first import, which no real session does.
QUIET = (
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:asyncio",
    "-p",
    "no:anyio",
    "-p",
    "no:cacheprovider",
)


def test_a_governed_fan_out_is_recorded_then_replayed_by_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("POLLARD_TEST_FORBID_CALLS", raising=False)
    pytester.makepyfile(test_faq=AGENT_TEST)
    pytester.runpytest_subprocess(*QUIET, "--pollard-mode=record").assert_outcomes(passed=1)
    assert (pytester.path / "tests" / "pollard_recordings" / "test_faq.db").is_file()

    monkeypatch.setenv("POLLARD_TEST_FORBID_CALLS", "1")
    replayed = pytester.runpytest_subprocess(*QUIET, "--pollard-mode=replay")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.no_fnmatch_line("*called its provider during replay*")
