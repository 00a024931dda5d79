"""The pollux bridge: every pollux interaction as a governed, budgeted, replayable pollard step.

``pip install "pollard[pollux]"``. The functions mirror pollux's entry points and take a pollard
run first, an `AsyncRun` or a sync `Run` (pollux is async, so with a sync `Runtime` call them
through ``asyncio.run(...)``; its store I/O then stays on the calling thread):

* `governed_run` (like ``pollux.run``) and `governed_interact` (like ``pollux.interact``) record one
  ``model_call`` node under the run's cursor and return the `pollux.Output`;
* `governed_stream` (like ``pollux.stream``) yields the `pollux.Event` timeline while the step
  runs; the events are kept with the node, so replay yields the same timeline;
* `governed_run_many` (like ``pollux.run_many``) makes **each prompt its own step**: the prompts
  run concurrently (at most ``config.request_concurrency`` in flight), each prompt is checked
  against the budgets before its provider call, and a refused or failed prompt becomes an error
  `pollux.Output` while the others keep their answers, exactly like pollux's partial results.

What a node records:

* its **identity payload** is the model-visible request: ``provider``, ``model``, the
  environment (`pollux.Environment.fingerprint`, the instructions, every source's
  ``cache_identity_hash`` and size, the tool names), the input (content, portable history, the
  digest of the continuation, tool results) and the output requirements that are set
  (temperature and top_p in pollard's canonical float form, max_tokens, seed, reasoning, the
  output schema's hash, tool choice, the active provider's options). Connection details
  (``base_url``, keys, timeouts, retries, concurrency) are not part of it, so a recording made
  against one server replays against another; ``use_mock=True`` is (as ``"mock": true``), so mock
  recordings never answer for a real provider.
* its **result** is ``{"text", "output": Output.to_jsonable(), "usage"}``; ``usage`` carries the
  normalized counts every pollard adapter reports (``input_tokens`` and ``output_tokens`` are the
  whole volume; ``cache_read_tokens``, ``cache_write_tokens`` and ``reasoning_tokens`` are
  breakdowns), which `pollard.meters.TokenMeter` and `pollard.meters.CostMeter` charge.

Replay rebuilds the Output with ``Output.from_jsonable`` (validating structured output into the
pydantic model you pass as ``output=``) and makes no provider call; a request that was not recorded
raises `pollard.MissingRecording`. A continuation comes back from the recorded output, so a
replayed tool loop sends the same continuation on its next turn and is served again.

Failed provider calls raise from `governed_run`, `governed_interact` and `governed_stream` (after
pollard recorded the failed dispatch and charged its estimate); `governed_run_many` records them
the same way and returns them as error outputs. Failed calls are not results: hybrid mode runs them
again, replay raises `pollard.MissingRecording` for them.

Example:
    >>> import asyncio
    >>> from pollard import AsyncRuntime, Budget
    >>> from pollard.adapters.pollux import governed_run_many
    >>> from pollux import Config
    >>> async def main():
    ...     config = Config(provider="openai", model="gpt-5-nano", use_mock=True)
    ...     async with AsyncRuntime() as rt:
    ...         run = rt.run("demo", budget=Budget(steps=10))
    ...         answers = await governed_run_many(run, ["Q1?", "Q2?"], config=config)
    ...         return answers.status, run.report()["spent"]["steps"]
    >>> asyncio.run(main())
    ('ok', 2)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

try:
    import pollux
    from pollux import (
        APIError,
        Config,
        ConfigurationError,
        Environment,
        Event,
        Input,
        Output,
        OutputCollection,
        OutputRequirements,
        Source,
        ToolCallParseError,
    )
    from pollux.interaction import (
        CallDescription,
        Diagnostics,
        Metrics,
        ProviderCall,
        describe_call,
        intercept_calls,
        settings_from,
    )
except ImportError as exc:  # pragma: no cover - the extra is installed in every test environment
    raise ImportError(
        'pollard.adapters.pollux needs pollux: pip install "pollard[pollux]"'
    ) from exc

from pollard._runtime._async import AsyncRun
from pollard.errors import BudgetExceeded, PollardError

if TYPE_CHECKING:
    from pollard._core._node import Node
    from pollard._runtime._sync import Run
    from pollux import ResponseSchemaInput, ToolChoice, ToolDeclaration

__all__ = [
    "BRIDGE_VERSION",
    "PolluxTokenEstimator",
    "governed_interact",
    "governed_run",
    "governed_run_many",
    "governed_stream",
    "output_from_node",
]

BRIDGE_VERSION = 1
"""The ``"pollux"`` field of every identity payload; bumped when the payload's meaning changes."""

_ERRORS_PER_PROMPT = (APIError, ToolCallParseError)

# pollux provider -> OpenTelemetry ``gen_ai.provider.name`` (read from ``payload["_pollard"]``).
_GEN_AI_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "openrouter": "openrouter",
}


# -- identity --------------------------------------------------------------------------------------


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def _json(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{what} must be JSON data to be part of a pollard identity: {exc}"
        ) from None


def _source_identity(source: Source, provider: str) -> dict[str, Any]:
    return {
        "type": source.source_type,
        "mime_type": source.mime_type,
        "hash": source.cache_identity_hash(provider=provider),
        "bytes": source.size_bytes,
    }


def _requirements_identity(requirements: OutputRequirements, provider: str) -> dict[str, Any]:
    identity: dict[str, Any] = {}
    schema_hash = requirements.output_schema_hash()
    if schema_hash is not None:
        identity["output_schema"] = schema_hash
    for name in (
        "temperature",
        "top_p",
        "max_tokens",
        "seed",
        "reasoning_effort",
        "reasoning_budget_tokens",
    ):
        value = getattr(requirements, name)
        if value is not None:
            identity[name] = value
    choice = requirements.tool_choice
    if choice is not None:
        identity["tool_choice"] = choice if isinstance(choice, str) else dict(choice)
    options = requirements.provider_options_for(provider)
    if options:
        identity["provider_options"] = _json(options, "provider_options")
    return identity


def _input_identity(turn: Input) -> dict[str, Any]:
    identity: dict[str, Any] = {}
    if turn.content is not None:
        identity["content"] = turn.content
    if turn.history is not None:
        identity["history"] = [_json(m.to_jsonable(), "history") for m in turn.history]
    if turn.continuation is not None:
        # The digest commits to the exact prior state; the state itself is in the previous
        # node's recorded output, so long conversations are not stored once per turn.
        identity["continuation"] = _digest(turn.continuation.to_jsonable())
    if turn.tool_results:
        identity["tool_results"] = [r.to_jsonable() for r in turn.tool_results]
    return identity


def _payloads(
    api: str,
    config: Config,
    environment: Environment,
    turns: Sequence[Input],
    requirements: OutputRequirements,
) -> list[dict[str, Any]]:
    """One identity payload per turn; the shared parts are computed (and hashed) once."""
    provider = config.provider
    env: dict[str, Any] = {"fingerprint": environment.fingerprint(provider=provider)}
    if environment.instructions is not None:
        env["instructions"] = environment.instructions
    if environment.sources:
        env["sources"] = [_source_identity(s, provider) for s in environment.sources]
    if environment.tools:
        env["tools"] = [tool.name for tool in environment.tools]
    common: dict[str, Any] = {
        "pollux": BRIDGE_VERSION,
        "api": api,
        "provider": provider,
        "model": config.model,
    }
    if config.use_mock:
        common["mock"] = True
    elif provider in _GEN_AI_PROVIDERS:
        common["_pollard"] = {"provider": _GEN_AI_PROVIDERS[provider]}
    common["environment"] = env
    required = _requirements_identity(requirements, provider)
    payloads = []
    for turn in turns:
        payload = {**common, "input": _input_identity(turn)}
        if required:
            payload["requirements"] = required
        payloads.append(payload)
    return payloads


def _payload(
    api: str,
    config: Config,
    environment: Environment,
    turn: Input,
    requirements: OutputRequirements,
) -> dict[str, Any]:
    return _payloads(api, config, environment, (turn,), requirements)[0]


# -- results ---------------------------------------------------------------------------------------


def _result(output: Output) -> dict[str, Any]:
    usage = output.usage
    return {
        "text": output.text,
        "output": output.to_jsonable(),
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cached_tokens or 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": usage.reasoning_tokens or 0,
        },
    }


def output_from_node(node: Node, *, output: ResponseSchemaInput | None = None) -> Output:
    """Rebuild the `pollux.Output` a bridge node recorded.

    Args:
        node: A ``model_call`` node recorded by this module.
        output: The pydantic model the call asked for, to validate ``structured`` into it (a JSON
            Schema dict, or None, keeps it as JSON data).

    Returns:
        The recorded Output.

    Raises:
        PollardError: The node has no recorded pollux output.
    """
    result = node.result
    data = result.get("output") if isinstance(result, Mapping) else None
    if not isinstance(data, Mapping):
        raise PollardError(
            f"node {node.id} holds no recorded pollux output",
            hint="pass a model_call node recorded by pollard.adapters.pollux",
        )
    model = OutputRequirements(output_schema=output).output_schema_model()
    return Output.from_jsonable(data, response_schema=model)


# -- arguments -------------------------------------------------------------------------------------


def _check_run(run: object, function: str) -> AsyncRun:
    """The async view of ``run``: an `AsyncRun` as is, a sync `Run` driven on this event loop."""
    try:
        return AsyncRun.of(run)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{function}() needs a pollard run (from Runtime(...).run() or "
            f"AsyncRuntime(...).run()), got {type(run).__name__}"
        ) from None


def _check_config(config: object) -> Config:
    if not isinstance(config, Config):
        raise ConfigurationError(
            f"config must be a Config, got {type(config).__name__}",
            hint="Pass config=Config(provider=..., model=...).",
        )
    return config


def _settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The generation keywords of a bridge entry point (its ``locals()``), None left out."""
    return dict(settings_from(values))


# -- one step --------------------------------------------------------------------------------------


async def _step(
    run: AsyncRun,
    payload: dict[str, Any],
    call: Callable[[], Awaitable[Output]],
    requirements: OutputRequirements,
    attempt: int,
) -> Output:
    """One ``model_call`` step around one pollux call; the live Output when it ran."""
    live: list[Output] = []

    async def fn(_payload: Any) -> dict[str, Any]:
        output = await call()
        live.append(output)
        return _result(output)

    node = await run.model_call(payload, fn=fn, attempt=attempt)
    if live:
        return live[0]
    return output_from_node(node, output=requirements.output_schema)


# -- entry points ----------------------------------------------------------------------------------


async def governed_run(
    run: AsyncRun | Run,
    prompt: str | None = None,
    *,
    source: Source | None = None,
    sources: Sequence[Source] = (),
    config: Config,
    environment: Environment | None = None,
    instructions: str | None = None,
    output: ResponseSchemaInput | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    reasoning_effort: str | None = None,
    reasoning_budget_tokens: int | None = None,
    tool_choice: ToolChoice | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    provider_options: dict[str, dict[str, Any]] | None = None,
    attempt: int = 0,
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
        output: A pydantic model or JSON Schema for structured output.
        temperature: Sampling temperature.
        top_p: Nucleus-sampling probability.
        max_tokens: Hard cap on output tokens.
        seed: Sampling seed where supported.
        reasoning_effort: Qualitative reasoning effort.
        reasoning_budget_tokens: Explicit reasoning token budget.
        tool_choice: Tool-choice control.
        tools: Tool declarations.
        provider_options: Raw provider-scoped generation options.
        attempt: pollard's attempt number (ask the same question again as a distinct step).

    Returns:
        The `pollux.Output`, live or rebuilt from the recording.

    Raises:
        BudgetExceeded: A budget refused the call before any provider I/O (a refusal is recorded).
        MissingRecording: Replay mode, and this request was not recorded here.
        ConfigurationError: Invalid arguments (before anything is recorded).
        APIError: The provider call failed (the failed dispatch is recorded and charged).
    """
    settings = _settings(locals())
    run = _check_run(run, "governed_run")
    config = _check_config(config)
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
    payload = _payload("run", config, env, turn, call.requirements)

    async def model() -> Output:
        return await pollux.run(turn.content, environment=env, config=config, **settings)

    return await _step(run, payload, model, call.requirements, attempt)


async def governed_interact(
    run: AsyncRun | Run,
    environment: Environment,
    input: Input,
    *,
    config: Config,
    output: ResponseSchemaInput | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    reasoning_effort: str | None = None,
    reasoning_budget_tokens: int | None = None,
    tool_choice: ToolChoice | None = None,
    provider_options: dict[str, dict[str, Any]] | None = None,
    attempt: int = 0,
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
        output: A pydantic model or JSON Schema for structured output.
        temperature: Sampling temperature.
        top_p: Nucleus-sampling probability.
        max_tokens: Hard cap on output tokens.
        seed: Sampling seed where supported.
        reasoning_effort: Qualitative reasoning effort.
        reasoning_budget_tokens: Explicit reasoning token budget.
        tool_choice: Tool-choice control.
        provider_options: Raw provider-scoped generation options.
        attempt: pollard's attempt number.

    Returns:
        The `pollux.Output`, live or rebuilt from the recording.

    Raises:
        BudgetExceeded: A budget refused the call before any provider I/O.
        MissingRecording: Replay mode, and this turn was not recorded here.
        ConfigurationError: Invalid arguments (before anything is recorded).
        APIError: The provider call failed (the failed dispatch is recorded and charged).
    """
    settings = _settings(locals())
    run = _check_run(run, "governed_interact")
    config = _check_config(config)
    call = describe_call(input=input, environment=environment, settings=settings)
    env, (turn,) = call.environment, call.inputs
    payload = _payload("interact", config, env, turn, call.requirements)

    async def model() -> Output:
        return await pollux.interact(env, turn, config=config, **settings)

    return await _step(run, payload, model, call.requirements, attempt)


async def governed_stream(
    run: AsyncRun | Run,
    environment: Environment,
    input: Input,
    *,
    config: Config,
    output: ResponseSchemaInput | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    reasoning_effort: str | None = None,
    reasoning_budget_tokens: int | None = None,
    tool_choice: ToolChoice | None = None,
    provider_options: dict[str, dict[str, Any]] | None = None,
    attempt: int = 0,
) -> AsyncGenerator[Event, None]:
    """``pollux.stream`` as one governed ``model_call`` step: the same `pollux.Event` timeline.

    Events are yielded as the provider streams them and stored with the node (pollard's
    ``keep_chunks``), so hybrid and replay yield the recorded timeline without a provider call.
    The terminal ``done`` event carries the Output; charges settle once, after the stream ends.
    Closing the iterator early cancels the call (pollard records the cancelled dispatch).

    Args:
        run: The run to record into (an `AsyncRun`, or a sync `Run`; see the module docs).
        environment: The reusable model-facing setup.
        input: The turn.
        config: The pollux configuration.
        output: A pydantic model or JSON Schema for structured output.
        temperature: Sampling temperature.
        top_p: Nucleus-sampling probability.
        max_tokens: Hard cap on output tokens.
        seed: Sampling seed where supported.
        reasoning_effort: Qualitative reasoning effort.
        reasoning_budget_tokens: Explicit reasoning token budget.
        tool_choice: Tool-choice control.
        provider_options: Raw provider-scoped generation options.
        attempt: pollard's attempt number.

    Yields:
        Each event of the timeline, ending in ``done``.

    Raises:
        BudgetExceeded: A budget refused the call before any provider I/O.
        MissingRecording: Replay mode, and this turn was not recorded here.
        APIError: The provider call or stream failed (recorded and charged).
    """
    settings = _settings(locals())
    run = _check_run(run, "governed_stream")
    config = _check_config(config)
    call = describe_call(input=input, environment=environment, settings=settings)
    env, (turn,) = call.environment, call.inputs
    requirements = call.requirements
    payload = _payload("stream", config, env, turn, requirements)
    # One event in hand at a time: the consumer's pace drives the stream, as with pollux.stream,
    # and closing the iterator early cancels the call.
    queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=1)
    live: list[Output] = []

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        events = pollux.stream(env, turn, config=config, **settings)
        final: Output | None = None
        try:
            async for event in events:
                if event.type == "done":
                    final = event.output
                else:
                    # An empty delta leaves the settled result alone; the event rides along.
                    yield {"delta": {}, "event": event.to_jsonable()}
        finally:
            await events.aclose()
        if final is None:
            raise PollardError(
                "the pollux stream ended without a done event",
                hint="this is a pollux bug; please report it",
            )
        live.append(final)
        yield {"result": _result(final)}

    def fn(_payload: Any) -> AsyncIterator[dict[str, Any]]:
        return chunks()

    async def on_delta(chunk: Mapping[str, Any]) -> None:
        event = chunk.get("event")
        if isinstance(event, Mapping):
            await queue.put(Event.from_jsonable(event))

    task = asyncio.ensure_future(
        run.model_call(payload, fn=fn, attempt=attempt, on_delta=on_delta, keep_chunks=True)
    )
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
                continue
            getter.cancel()
            while not queue.empty():
                yield queue.get_nowait()
            break
        node = task.result()
        final = live[0] if live else output_from_node(node, output=requirements.output_schema)
        yield Event(type="done", output=final)
    finally:
        if not task.done():
            task.cancel()
        # Let pollard record the cancelled (or failed) dispatch before the iterator closes; a
        # step error was raised by task.result() above.
        await asyncio.gather(task, return_exceptions=True)


async def governed_run_many(
    run: AsyncRun | Run,
    prompts: str | Sequence[str | None] | None = None,
    *,
    sources: Sequence[Source] = (),
    config: Config,
    environment: Environment | None = None,
    instructions: str | None = None,
    output: ResponseSchemaInput | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    reasoning_effort: str | None = None,
    reasoning_budget_tokens: int | None = None,
    tool_choice: ToolChoice | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    provider_options: dict[str, dict[str, Any]] | None = None,
) -> OutputCollection:
    """``pollux.run_many`` with each prompt its own governed ``model_call`` step.

    The prompt steps are siblings under the run's cursor (each its own cursor, so concurrent
    steps never race for the run's), run with at most ``config.request_concurrency`` in flight,
    and each is checked against the budgets right before its provider call. Prompts are admitted
    in order (their provider calls overlap), so a budget that runs out refuses the last prompts.
    A prompt that a budget refuses, or whose call fails, becomes an error Output
    (``metrics.completion_status == "error"``, the error in ``diagnostics.error``, with
    ``refusal_id`` for refusals) and the other prompts keep their answers. Identical prompts
    are distinct steps (attempts 0, 1, ...).

    Afterwards a note ``{"pollux": "run_many", "calls": [...]}`` listing each prompt's node id
    (the refusal's id for a refused prompt, None for a failed one) is recorded under the cursor,
    and the cursor moves onto it; the steps' charges count in ``run.report()``.

    pollux runs the fan-out itself (its scheduler and limiter, its partial results), and the
    bridge governs each provider call through pollux's call seam (`pollux.intercept_calls`).
    The shared sources are prepared once for the whole call (an OpenAI file is uploaded once,
    not once per prompt), when the first prompt goes to the provider: a fully replayed call
    uploads nothing. As with ``pollux.run_many``, outputs carry no continuation when there are
    several prompts.

    Args:
        run: The run to record into (an `AsyncRun`, or a sync `Run`; see the module docs).
        prompts: One or more prompts.
        sources: Stable sources shared across the prompts.
        config: The pollux configuration.
        environment: A prepared `pollux.Environment`.
        instructions: A system-level instruction.
        output: A pydantic model or JSON Schema for structured output.
        temperature: Sampling temperature.
        top_p: Nucleus-sampling probability.
        max_tokens: Hard cap on output tokens.
        seed: Sampling seed where supported.
        reasoning_effort: Qualitative reasoning effort.
        reasoning_budget_tokens: Explicit reasoning token budget.
        tool_choice: Tool-choice control.
        tools: Tool declarations.
        provider_options: Raw provider-scoped generation options.

    Returns:
        The `pollux.OutputCollection`, outputs in prompt order.

    Raises:
        MissingRecording: Replay mode, and a prompt was not recorded here (raised after the
            other prompts ended; nothing is returned and no fan-in note is written).
        ConfigurationError: Invalid arguments (before anything is recorded).
    """
    settings = _settings(locals())
    run = _check_run(run, "governed_run_many")
    config = _check_config(config)
    call = describe_call(
        prompts,
        environment=environment,
        sources=sources,
        instructions=instructions,
        tools=tools,
        settings=settings,
    )
    governor = _FanOut(run, config, call)
    # pollux runs the fan-out (its scheduler, limiter, one-time source preparation and partial
    # results); each provider call passes through the governor, one pollard step per call.
    with intercept_calls(governor):
        answers = await pollux.run_many(
            [turn.content for turn in call.inputs],
            environment=call.environment,
            config=config,
            **settings,
        )
    await run.note({"pollux": "run_many", "calls": governor.node_ids})
    return answers


class _FanOut:
    """The call interceptor of `governed_run_many`: each provider call is one pollard step.

    Admission (replay lookup, budget check, reservation) happens one call at a time, in prompt
    order, while the admitted provider calls overlap: a budget that runs out refuses the last
    prompts, the same ones on every run. Without limits nothing can be refused, and replay only
    looks up: no ordering is needed then.
    """

    def __init__(self, run: AsyncRun, config: Config, call: CallDescription) -> None:
        self.run = run
        self.requirements = call.requirements
        self.payloads = _payloads(
            "run_many", config, call.environment, call.inputs, call.requirements
        )
        seen: dict[bytes, int] = {}
        self.attempts: list[int] = []
        for payload in self.payloads:
            key = _canonical(payload)
            self.attempts.append(seen.get(key, 0))
            seen[key] = self.attempts[-1] + 1
        self.node_ids: list[str | None] = [None] * len(self.payloads)
        self.ordered = run.mode != "replay" and run.limited
        # admitted[i] is set once call i passed admission (or gave up); call i + 1 waits for it.
        self.admitted = [asyncio.Event() for _ in self.payloads]

    async def call(self, call: ProviderCall, proceed: Callable[[], Awaitable[Output]]) -> Output:
        index = call.index
        admitted = self.admitted[index]
        if self.ordered and index > 0:
            await self.admitted[index - 1].wait()
        forked = self.run.fork()
        live: list[Output] = []

        async def fn(_payload: Any) -> dict[str, Any]:
            admitted.set()
            output = await proceed()
            live.append(output)
            return _result(output)

        try:
            node = await forked.model_call(
                self.payloads[index], fn=fn, attempt=self.attempts[index]
            )
        except BudgetExceeded as exc:
            self.node_ids[index] = exc.refusal_id
            return _refused(exc)
        finally:
            admitted.set()
        self.node_ids[index] = forked.cursor_id
        if live:
            return live[0]
        return output_from_node(node, output=self.requirements.output_schema)


def _refused(error: BudgetExceeded) -> Output:
    """The error Output of a refused prompt, the same whether refused now or replayed."""
    meter = error.meter or "a"
    what = "rate window" if error.reason == "window" else "budget"
    detail: dict[str, Any] = {
        "type": type(error).__name__,
        "message": f"the {meter} {what} refused this prompt before its provider call",
        "refusal_id": error.refusal_id,
    }
    if error.meter is not None:
        detail["meter"] = error.meter
    if error.hint is not None:
        detail["hint"] = error.hint
    return Output(
        metrics=Metrics(n_calls=0, completion_status="error"),
        diagnostics=Diagnostics(raw={"error": detail}),
    )


# -- estimation ------------------------------------------------------------------------------------


class PolluxTokenEstimator:
    """Estimates the input tokens of a bridge payload, for ``TokenMeter(estimator=...)``.

    It counts the characters of the instructions, the prompt, the portable history and the tool
    results plus the bytes of the sources, at ``chars_per_token`` characters per token (the
    common rule of thumb for English text). It does not see a continuation's earlier turns (the
    payload holds only their digest), images or provider-added text, so it is an approximation;
    with ``reserved_output_tokens`` it lets a token budget refuse a call before it is sent.

    Args:
        chars_per_token: Characters (or source bytes) per token.

    Example:
        >>> from pollard.meters import TokenMeter
        >>> meter = TokenMeter(PolluxTokenEstimator(), reserved_output_tokens=256)
    """

    def __init__(self, chars_per_token: float = 4.0) -> None:
        if isinstance(chars_per_token, bool) or not (
            isinstance(chars_per_token, (int, float)) and chars_per_token > 0
        ):
            raise ValueError("chars_per_token must be a number > 0")
        self.chars_per_token = float(chars_per_token)

    def estimate_input_tokens(self, payload: Any) -> int:
        """Return the estimated input tokens of a payload built by this module (0 otherwise)."""
        if not isinstance(payload, Mapping):
            return 0
        env = payload.get("environment")
        turn = payload.get("input")
        env = env if isinstance(env, Mapping) else {}
        turn = turn if isinstance(turn, Mapping) else {}
        chars = 0
        for text in (env.get("instructions"), turn.get("content")):
            if isinstance(text, str):
                chars += len(text)
        for source in env.get("sources") or ():
            size = source.get("bytes") if isinstance(source, Mapping) else None
            if isinstance(size, int) and not isinstance(size, bool):
                chars += size
        for key in ("history", "tool_results"):
            value = turn.get(key)
            if value:
                chars += len(json.dumps(value, ensure_ascii=False))
        return math.ceil(chars / self.chars_per_token)

    def __repr__(self) -> str:
        return f"PolluxTokenEstimator(chars_per_token={self.chars_per_token})"
