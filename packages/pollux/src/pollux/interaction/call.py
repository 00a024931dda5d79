"""One neutral description of a call: environment, inputs and generation settings.

Every front door (``run``, ``run_many``, ``interact``, ``stream``, ``defer``, the ``Session``
methods) and the pollard bridge build their call here, so the inline-argument rules, the prompt
rules and the output requirements are written once. The seed's generation keywords are declared
once, in :class:`GenerationSettings` (``pollux.interaction.settings``), and validated here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from pollux.errors import ConfigurationError
from pollux.source import Source

from .environment import Environment
from .input import Input
from .requirements import OutputRequirements
from .settings import SETTING_NAMES, GenerationSettings
from .tools import ToolDeclaration

__all__ = [
    "SETTING_NAMES",
    "CallDescription",
    "GenerationSettings",
    "build_environment",
    "build_inputs",
    "describe_call",
    "requirements_from",
]


# Each setting is the OutputRequirements field of its name, except this one (the seed's keyword is
# ``output``, the value type's field ``output_schema``).
_FIELD = {"output": "output_schema"}


def requirements_from(settings: Mapping[str, Any]) -> OutputRequirements:
    """The validated :class:`OutputRequirements` for ``settings`` (the one place they are built).

    Raises:
        ConfigurationError: An unknown setting, or a value OutputRequirements refuses.
    """
    unknown = sorted(set(settings) - set(SETTING_NAMES))
    if unknown:
        raise ConfigurationError(
            f"unknown generation setting(s): {', '.join(unknown)}",
            hint="Generation settings are: " + ", ".join(SETTING_NAMES) + ".",
        )
    return OutputRequirements(**{_FIELD.get(name, name): value for name, value in settings.items()})


def build_environment(
    environment: Environment | None,
    *,
    instructions: str | None = None,
    sources: Sequence[Source] = (),
    tools: Sequence[ToolDeclaration] | None = None,
) -> Environment:
    """The given environment, or one built from inline arguments (never both).

    Raises:
        ConfigurationError: Both were given, or ``sources``/``tools`` is not a sequence.
    """
    if environment is not None:
        if not isinstance(environment, Environment):
            raise ConfigurationError(
                f"environment must be an Environment, got {type(environment).__name__}",
                hint="Build one with Environment(instructions=..., sources=[...], tools=[...]).",
            )
        inline = [
            name
            for name, value in (
                ("instructions", instructions),
                ("sources", sources),
                ("tools", tools),
            )
            if value
        ]
        if inline:
            raise ConfigurationError(
                f"environment cannot be combined with inline {'/'.join(inline)}",
                hint="Put them on the Environment, or drop the environment.",
            )
        return environment
    if isinstance(sources, (str, bytes)):  # type: ignore[unreachable]
        raise ConfigurationError(
            "sources must be a sequence of Source values, not a string",
            hint="Pass sources=[Source.from_text(...)] (or source=... on run()).",
        )
    if isinstance(sources, Source):
        raise ConfigurationError(
            "sources must be a sequence of Source values, got one Source",
            hint="Pass sources=[source] (or source=source on run()).",
        )
    if isinstance(tools, ToolDeclaration):
        raise ConfigurationError(
            "tools must be a sequence of ToolDeclaration values, got one ToolDeclaration",
            hint="Pass tools=[tool].",
        )
    return Environment(instructions=instructions, sources=tuple(sources), tools=tuple(tools or ()))


def build_inputs(prompts: str | Sequence[str | None] | None) -> list[Input]:
    """One Input per prompt, in order.

    Raises:
        ConfigurationError: No prompt, an empty or non-text prompt, or an unordered collection.
    """
    items: Sequence[str | None] = (
        (prompts,) if prompts is None or isinstance(prompts, str) else prompts
    )
    if isinstance(items, (bytes, bytearray)):  # type: ignore[unreachable]
        raise ConfigurationError("prompts must be text", hint="Pass a string or a list of strings.")
    if not isinstance(items, Iterable):
        raise ConfigurationError(
            f"prompts must be a string or a list of strings, got {type(items).__name__}",
            hint="Pass a string or a list of strings.",
        )
    if isinstance(items, (Set, Mapping)):
        # Answers come back in prompt order; a set or a mapping has no order to keep.
        raise ConfigurationError(
            f"prompts must be an ordered sequence, got {type(items).__name__}",
            hint="Pass a list of prompts, for example list(prompts) in the order you want "
            "the answers.",
        )
    inputs: list[Input] = []
    for position, prompt in enumerate(items):
        if prompt is not None and not isinstance(prompt, str):
            raise ConfigurationError(
                f"prompt {position} must be a string, got {type(prompt).__name__}",
                hint="Pass prompts as strings.",
            )
        if prompt is None or not prompt.strip():
            raise ConfigurationError(
                f"prompt {position} is empty",
                hint="Every prompt needs text; ask the question about the sources explicitly.",
            )
        inputs.append(Input(content=prompt))
    if not inputs:
        raise ConfigurationError(
            "run_many() needs at least one prompt", hint="Pass a prompt or a list of prompts."
        )
    return inputs


@dataclass(frozen=True, slots=True)
class CallDescription:
    """A validated call: what the model sees (environment, inputs) and how it answers.

    Attributes:
        environment: The model-facing setup shared by every input.
        inputs: One :class:`Input` per call, in order.
        requirements: The validated generation settings.
    """

    environment: Environment
    inputs: tuple[Input, ...]
    requirements: OutputRequirements


def describe_call(
    prompts: str | Sequence[str | None] | None = None,
    *,
    input: Input | None = None,
    environment: Environment | None = None,
    source: Source | None = None,
    sources: Sequence[Source] = (),
    instructions: str | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> CallDescription:
    """Build and validate one call description (no I/O).

    Pass ``prompts`` (the ``run``/``run_many`` shape) or one ``input`` (the ``interact``/
    ``stream`` shape, with ``environment``).

    Args:
        prompts: One prompt or an ordered sequence of prompts.
        input: One explicit turn, instead of prompts.
        environment: A prepared Environment (not combined with the inline arguments).
        source: One inline source (``run()``'s convenience, not combined with ``sources``).
        sources: Inline sources.
        instructions: An inline system instruction.
        tools: Inline tool declarations.
        settings: The generation settings (see :class:`GenerationSettings`).

    Returns:
        The :class:`CallDescription`.

    Raises:
        ConfigurationError: Any rule above broken, or an invalid setting.

    Example:
        >>> call = describe_call(["Q1?", "Q2?"], instructions="Be brief.", settings={"seed": 1})
        >>> len(call.inputs), call.requirements.seed
        (2, 1)
    """
    if source is not None:
        if sources:
            raise ConfigurationError(
                "run() takes source= or sources=, not both",
                hint="Pass sources=[a, b] for several sources.",
            )
        if environment is not None:
            raise ConfigurationError(
                "environment cannot be combined with inline source/sources",
                hint="Build the Environment with the sources, or drop the environment.",
            )
        sources = (source,)
    requirements = requirements_from(settings or {})
    env = build_environment(environment, instructions=instructions, sources=sources, tools=tools)
    if input is not None:
        if not isinstance(input, Input):
            raise ConfigurationError(
                f"input must be an Input, got {type(input).__name__}",
                hint="Pass Input('your question') or Input(continuation=..., tool_results=[...]).",
            )
        inputs: tuple[Input, ...] = (input,)
    else:
        inputs = tuple(build_inputs(prompts))
    return CallDescription(environment=env, inputs=inputs, requirements=requirements)
