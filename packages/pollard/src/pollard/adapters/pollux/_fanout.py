"""`governed_run_many`: pollux's fan-out with each provider call one pollard step (the seam)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import pollux
from pollard.errors import BudgetExceeded
from pollux import Config, Output, OutputCollection, Source
from pollux.interaction import (
    CallDescription,
    Diagnostics,
    GenerationSettings,
    Metrics,
    ProviderCall,
    describe_call,
    generation_keywords,
    intercept_calls,
)

from ._cache_charges import cache_hold, charge_created_cache
from ._calls import check_config, check_run
from ._identity import canonical, output_from_node, request_identities, result_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pollard import AsyncRun, Run
    from pollux import Environment, ToolDeclaration

__all__ = ["governed_run_many"]


@generation_keywords(place_after={"tools": "tool_choice"})
async def governed_run_many(
    run: AsyncRun | Run,
    prompts: str | Sequence[str | None] | None = None,
    *,
    sources: Sequence[Source] = (),
    config: Config,
    environment: Environment | None = None,
    instructions: str | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    **settings: Unpack[GenerationSettings],
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
        tools: Tool declarations.
        **settings: pollux's generation keywords, each optional (``output=``,
            ``temperature=``, ``max_tokens=``, ...): see
            :class:`~pollux.interaction.GenerationSettings`.

    Returns:
        The `pollux.OutputCollection`, outputs in prompt order.

    Raises:
        BudgetExceeded: The fan-out may create a Gemini ``CachePolicy`` cache and the budget
            cannot afford its worst case (creation plus the whole TTL of storage, held once for
            the fan-out): refused before any provider I/O.
        MissingRecording: Replay mode, and a prompt was not recorded here (raised after the
            other prompts ended; nothing is returned and no fan-in note is written).
        ConfigurationError: Invalid arguments (before anything is recorded).
    """
    run = check_run(run, "governed_run_many")
    config = check_config(config)
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
    # One hold for the shared cache: pollux resolves it once for the whole fan-out.
    async with cache_hold(
        run, governor.payloads[0], config, call.environment, calls=governor.payloads
    ):
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
        self.payloads = request_identities(
            "run_many", config, call.environment, call.inputs, call.requirements
        )
        seen: dict[bytes, int] = {}
        self.attempts: list[int] = []
        for payload in self.payloads:
            key = canonical(payload)
            self.attempts.append(seen.get(key, 0))
            seen[key] = self.attempts[-1] + 1
        self.node_ids: list[str | None] = [None] * len(self.payloads)
        # The shared cache is reported by every prompt's output; it is charged once.
        self.charged_caches: set[str] = set()
        self.ordered = run.mode != "replay" and run.limited
        # A resume (the cursor already has children: an earlier, interrupted fan-out's steps)
        # serves what that fan-out answered and reuses what its cancelled calls were charged.
        # A first fan-out has nothing to resume, so its steps skip those lookups.
        self.resume = run.mode == "record" and bool(run.store.children(run.cursor_id))
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
            return result_of(output)

        try:
            node = await forked.model_call(
                self.payloads[index], fn=fn, attempt=self.attempts[index], resume=self.resume
            )
        except BudgetExceeded as exc:
            self.node_ids[index] = exc.refusal_id
            return _refused(exc)
        finally:
            admitted.set()
        self.node_ids[index] = forked.cursor_id
        if live:
            payload = self.payloads[index]
            await charge_created_cache(
                forked,
                node.id,
                payload["provider"],
                payload["model"],
                live[0],
                charged=self.charged_caches,
            )
            return live[0]
        return output_from_node(node, output=self.requirements.output_schema)


def _refused(error: BudgetExceeded) -> Output:
    """The error Output of a refused prompt, the same whether refused now or replayed."""
    meter = error.meter or "a"
    what = "rate window" if error.reason == "window" else "budget"
    why = ""
    if error.reason == "unbounded":  # a hard meter could not reserve this prompt's worst case
        why = " (its worst case cannot be bounded: no output cap)"
    detail: dict[str, Any] = {
        "type": type(error).__name__,
        "message": f"the {meter} {what} refused this prompt before its provider call{why}",
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
