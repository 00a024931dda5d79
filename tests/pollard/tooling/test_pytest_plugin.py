"""The pytest plugin: the pollard_run fixture, modes, recordings directory, replay misses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

AGENT_TEST = """
import os

def call_model(payload):
    if os.environ.get("POLLARD_TEST_FORBID_CALLS") == "1":
        raise AssertionError("the model function ran during replay")
    return {"text": "Invoice ready", "usage": {"input_tokens": 3, "output_tokens": 2}}

def test_agent(pollard_run):
    node = pollard_run.model_call({"model": "mock-1", "input": os.environ.get("PROMPT", "a")},
                                  fn=call_model)
    assert "invoice" in node.result["text"].lower()
    assert pollard_run.label.endswith("test_agent.py::test_agent")
"""


# Unrelated plugins make every inner session slower; the pollard plugin is all these tests need.
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


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*QUIET, *args)


@pytest.fixture
def agent(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("POLLARD_TEST_FORBID_CALLS", raising=False)
    monkeypatch.delenv("PROMPT", raising=False)
    pytester.makepyfile(test_agent=AGENT_TEST)
    return pytester


def test_record_then_replay_without_calling_the_function(
    agent: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = run(agent, "--pollard-mode=record")
    recorded.assert_outcomes(passed=1)
    database = agent.path / "tests" / "pollard_recordings" / "test_agent.db"
    assert database.is_file()

    monkeypatch.setenv("POLLARD_TEST_FORBID_CALLS", "1")
    replayed = run(agent, "--pollard-mode=replay")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["pollard: mode=replay"])


def test_a_replay_miss_fails_with_the_missing_recording_message(
    agent: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(agent, "--pollard-mode=record").assert_outcomes(passed=1)
    monkeypatch.setenv("PROMPT", "a different prompt")
    result = run(agent, "--pollard-mode=replay")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*MissingRecording: *", "*record it with --pollard-mode=record or --pollard-mode=hybrid*"]
    )
    result.stdout.no_fnmatch_line("*the model function ran during replay*")


def test_replay_without_any_recording_fails_and_creates_nothing(agent: pytest.Pytester) -> None:
    result = run(agent, "--pollard-mode=replay")
    result.assert_outcomes(failed=1)  # the test fails; the fixture does not error
    result.stdout.fnmatch_lines(
        ["*MissingRecording: *not recorded*", "*record it with --pollard-mode=record*"]
    )
    assert not (agent.path / "tests" / "pollard_recordings").exists()


def test_a_test_missing_from_an_existing_recording_fails_not_errors(
    agent: pytest.Pytester,
) -> None:
    run(agent, "--pollard-mode=record").assert_outcomes(passed=1)
    agent.makepyfile(
        test_agent=AGENT_TEST + "\n\ndef test_new(pollard_run):\n    pollard_run.note({'n': 1})\n"
    )
    result = run(agent, "--pollard-mode=replay")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*_ test_new _*", "MissingRecording: *test_new*not recorded*"])


def test_ci_defaults_to_replay_and_local_runs_to_hybrid(
    agent: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    run(agent).assert_outcomes(failed=1)  # nothing recorded yet: replay misses
    monkeypatch.setenv("CI", "")
    run(agent).assert_outcomes(passed=1)  # hybrid records
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("POLLARD_TEST_FORBID_CALLS", "1")
    run(agent).assert_outcomes(passed=1)  # replay serves the recording
    monkeypatch.setenv("CI", "false")
    run(agent).assert_outcomes(passed=1)  # hybrid serves the recording too, without a call


def test_ini_options_choose_the_directory_and_the_mode(agent: pytest.Pytester) -> None:
    agent.makeini("[pytest]\npollard_recordings_dir = recordings/here\npollard_mode = record\n")
    result = run(agent)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["pollard: mode=record"])
    assert (agent.path / "recordings" / "here" / "test_agent.db").is_file()


def test_an_unknown_ini_mode_is_a_usage_error(agent: pytest.Pytester) -> None:
    agent.makeini("[pytest]\npollard_mode = sometimes\n")
    result = run(agent)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*pollard_mode must be one of record, hybrid, replay*"])


def test_the_option_is_validated_by_argparse(agent: pytest.Pytester) -> None:
    result = run(agent, "--pollard-mode=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_the_plugin_is_cheap_to_import() -> None:
    # It is loaded by every pytest session in an environment with pollard installed.
    code = (
        "import sys, json, pytest\n"
        "before = set(sys.modules)\n"
        "import pollard.pytest_plugin\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert "sqlite3" not in loaded
    assert {name for name in loaded if name.startswith("pollard")} <= {
        "pollard",
        "pollard._version",
        "pollard.errors",
        "pollard.pytest_plugin",
    }
