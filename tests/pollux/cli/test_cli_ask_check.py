"""`pollux ask` and `pollux check`, configuration from flags and the environment, every exit
code, one-line usage errors with hints, and keys that never appear in any output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollux.testing import Emulator, ErrorResponse

from ._run import clean_env, pollux

SECRET = "sk-secret-do-not-print-9876543210"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _no_traceback_no_key(*outputs: str) -> None:
    text = "".join(outputs)
    assert "Traceback" not in text
    assert SECRET not in text


def test_ask_prints_the_answer_text(tmp_path: Path) -> None:
    result = pollux("ask", "Who are the twins?", "--mock", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert result.stdout == "Mock answer #009c6796 to: Who are the twins?\n"


def test_ask_json_is_the_output(tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_text("Castor and Pollux.")
    result = pollux(
        "ask", "Who?", "--source", "doc.txt", "--instructions", "Be brief.", "--json", "--mock",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    output = json.loads(result.stdout)
    assert "over 1 source(s)" in output["text"]
    assert output["usage"]["total_tokens"] > 0
    assert output["metrics"]["completion_status"] == "clean"


def test_ask_schema_prints_the_structured_value(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["name", "count"],
        "additionalProperties": False,
    }
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    result = pollux("ask", "Name them.", "--schema", "schema.json", "--mock", cwd=tmp_path)
    assert result.code == 0, result.stderr
    value = json.loads(result.stdout)
    assert set(value) == {"name", "count"} and isinstance(value["count"], int)


def test_ask_reads_the_prompt_from_stdin(tmp_path: Path) -> None:
    result = pollux("ask", "-", "--mock", cwd=tmp_path, stdin="Who are the twins?\n")
    assert result.code == 0
    assert result.stdout.endswith("to: Who are the twins?\n")


def test_configuration_from_the_environment(tmp_path: Path, emu: Emulator) -> None:
    env = clean_env(
        POLLUX_PROVIDER="local", POLLUX_MODEL="llama", POLLUX_LOCAL_BASE_URL=emu.base_url("local")
    )
    result = pollux("ask", "Hello?", cwd=tmp_path, env=env)
    assert result.code == 0, result.stderr
    assert result.stdout == "Emulated reply to: Hello?\n"
    assert emu.last_request.json["model"] == "llama"
    # Flags win over the environment.
    flagged = pollux("ask", "Hello?", "--model", "other", cwd=tmp_path, env=env)
    assert flagged.code == 0 and emu.last_request.json["model"] == "other"


def test_a_failed_call_exits_1_with_the_hint(tmp_path: Path, emu: Emulator) -> None:
    emu.script("openai", ErrorResponse(401))
    env = clean_env(OPENAI_BASE_URL=emu.base_url("openai"), OPENAI_API_KEY=SECRET)
    result = pollux(
        "ask", "Hi?", "--provider", "openai", "--model", "gpt-5-nano", cwd=tmp_path, env=env
    )
    assert result.code == 1
    first, second = result.stderr.splitlines()[:2]
    assert first.startswith("pollux: APIError")
    assert second.startswith("hint: ")
    _no_traceback_no_key(result.stdout, result.stderr)


def test_check_ready_and_not_ready(tmp_path: Path, emu: Emulator) -> None:
    ready = pollux(
        "check", "--provider", "local", "--base-url", emu.base_url("local"), cwd=tmp_path
    )
    assert ready.code == 0, ready.stderr
    assert ready.stdout.startswith("ready: local")
    down = pollux(
        "check", "--provider", "local", "--base-url", "http://127.0.0.1:9/v1", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert down.code == 1
    readiness = json.loads(down.stdout)
    assert readiness["ready"] is False and readiness["message"]
    text = pollux(
        "check", "--provider", "local", "--base-url", "http://127.0.0.1:9/v1", cwd=tmp_path
    )
    assert text.code == 1 and text.stderr.startswith("pollux: local is not ready: ")


def test_check_without_a_key_names_the_variable(tmp_path: Path) -> None:
    result = pollux("check", "--provider", "openai", "--model", "gpt-5-nano", cwd=tmp_path)
    assert result.code == 2
    assert "OPENAI_API_KEY" in result.stderr
    # The library's hint ("pass api_key=..., or use use_mock=True") is not for a shell.
    assert "hint: export OPENAI_API_KEY" in result.stderr and "--mock" in result.stderr
    assert "api_key=" not in result.stderr and "use_mock" not in result.stderr


def test_keys_never_appear(tmp_path: Path, emu: Emulator) -> None:
    env = clean_env(OPENAI_BASE_URL=emu.base_url("openai"), OPENAI_API_KEY=SECRET)
    openai = ["--provider", "openai", "--model", "gpt-5-nano"]
    for args in (
        ["ask", "Hi?", "--json", *openai],
        ["check", "--json", *openai],
        ["check", *openai],
        ["ask", "Hi?", "--provider", "openai"],  # a usage error
    ):
        result = pollux(*args, cwd=tmp_path, env=env)
        _no_traceback_no_key(result.stdout, result.stderr)


@pytest.mark.parametrize(
    ("provider", "model", "base_var", "key_var"),
    [
        ("openai", "gpt-5-nano", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
        ("anthropic", "claude-haiku-4-5", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
        ("gemini", "gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY"),
    ],
)
def test_a_key_the_server_echoes_appears_in_no_output_or_file(
    tmp_path: Path, emu: Emulator, provider: str, model: str, base_var: str, key_var: str
) -> None:
    def echo(request: object) -> ErrorResponse | None:
        if "models" in getattr(request, "route", ""):
            return None  # let check find the model, then fail the calls
        return ErrorResponse(401, message=f"Incorrect API key provided: {SECRET}.")

    emu.on(provider, echo)
    env = clean_env(**{base_var: emu.base_url(provider), key_var: SECRET})
    flags = ["--provider", provider, "--model", model]
    (tmp_path / "q.txt").write_text("one\ntwo\n")
    for args in (
        ["many", "q.txt", "--out", "answers.jsonl", *flags],
        ["ask", "Hi?", "--json", "--ledger", "runs.db", *flags],
    ):
        result = pollux(*args, cwd=tmp_path, env=env)
        assert result.code == 1, result
        assert "Incorrect API key provided" in result.stdout + result.stderr + (
            (tmp_path / "answers.jsonl").read_text() if args[0] == "many" else ""
        )
        _no_traceback_no_key(result.stdout, result.stderr)
    for written in ("answers.jsonl", "runs.db"):
        assert SECRET.encode() not in (tmp_path / written).read_bytes()


USAGE_ERRORS = [
    (["ask", "Hi?"], "no provider configured"),
    (["ask", "Hi?", "--provider", "nope", "--model", "m"], "Unknown provider"),
    (["ask", "Hi?", "--provider", "openai"], "model required"),
    (["ask", "   ", "--mock"], "the prompt is empty"),
    (["ask", "Hi?", "--mock", "--source", "missing.pdf"], "File not found"),
    (["ask", "Hi?", "--mock", "--schema", "missing.json"], "schema file not found"),
    (["ask", "Hi?", "--mock", "--schema", "bad.json"], "not JSON"),
    (["many", "missing.txt", "--mock"], "prompts file not found"),
    (["many", "empty.txt", "--mock"], "no prompts in empty.txt"),
    (["many", "bad.jsonl", "--mock"], "needs a non-empty string 'prompt'"),
    (["many", "q.txt", "--mock", "--concurrency", "0"], "--concurrency needs a whole number"),
    (["ask", "Hi?", "--mock", "--max-output-tokens", "2.5"], "needs a whole number >= 1"),
    (["many", "q.txt", "--mock", "--out", "."], "is a directory"),
    (["collect", "missing.json"], "handle file not found"),
    (["collect", "job.json", "--poll-seconds", "-1"], "--poll-seconds needs a number > 0"),
    (["nope"], "invalid choice"),
    (["ask"], "the following arguments are required: PROMPT"),
    (["defer", "q.txt", "--mock"], "--handle"),
]


@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS)
def test_usage_errors_exit_2_with_one_line_and_a_hint(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "bad.jsonl").write_text('{"prompt": ""}\n')
    (tmp_path / "q.txt").write_text("Hi?\n")
    (tmp_path / "job.json").write_text("{}")
    result = pollux(*args, cwd=tmp_path)
    assert result.code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("pollux: ") and message in lines[0]
    assert lines[1].startswith("hint: ")
    assert result.stdout == ""


def test_options_that_count_read_numbers_alike_and_hint_a_usual_value(tmp_path: Path) -> None:
    # --quota-rpm took 1e3 while --max-output-tokens refused it, and a refused output cap
    # hinted "pass --max-output-tokens 4".
    refused = pollux("ask", "Hi?", "--mock", "--max-output-tokens", "0", cwd=tmp_path)
    assert refused.code == 2
    assert refused.stderr.splitlines()[1] == "hint: pass --max-output-tokens 1024"
    asked = pollux("ask", "Hi?", "--mock", "--max-output-tokens", "1e3", cwd=tmp_path)
    assert asked.code == 0, asked.stderr


def test_help_and_version_exit_0(tmp_path: Path) -> None:
    assert pollux("--version", cwd=tmp_path).stdout.startswith("pollux ")
    for command in ("ask", "many", "defer", "status", "collect", "cancel", "check"):
        result = pollux(command, "--help", cwd=tmp_path)
        assert result.code == 0 and "usage: pollux " + command in result.stdout


def test_a_url_source_is_sent_by_reference(tmp_path: Path, emu: Emulator) -> None:
    env = clean_env(OPENAI_BASE_URL=emu.base_url("openai"), OPENAI_API_KEY="sk-test")
    result = pollux(
        "ask", "What?", "--source", "https://example.com/a.pdf",
        "--provider", "openai", "--model", "gpt-5-nano", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    content = emu.last_request.json["input"][0]["content"]
    assert {"type": "input_file", "file_url": "https://example.com/a.pdf"} in content
