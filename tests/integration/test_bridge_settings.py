"""The bridge takes pollux's generation keywords from GenerationSettings: the same signatures as
when each was written out, Python's TypeError for an unknown keyword, every keyword forwarded."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import pollard.adapters.pollux as bridge
from pollard import AsyncRun, AsyncRuntime
from pollard.adapters.pollux import (
    governed_defer,
    governed_interact,
    governed_run,
    governed_run_many,
    governed_stream,
)
from pollux import Config, ConfigurationError, Environment, Input
from pollux.interaction import describe_call
from pollux.interaction.settings import DEFERRED_SETTING_NAMES, SETTING_NAMES
from tests._signature_parts import OPTIONS as _OPTIONS
from tests._signature_parts import PROMPTS as _PROMPTS
from tests._signature_parts import SAMPLING as _SAMPLING
from tests._signature_parts import TOOL_CHOICE as _TOOL_CHOICE
from tests._signature_parts import TOOLS as _TOOLS
from tests._signature_parts import TURN as _TURN

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)
ENV = Environment(instructions="Be brief.")

_RUN = "run: 'AsyncRun | Run'"

# The bridge's signatures as they were written out before the keywords were declared once; a
# dropped, renamed or moved parameter fails here.
SEED_SIGNATURES: dict[str, str] = {
    "governed_run": (
        f"({_RUN}, prompt: 'str | None' = None, *, source: 'Source | None' = None, sources: "
        "'Sequence[Source]' = (), config: 'Config', environment: 'Environment | None' = None, "
        f"instructions: 'str | None' = None, {_SAMPLING}, {_TOOL_CHOICE}, {_TOOLS}, {_OPTIONS}, "
        "attempt: 'int' = 0) -> 'Output'"
    ),
    "governed_interact": (
        f"({_RUN}, {_TURN}, *, config: 'Config', {_SAMPLING}, {_TOOL_CHOICE}, {_OPTIONS}, "
        "attempt: 'int' = 0) -> 'Output'"
    ),
    "governed_stream": (
        f"({_RUN}, {_TURN}, *, config: 'Config', {_SAMPLING}, {_TOOL_CHOICE}, {_OPTIONS}, "
        "attempt: 'int' = 0) -> 'AsyncGenerator[Event, None]'"
    ),
    "governed_run_many": (
        f"({_RUN}, {_PROMPTS}, *, sources: 'Sequence[Source]' = (), config: 'Config', "
        "environment: 'Environment | None' = None, instructions: 'str | None' = None, "
        f"{_SAMPLING}, {_TOOL_CHOICE}, {_TOOLS}, {_OPTIONS}) -> 'OutputCollection'"
    ),
    "governed_defer": (
        f"({_RUN}, {_PROMPTS}, *, sources: 'Sequence[Source]' = (), config: 'Config', "
        f"instructions: 'str | None' = None, {_SAMPLING}, {_OPTIONS}, attempt: 'int' = 0) "
        "-> 'GovernedJob'"
    ),
}

BRIDGE: dict[str, Callable[..., Any]] = {
    "governed_run": governed_run,
    "governed_interact": governed_interact,
    "governed_stream": governed_stream,
    "governed_run_many": governed_run_many,
    "governed_defer": governed_defer,
}


def _keys(name: str) -> tuple[str, ...]:
    return DEFERRED_SETTING_NAMES if name == "governed_defer" else SETTING_NAMES


def _call(name: str, run: AsyncRun, **kwargs: Any) -> Any:
    doors: dict[str, Callable[[], Any]] = {
        "governed_run": lambda: governed_run(run, "Q?", config=MOCK, **kwargs),
        "governed_interact": lambda: governed_interact(
            run, ENV, Input("Q?"), config=MOCK, **kwargs
        ),
        "governed_stream": lambda: governed_stream(run, ENV, Input("Q?"), config=MOCK, **kwargs),
        "governed_run_many": lambda: governed_run_many(run, ["Q?"], config=MOCK, **kwargs),
        "governed_defer": lambda: governed_defer(run, ["Q?"], config=MOCK, **kwargs),
    }
    return doors[name]()


async def _drive(result: Awaitable[Any] | AsyncIterator[Any]) -> None:
    if inspect.isawaitable(result):
        await result
    else:
        async for _ in result:
            pass


def _python_says(keyword: str) -> str:
    def probe(*, temperature: object = None) -> None:
        del temperature

    with pytest.raises(TypeError) as caught:
        probe(**{keyword: 1})
    return str(caught.value).replace(probe.__qualname__, "{}", 1)


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_each_bridge_function_keeps_its_signature(name: str) -> None:
    signature = inspect.signature(BRIDGE[name])
    assert str(signature) == SEED_SIGNATURES[name]
    settings = [p for p in signature.parameters.values() if p.name in _keys(name)]
    assert [p.name for p in settings] == list(_keys(name))
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None for p in settings)
    if name != "governed_stream":
        assert inspect.iscoroutinefunction(BRIDGE[name])


@pytest.mark.parametrize("name", sorted(BRIDGE))
@pytest.mark.parametrize("keyword", ["temprature", "colour"])
async def test_an_unknown_keyword_fails_as_python_does(name: str, keyword: str) -> None:
    async with AsyncRuntime() as rt:
        run = rt.run("settings")
        with pytest.raises(TypeError) as caught:
            await _drive(_call(name, run, **{keyword: 0.2}))
        assert run.report()["spent"].get("steps", 0) == 0  # refused before anything is recorded
    python = _python_says(keyword).format(name)
    message = str(caught.value)
    if keyword == "colour":
        assert message == python
    else:
        assert message in (python, f"{python}. Did you mean 'temperature'?")
        assert message.endswith("Did you mean 'temperature'?")


async def test_governed_defer_takes_no_tool_choice() -> None:
    async with AsyncRuntime() as rt:
        with pytest.raises(TypeError) as caught:
            await governed_defer(rt.run("x"), ["Q?"], config=MOCK, max_tokens=8, tool_choice="auto")
    assert str(caught.value) == _python_says("tool_choice").format("governed_defer")


INVALID: dict[str, object] = {
    "output": 5,
    "temperature": -1,
    "top_p": 2,
    "max_tokens": 0,
    "seed": "x",
    "reasoning_effort": 5,
    "reasoning_budget_tokens": -1,
    "tool_choice": "sometimes",
    "provider_options": {"nope": {}},
}


@pytest.mark.parametrize("name", sorted(BRIDGE))
async def test_every_keyword_reaches_validation(name: str) -> None:
    async with AsyncRuntime() as rt:
        run = rt.run("settings")
        for keyword in _keys(name):
            kwargs: dict[str, Any] = {keyword: INVALID[keyword]}
            if name == "governed_defer" and keyword != "max_tokens":
                kwargs["max_tokens"] = 8  # governed_defer needs it before anything else
            with pytest.raises(ConfigurationError) as caught:
                await _drive(_call(name, run, **kwargs))
            field = "output_schema" if keyword == "output" else keyword
            assert field in str(caught.value), keyword
        assert run.report()["spent"].get("steps", 0) == 0  # refused before anything is recorded


CALLERS = """\
from __future__ import annotations

import pollard.adapters.pollux as bridge
from pollard import AsyncRun, AsyncRuntime
from pollard.adapters.pollux import (
    governed_defer, governed_interact, governed_run, governed_run_many, governed_stream,
)
from pollux import Config, Environment, Input


async def callers(config: Config, env: Environment) -> None:
    async with AsyncRuntime() as rt:
        run = rt.run("x")
        await governed_run(run, "Q?", config=config, temperature=0.2, tools=[], attempt=1)
        await governed_interact(run, env, Input("Q?"), config=config, tool_choice="auto")
        governed_stream(run, env, Input("Q?"), config=config, seed=1, attempt=2)
        await governed_run_many(run, ["Q?"], config=config, provider_options={"openai": {}})
        await governed_defer(run, ["Q?"], config=config, max_tokens=8, attempt=1)
        await governed_run(run, "Q?", config=config, temprature=0.2)  # E
        await governed_interact(run, env, Input("Q?"), config=config, max_token=8)  # E
        governed_stream(run, env, Input("Q?"), config=config, sead=1)  # E
        await governed_run_many(run, ["Q?"], config=config, top_k=1)  # E
        await governed_defer(run, ["Q?"], config=config, max_tokens=8, tool_choice="auto")  # E
        await governed_run(run, "Q?", config=config, max_tokens="many")  # E
"""


@pytest.mark.slow
def test_mypy_sees_exactly_the_seed_keywords(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    source = tmp_path / "callers.py"
    source.write_text(CALLERS, encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    # In a subprocess: mypy changes interpreter state (the recursion limit) for the tests after.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(root / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
    )
    out, err = done.stdout, done.stderr
    flagged = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    expected = {n for n, line in enumerate(CALLERS.splitlines(), 1) if line.endswith("# E")}
    assert flagged == expected, out + err


# A valid, non-default value of every key: a new key must get one here, and then it must change
# the request identity (or a recording would answer a request that sets it differently).
SAMPLES: dict[str, object] = {
    "output": {"type": "object", "properties": {"x": {"type": "string"}}},
    "temperature": 0.5,
    "top_p": 0.5,
    "max_tokens": 5,
    "seed": 1,
    "reasoning_effort": "low",
    "reasoning_budget_tokens": 64,
    "tool_choice": "auto",
    "provider_options": {"openai": {"store": False}},
}


@pytest.mark.parametrize("keyword", SETTING_NAMES)
def test_every_keyword_is_part_of_the_replay_identity(keyword: str) -> None:
    assert set(SAMPLES) == set(SETTING_NAMES)

    def identity(settings: dict[str, object]) -> dict[str, Any]:
        call = describe_call("Q?", settings=settings)
        payload: dict[str, Any] = bridge._payload(
            "run", MOCK, call.environment, call.inputs[0], call.requirements
        )
        return payload

    assert identity({keyword: SAMPLES[keyword]}) != identity({})
