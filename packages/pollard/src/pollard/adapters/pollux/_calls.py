"""One governed step around one pollux call: `governed_run` and `governed_interact`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import pollux
from pollard import AsyncRun
from pollux import (
    Config,
    ConfigurationError,
    Environment,
    Input,
    Output,
    OutputRequirements,
    Source,
)
from pollux.interaction import GenerationSettings, describe_call, generation_keywords

from ._cache_charges import cache_hold, charge_created_cache
from ._identity import output_from_node, request_identity, result_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pollard import Run
    from pollux import ToolDeclaration

__all__ = ["check_config", "check_run", "governed_interact", "governed_run", "step"]


def check_run(run: object, function: str) -> AsyncRun:
    """The async view of ``run``: an `AsyncRun` as is, a sync `Run` driven on this event loop."""
    try:
        return AsyncRun.of(run)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{function}() needs a pollard run (from Runtime(...).run() or "
            f"AsyncRuntime(...).run()), got {type(run).__name__}"
        ) from None


def check_config(config: object) -> Config:
    if not isinstance(config, Config):
        raise ConfigurationError(
            f"config must be a Config, got {type(config).__name__}",
            hint="Pass config=Config(provider=..., model=...).",
        )
    return config


async def step(
    run: AsyncRun,
    payload: dict[str, Any],
    call: Callable[[], Awaitable[Output]],
    requirements: OutputRequirements,
    attempt: int,
    *,
    config: Config,
    environment: Environment,
) -> Output:
    """One ``model_call`` step around one pollux call; the live Output when it ran.

    A call that may create an explicit cache first holds the cache's worst case (`cache_hold`).
    """
    live: list[Output] = []

    async def fn(_payload: Any) -> dict[str, Any]:
        output = await call()
        live.append(output)
        return result_of(output)

    # The hold is given back only once the cache the call created is charged (no gap).
    async with cache_hold(run, payload, config, environment, attempt):
        node = await run.model_call(payload, fn=fn, attempt=attempt)
        if live:
            await charge_created_cache(run, node.id, payload["provider"], payload["model"], live[0])
    if live:
        return live[0]
    return output_from_node(node, output=requirements.output_schema)


@generation_keywords(place_after={"tools": "tool_choice", "attempt": "provider_options"})
async def governed_run(
    run: AsyncRun | Run,
    prompt: str | None = None,
    *,
    source: Source | None = None,
    sources: Sequence[Source] = (),
    config: Config,
    environment: Environment | None = None,
    instructions: str | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    attempt: int = 0,
    **settings: Unpack[GenerationSettings],
) -> Output:
    """``pollux.run`` as one governed ``model_call`` step under the run's cursor.

    Takes ``pollux.run``'s arguments plus the run and pollard's ``attempt``. In hybrid and replay
    mode a recorded identical request is served without a provider call. The node is
    ``run.cursor`` afterwards.

    Args:
        run: The run to record into (an `AsyncRun`, or a sync `Run`; see the module docs).
        prompt: The prompt to run.
        source: A single source for context.
        sources: Stable sources for context.
        config: The pollux configuration (provider and model).
        environment: A prepared `pollux.Environment` (not combined with inline
            ``instructions``/``source``/``sources``/``tools``).
        instructions: A system-level instruction.
        tools: Tool declarations.
        attempt: pollard's attempt number (ask the same question again as a distinct step).
        **settings: pollux's generation keywords, each optional (``output=``,
            ``temperature=``, ``max_tokens=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Returns:
        The `pollux.Output`, live or rebuilt from the recording.

    Raises:
        BudgetExceeded: A budget refused the call before any provider I/O (a refusal is recorded),
            its own worst case or, when it may create a Gemini ``CachePolicy`` cache, the
            cache's (creation plus the whole TTL of storage).
        MissingRecording: Replay mode, and this request was not recorded here.
        ConfigurationError: Invalid arguments (before anything is recorded).
        APIError: The provider call failed (the failed dispatch is recorded and charged).
    """
    run = check_run(run, "governed_run")
    config = check_config(config)
    call = describe_call(
        prompt,
        environment=environment,
        source=source,
        sources=sources,
        instructions=instructions,
        tools=tools,
        settings=settings,
    )
    env, (turn,) = call.environment, call.inputs
    payload = request_identity("run", config, env, turn, call.requirements)

    async def model() -> Output:
        return await pollux.run(turn.content, environment=env, config=config, **settings)

    return await step(
        run, payload, model, call.requirements, attempt, config=config, environment=env
    )


@generation_keywords(place_after={"attempt": "provider_options"})
async def governed_interact(
    run: AsyncRun | Run,
    environment: Environment,
    input: Input,
    *,
    config: Config,
    attempt: int = 0,
    **settings: Unpack[GenerationSettings],
) -> Output:
    """``pollux.interact`` as one governed ``model_call`` step under the run's cursor.

    A tool loop records one node per turn, each under the previous one. The continuation of a
    served output is the recorded one, so the next turn's identity matches the recording and a
    replayed loop runs to the end without a provider call.

    Args:
        run: The run to record into (an `AsyncRun`, or a sync `Run`; see the module docs).
        environment: The reusable model-facing setup.
        input: The turn (content, history or continuation, tool results).
        config: The pollux configuration.
        attempt: pollard's attempt number.
        **settings: pollux's generation keywords, each optional (``output=``,
            ``temperature=``, ``max_tokens=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Returns:
        The `pollux.Output`, live or rebuilt from the recording.

    Raises:
        BudgetExceeded: A budget refused the call before any provider I/O.
        MissingRecording: Replay mode, and this turn was not recorded here.
        ConfigurationError: Invalid arguments (before anything is recorded).
        APIError: The provider call failed (the failed dispatch is recorded and charged).
    """
    run = check_run(run, "governed_interact")
    config = check_config(config)
    call = describe_call(input=input, environment=environment, settings=settings)
    env, (turn,) = call.environment, call.inputs
    payload = request_identity("interact", config, env, turn, call.requirements)

    async def model() -> Output:
        return await pollux.interact(env, turn, config=config, **settings)

    return await step(
        run, payload, model, call.requirements, attempt, config=config, environment=env
    )
