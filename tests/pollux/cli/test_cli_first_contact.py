"""What a new user hits first, from the shell: schema failures and invalid schemas, a key for a
local server, hints in the shell's terms, the missing price package, the documented offline
deferred workflow against the standalone emulator, tracebacks with hints, and `make demo`
against a local server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pollux.testing import Emulator, Reply

from ._run import clean_env, pollux

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _local(emu: Emulator) -> list[str]:
    return ["--provider", "local", "--model", "m", "--base-url", emu.base_url("local")]


@pytest.mark.parametrize(
    ("answer", "as_json"), [("not json at all", False), ('{"n": "seven"}', True)]
)
def test_ask_schema_with_an_answer_that_does_not_validate_exits_1(
    tmp_path: Path, emu: Emulator, answer: str, as_json: bool
) -> None:
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    emu.script("local", Reply(answer))
    flags = ["--json"] if as_json else []
    result = pollux("ask", "How many?", "--schema", "s.json", *flags, *_local(emu), cwd=tmp_path)
    assert result.code == 1, result.stdout
    assert "pollux: structured_output: the answer does not match the output schema" in (
        result.stderr
    )
    assert "hint: loosen the --schema" in result.stderr
    assert "Output.text" not in result.stderr  # a library hint, not the shell's
    if as_json:  # the whole Output still comes out, with its error, for a script to read
        output = json.loads(result.stdout)
        assert output["text"] == answer and output["diagnostics"]["error"]
    else:
        assert result.stdout == ""


def test_ask_schema_with_a_valid_answer_still_exits_0(tmp_path: Path, emu: Emulator) -> None:
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    emu.script("local", Reply(structured={"n": 7}))
    result = pollux("ask", "How many?", "--schema", "s.json", *_local(emu), cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout) == {"n": 7}


@pytest.mark.parametrize("command", ["ask", "many"])
def test_an_invalid_json_schema_is_refused_before_any_call(
    tmp_path: Path, emu: Emulator, command: str
) -> None:
    (tmp_path / "s.json").write_text('{"type": "object", "properties": {"n": {"type": "objekt"}}}')
    (tmp_path / "q.txt").write_text("How many?\n")
    target = "How many?" if command == "ask" else "q.txt"
    result = pollux(command, target, "--schema", "s.json", *_local(emu), cwd=tmp_path)
    assert result.code == 2
    assert (
        "pollux: --schema s.json is not a valid JSON Schema: $.properties.n.type: 'objekt' is "
        "not a JSON Schema type" in result.stderr
    )
    assert emu.requests == []


def test_a_key_protected_local_server_takes_pollux_local_api_key(tmp_path: Path) -> None:
    with Emulator(api_key="sk-local-gateway") as emu:
        refused = pollux("ask", "Hi?", *_local(emu), cwd=tmp_path)
        assert refused.code == 1
        assert "POLLUX_LOCAL_API_KEY" in refused.stderr
        assert "Config(" not in refused.stderr and "api_key=" not in refused.stderr
        env = clean_env(POLLUX_LOCAL_API_KEY="sk-local-gateway")
        answered = pollux("ask", "Hi?", *_local(emu), cwd=tmp_path, env=env)
        assert answered.code == 0, answered.stderr
        assert answered.stdout == "Emulated reply to: Hi?\n"
        assert "sk-local-gateway" not in answered.stdout + answered.stderr


def test_cli_hints_name_flags_and_commands_not_library_calls(tmp_path: Path) -> None:
    refused = pollux("ask", "Hi?", "--mock", "--ledger", "r.db", "--max-calls", "0", cwd=tmp_path)
    assert refused.code == 1
    assert "BudgetExceeded" in refused.stderr or "refused" in refused.stderr
    assert "run.report()" not in refused.stderr and "Budget limit" not in refused.stderr
    assert "raise --max-calls" in refused.stderr  # the flag of the meter that refused
    assert "pollard report r.db 'pollux ask'" in refused.stderr  # this store and run


def test_quota_hints_name_the_quota_flags(tmp_path: Path) -> None:
    # The quota's hints named SharedQuota's keywords (on_unreachable='local' with workers=N,
    # max_tokens on the call), which a shell user cannot pass.
    from pollux._cli.errors import shell_hint
    from pollux.quota import past_deadline

    cases = [
        (("--quota-rpm", "5", "--quota-store", "redis://127.0.0.1:1"), "--quota-workers N"),
        (("--quota-tpm", "1"), "a smaller --max-output-tokens, or raise --quota-tpm"),
    ]
    for flags, named in cases:
        failed = pollux("ask", "Hi?", "--mock", *flags, cwd=tmp_path)
        assert failed.code == 1
        hint = failed.stderr.split("hint: ", 1)[1]
        assert named in hint
        assert not any(word in hint for word in ("on_unreachable", "workers=", "max_tokens"))
    waited = shell_hint(past_deadline(None).hint or "")
    assert waited.startswith("Lower --concurrency, or run fewer workers")
    assert "RetryPolicy" not in waited and "request_concurrency" not in waited


def test_max_usd_says_when_the_price_package_is_missing(tmp_path: Path) -> None:
    # pollux-ai without its cli extra's prices: genai-prices cannot be imported.
    code = (
        "import sys; sys.modules['genai_prices'] = None\n"
        "from pollux._cli.main import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "ask", "Hi?", "--mock", "--ledger", "r.db", "--max-usd", "1"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "the price package genai-prices, which is not installed" in done.stderr
    assert 'pip install "pollard[prices]"' in done.stderr
    assert "no price is known" not in done.stderr


def test_a_printed_traceback_shows_the_hint(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import pollux; pollux.Config(provider='openai', model='m')"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "pollux.errors.ConfigurationError: API key required for openai" in done.stderr
    assert "hint: Set the OPENAI_API_KEY environment variable" in done.stderr


# -- the documented offline deferred workflow ---------------------------------------------------


@pytest.fixture
def standalone(request: pytest.FixtureRequest) -> Iterator[str]:
    """``python -m pollux.testing --port 0`` as the docs start it (extra flags by parametrize)."""
    extra = getattr(request, "param", [])
    process = subprocess.Popen(
        [sys.executable, "-m", "pollux.testing", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("listening on "), first
        yield first.removeprefix("listening on ").strip()
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _defer(tmp_path: Path, origin: str) -> dict[str, str]:
    env = clean_env(
        OPENAI_BASE_URL=f"{origin}/openai/v1",
        OPENAI_API_KEY="sk-anything",
        POLLUX_PROVIDER="openai",
        POLLUX_MODEL="gpt-5-nano",
    )
    (tmp_path / "q.txt").write_text("Who are the twins?\nWhich myth?\n")
    submitted = pollux("defer", "q.txt", "--handle", "job.json", cwd=tmp_path, env=env)
    assert submitted.code == 0, submitted.stderr
    return env


def test_the_standalone_emulator_completes_batches_by_itself(
    tmp_path: Path, standalone: str
) -> None:
    env = _defer(tmp_path, standalone)
    collected = pollux(
        "collect", "job.json", "--wait", "--poll-seconds", "0.1", "--timeout", "120",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert collected.code == 0, collected.stderr
    records = [json.loads(line) for line in collected.stdout.splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok"]


@pytest.mark.parametrize("standalone", [["--clock-rate", "0"]], indirect=True)
def test_collect_wait_gives_up_at_its_timeout(tmp_path: Path, standalone: str) -> None:
    env = _defer(tmp_path, standalone)  # a stopped clock: the job never finishes
    waited = pollux(
        "collect", "job.json", "--wait", "--poll-seconds", "0.05", "--timeout", "0.3",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert waited.code == 1
    assert "is not finished after --timeout 0.3 s (status=queued" in waited.stderr
    assert "pollux collect job.json --wait" in waited.stderr
    no_wait = pollux("collect", "job.json", "--timeout", "1", cwd=tmp_path, env=env)
    assert no_wait.code == 2 and "--timeout needs --wait" in no_wait.stderr


# -- make demo against a local server -----------------------------------------------------------


def test_demo_with_only_the_local_base_url_says_which_variable_to_set(emu: Emulator) -> None:
    def demo(**extra: str) -> subprocess.CompletedProcess[str]:
        env = clean_env(POLLUX_LOCAL_BASE_URL=emu.base_url("local"), **extra)
        return subprocess.run(
            [sys.executable, str(ROOT / "examples" / "quickstart.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    unnamed = demo()  # the emulator's local wire, like vLLM, needs a model name
    assert unnamed.returncode == 1
    assert "set POLLUX_MODEL=NAME if the server needs a model name" in unnamed.stdout
    assert "This server needs a model name" in unnamed.stdout
    assert "POLLUX_MODEL" in unnamed.stdout.split("hint:", 1)[1]
    emu.clear_requests()
    named = demo(POLLUX_MODEL="emulator-model")
    assert named.returncode == 0, named.stdout + named.stderr
    assert "Emulated reply to:" in named.stdout
    assert {r.json["model"] for r in emu.requests_for("local.chat")} == {"emulator-model"}


# -- replay and check ---------------------------------------------------------------------------


def test_a_replay_is_byte_identical_to_the_recording(tmp_path: Path) -> None:
    # Properties out of alphabetical order: a store keeps results with sorted keys.
    schema = {
        "type": "object",
        "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}},
        "required": ["zeta", "alpha"],
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "q.txt").write_text("One?\nTwo?\n")
    common = ["q.txt", "--schema", "s.json", "--mock", "--ledger", "r.db"]
    recorded = pollux("many", *common, "--out", "a.jsonl", cwd=tmp_path)
    replayed = pollux("many", *common, "--replay", "--out", "b.jsonl", cwd=tmp_path)
    assert recorded.code == replayed.code == 0, replayed.stderr
    first = (tmp_path / "a.jsonl").read_bytes()
    assert b'"structured": {"zeta": "mock", "alpha": 0}' in first
    # Lines are written as prompts finish, so their order may differ; each line may not.
    replayed_lines = (tmp_path / "b.jsonl").read_bytes().splitlines()
    assert sorted(replayed_lines) == sorted(first.splitlines())
    asked = pollux("ask", "One?", "--schema", "s.json", "--mock", "--ledger", "r.db", cwd=tmp_path)
    again = pollux(
        "ask", "One?", "--schema", "s.json", "--mock", "--ledger", "r.db", "--replay", cwd=tmp_path
    )
    assert asked.code == again.code == 0
    assert again.stdout == asked.stdout and asked.stdout.index("zeta") < asked.stdout.index("alpha")


def test_check_answers_an_unknown_model_with_the_real_apis_404(tmp_path: Path) -> None:
    with Emulator(models=["gpt-5-mini"]) as emu:
        env = clean_env(OPENAI_BASE_URL=emu.base_url("openai"), OPENAI_API_KEY="sk-x")
        unknown = pollux(
            "check", "--provider", "openai", "--model", "gpt-9", "--json", cwd=tmp_path, env=env
        )
        assert unknown.code == 1
        readiness = json.loads(unknown.stdout)
        assert readiness["status_code"] == 404 and "gpt-9" in readiness["message"]
        known = pollux(
            "check", "--provider", "openai", "--model", "gpt-5-mini", cwd=tmp_path, env=env
        )
        assert known.code == 0, known.stderr
    with Emulator() as emu:  # no catalog: every model answers, so check agrees with ask
        env = clean_env(OPENAI_BASE_URL=emu.base_url("openai"), OPENAI_API_KEY="sk-x")
        args = ["--provider", "openai", "--model", "gpt-5-nano"]
        assert pollux("check", *args, cwd=tmp_path, env=env).code == 0
        assert pollux("ask", "Hi?", *args, cwd=tmp_path, env=env).code == 0
