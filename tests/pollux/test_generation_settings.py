"""The generation keywords are declared once (GenerationSettings) and every front door keeps the
seed's signature: the same keywords, keyword-only, default None, the same errors."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import Unpack

import pollux
from pollux import Config, ConfigurationError, Environment, Input, OutputRequirements, Session
from pollux.interaction import (
    DeferredSettings,
    GenerationSettings,
    describe_call,
    generation_keywords,
    requirements_from,
)
from pollux.interaction.settings import DEFERRED_SETTING_NAMES, SETTING_NAMES
from tests._signature_parts import OPTIONS as _OPTIONS
from tests._signature_parts import PROMPTS as _PROMPTS
from tests._signature_parts import SAMPLING as _SAMPLING
from tests._signature_parts import TOOL_CHOICE as _TOOL_CHOICE
from tests._signature_parts import TOOLS as _TOOLS
from tests._signature_parts import TURN as _TURN

MOCK = Config(provider="openai", model="gpt-5-nano", use_mock=True)
ENV = Environment(instructions="Be brief.")


# The signatures as they were written out before the keywords were declared once (the seed's,
# character for character); a dropped, renamed or retyped parameter fails here.
SEED_SIGNATURES: dict[str, str] = {
    "run": (
        "(prompt: 'str | None' = None, *, source: 'Source | None' = None, sources: "
        "'Sequence[Source]' = (), config: 'Config', environment: 'Environment | None' = None, "
        f"instructions: 'str | None' = None, {_SAMPLING}, {_TOOL_CHOICE}, {_TOOLS}, {_OPTIONS}) "
        "-> 'Output'"
    ),
    "run_many": (
        f"({_PROMPTS}, *, sources: 'Sequence[Source]' = (), config: 'Config', environment: "
        f"'Environment | None' = None, instructions: 'str | None' = None, {_SAMPLING}, "
        f"{_TOOL_CHOICE}, {_TOOLS}, {_OPTIONS}) -> 'OutputCollection'"
    ),
    "interact": (
        f"({_TURN}, *, config: 'Config', {_SAMPLING}, {_TOOL_CHOICE}, {_OPTIONS}) -> 'Output'"
    ),
    "stream": (
        f"({_TURN}, *, config: 'Config', {_SAMPLING}, {_TOOL_CHOICE}, {_OPTIONS}) "
        "-> 'AsyncGenerator[Event, None]'"
    ),
    "defer": (
        f"({_PROMPTS}, *, sources: 'Sequence[Source]' = (), config: 'Config', instructions: "
        f"'str | None' = None, {_SAMPLING}, {_OPTIONS}) -> 'DeferredHandle'"
    ),
    # The Session's methods take the module functions' arguments except config.
    "Session.run_many": (
        f"(self, {_PROMPTS}, *, sources: 'Sequence[Source]' = (), environment: "
        f"'Environment | None' = None, instructions: 'str | None' = None, {_SAMPLING}, "
        f"{_TOOL_CHOICE}, {_TOOLS}, {_OPTIONS}) -> 'OutputCollection'"
    ),
    "Session.interact": f"(self, {_TURN}, *, {_SAMPLING}, {_TOOL_CHOICE}, {_OPTIONS}) -> 'Output'",
    "Session.stream": (
        f"(self, {_TURN}, *, {_SAMPLING}, {_TOOL_CHOICE}, {_OPTIONS}) "
        "-> 'AsyncGenerator[Event, None]'"
    ),
    "Session.defer": (
        f"(self, {_PROMPTS}, *, sources: 'Sequence[Source]' = (), instructions: "
        f"'str | None' = None, {_SAMPLING}, {_OPTIONS}) -> 'DeferredHandle'"
    ),
}

FRONT_DOORS: dict[str, Callable[..., Any]] = {
    "run": pollux.run,
    "run_many": pollux.run_many,
    "interact": pollux.interact,
    "stream": pollux.stream,
    "defer": pollux.defer,
    "Session.run_many": Session.run_many,
    "Session.interact": Session.interact,
    "Session.stream": Session.stream,
    "Session.defer": Session.defer,
}


def _keys(name: str) -> tuple[str, ...]:
    return DEFERRED_SETTING_NAMES if name.endswith("defer") else SETTING_NAMES


def test_the_keys_are_declared_once_in_the_seed_order() -> None:
    assert SETTING_NAMES == (
        "output",
        "temperature",
        "top_p",
        "max_tokens",
        "seed",
        "reasoning_effort",
        "reasoning_budget_tokens",
        "tool_choice",
        "provider_options",
    )
    assert tuple(GenerationSettings.__annotations__) == SETTING_NAMES
    assert tuple(n for n in SETTING_NAMES if n != "tool_choice") == DEFERRED_SETTING_NAMES
    assert tuple(DeferredSettings.__annotations__) == DEFERRED_SETTING_NAMES
    assert GenerationSettings.__required_keys__ == frozenset()


def test_every_key_is_an_output_requirements_field() -> None:
    # requirements_from maps each key to its field: None everywhere builds the default value.
    assert requirements_from(dict.fromkeys(SETTING_NAMES)) == OutputRequirements()
    fields = {f.name for f in dataclasses.fields(OutputRequirements)}
    assert {"output_schema", *SETTING_NAMES} - {"output"} <= fields


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_each_front_door_keeps_the_seed_signature(name: str) -> None:
    signature = inspect.signature(FRONT_DOORS[name])
    assert str(signature) == SEED_SIGNATURES[name]
    settings = [p for p in signature.parameters.values() if p.name in _keys(name)]
    assert [p.name for p in settings] == list(_keys(name))
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None for p in settings)
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())


def test_the_front_doors_stay_coroutine_functions() -> None:
    for fn in (pollux.run, pollux.run_many, pollux.interact, pollux.defer, Session.run_many):
        assert inspect.iscoroutinefunction(fn)
    assert pollux.run.__name__ == "run" and "Run a single prompt" in (pollux.run.__doc__ or "")


def _python_says(keyword: str) -> str:
    """Python's own message for a function with an explicit signature, ``{}`` for its name."""

    def probe(*, temperature: object = None) -> None:
        del temperature

    with pytest.raises(TypeError) as caught:
        probe(**{keyword: 1})
    return str(caught.value).replace(probe.__qualname__, "{}", 1)


def _call(name: str, session: Session, **kwargs: Any) -> Any:
    doors: dict[str, Callable[[], Any]] = {
        "run": lambda: pollux.run("Q?", config=MOCK, **kwargs),
        "run_many": lambda: pollux.run_many(["Q?"], config=MOCK, **kwargs),
        "interact": lambda: pollux.interact(ENV, Input("Q?"), config=MOCK, **kwargs),
        "stream": lambda: pollux.stream(ENV, Input("Q?"), config=MOCK, **kwargs),
        "defer": lambda: pollux.defer(["Q?"], config=MOCK, **kwargs),
        "Session.run_many": lambda: session.run_many(["Q?"], **kwargs),
        "Session.interact": lambda: session.interact(ENV, Input("Q?"), **kwargs),
        "Session.stream": lambda: session.stream(ENV, Input("Q?"), **kwargs),
        "Session.defer": lambda: session.defer(["Q?"], **kwargs),
    }
    return doors[name]()


async def _drive(result: Awaitable[Any] | AsyncIterator[Any]) -> None:
    if inspect.isawaitable(result):
        await result
    else:
        async for _ in result:
            pass


@pytest.mark.parametrize("name", sorted(FRONT_DOORS))
@pytest.mark.parametrize(
    ("keyword", "suggestion"),
    [("temprature", "temperature"), ("max_token", "max_tokens"), ("colour", None)],
)
async def test_an_unknown_keyword_fails_as_python_does(
    name: str, keyword: str, suggestion: str | None
) -> None:
    async with Session(MOCK) as session:
        with pytest.raises(TypeError) as caught:
            await _drive(_call(name, session, **{keyword: 0.2}))
    python = _python_says(keyword).format(name)
    message = str(caught.value)
    assert message.startswith(python)
    if suggestion is None:
        assert message == python
    else:
        assert message in (python, f"{python}. Did you mean {suggestion!r}?")
        assert message.endswith(f"Did you mean {suggestion!r}?")


@pytest.mark.parametrize("name", ["stream", "Session.stream"])
async def test_stream_refuses_an_unknown_keyword_when_called(name: str) -> None:
    # Like a generator function with an explicit signature: before the first event is asked for.
    async with Session(MOCK) as session:
        with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
            _call(name, session, temprature=0.2)


@pytest.mark.parametrize("name", ["defer", "Session.defer"])
async def test_defer_takes_no_tool_choice(name: str) -> None:
    async with Session(MOCK) as session:
        with pytest.raises(TypeError) as caught:
            await _call(name, session, tool_choice="auto")
    assert str(caught.value) == _python_says("tool_choice").format(name)


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


@pytest.mark.parametrize("name", sorted(FRONT_DOORS))
async def test_every_keyword_reaches_validation(name: str) -> None:
    # Nothing is swallowed: a bad value of each keyword is refused, naming it, before any I/O.
    assert set(INVALID) == set(SETTING_NAMES)
    async with Session(MOCK) as session:
        for keyword in _keys(name):
            with pytest.raises(ConfigurationError) as caught:
                await _drive(_call(name, session, **{keyword: INVALID[keyword]}))
            field = "output_schema" if keyword == "output" else keyword
            assert field in str(caught.value), keyword


async def test_explicit_none_is_the_default() -> None:
    every = dict.fromkeys(SETTING_NAMES)
    answer = await pollux.run("Q?", config=MOCK, **every)
    assert answer.text and answer.text == (await pollux.run("Q?", config=MOCK)).text


def test_describe_call_still_refuses_an_unknown_setting_with_a_hint() -> None:
    with pytest.raises(ConfigurationError) as caught:
        describe_call("Q?", settings={"temprature": 0.2})
    assert "temprature" in str(caught.value) and "temperature" in (caught.value.hint or "")


def test_the_decorator_refuses_a_function_it_cannot_describe() -> None:
    def no_settings(prompt: str) -> None: ...

    def shadows(*, temperature: float = 0.0, **settings: Unpack[GenerationSettings]) -> None: ...

    def wrong_keys(**settings: Unpack[DeferredSettings]) -> None: ...

    def tools(*, tools: object = None, **settings: Unpack[GenerationSettings]) -> None: ...

    with pytest.raises(TypeError, match="must end in"):
        generation_keywords()(no_settings)
    with pytest.raises(TypeError, match="must end in"):
        generation_keywords()(wrong_keys)
    with pytest.raises(TypeError, match="temperature shadow"):
        generation_keywords()(shadows)
    with pytest.raises(TypeError, match="cannot place tools after colour"):
        generation_keywords(place_after={"tools": "colour"})(tools)
    placed = generation_keywords(place_after={"tools": "tool_choice"})(tools)
    names = list(inspect.signature(placed).parameters)
    assert names[names.index("tool_choice") + 1] == "tools"


CALLERS = """\
from __future__ import annotations

import pollux
from pollux import Config, Environment, Input, Session


async def callers(config: Config, env: Environment, session: Session) -> None:
    await pollux.run("Q?", config=config, temperature=0.2, tools=[], tool_choice="auto")
    await pollux.run_many(["Q?"], config=config, seed=1, provider_options={"openai": {}})
    await pollux.interact(env, Input("Q?"), config=config, output={"type": "object"})
    pollux.stream(env, Input("Q?"), config=config, reasoning_budget_tokens=64)
    await pollux.defer(["Q?"], config=config, max_tokens=8, reasoning_effort="low")
    await session.run_many(["Q?"], top_p=0.5)
    await session.defer(["Q?"], max_tokens=8)
    session.stream(env, Input("Q?"), seed=1)
    await pollux.run("Q?", config=config, temprature=0.2)  # E
    await pollux.run_many(["Q?"], config=config, max_token=8)  # E
    await pollux.interact(env, Input("Q?"), config=config, sead=1)  # E
    pollux.stream(env, Input("Q?"), config=config, top_k=1)  # E
    await pollux.defer(["Q?"], config=config, tool_choice="auto")  # E
    await pollux.run("Q?", config=config, temperature="hot")  # E
    await session.interact(env, Input("Q?"), temprature=0.2)  # E
    await session.defer(["Q?"], tool_choice="auto")  # E
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
