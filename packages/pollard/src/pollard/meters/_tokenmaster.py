"""``TokenmasterMeter``: token charges plus tokenmaster state (``pollard[tokenmaster]``)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any

from pollard._core._usage import usable_count

__all__ = ["TokenmasterMeter"]

_INSTALL = 'TokenmasterMeter needs the tokenmaster extra: pip install "pollard[tokenmaster]"'


def _chat_usage(usage: Mapping[str, Any]) -> Mapping[str, Any]:
    """Read OpenAI Chat Completions usage (``prompt_tokens``/``completion_tokens``) as pollard's.

    ``prompt_tokens`` includes ``prompt_tokens_details.cached_tokens`` and ``completion_tokens``
    includes ``completion_tokens_details.reasoning_tokens``, as pollard's own shape does.
    """
    if "input_tokens" in usage or "output_tokens" in usage:
        return usage
    if "prompt_tokens" not in usage and "completion_tokens" not in usage:
        return usage
    shaped: dict[str, Any] = {
        "input_tokens": usage.get("prompt_tokens"),
        "output_tokens": usage.get("completion_tokens"),
    }
    prompt = usage.get("prompt_tokens_details")
    if isinstance(prompt, Mapping) and "cached_tokens" in prompt:
        shaped["cache_read_tokens"] = prompt["cached_tokens"]
    completion = usage.get("completion_tokens_details")
    if isinstance(completion, Mapping) and "reasoning_tokens" in completion:
        shaped["reasoning_tokens"] = completion["reasoning_tokens"]
    return shaped


def _turn(usage: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    """Map a result's usage onto tokenmaster's turn fields (which count each token once).

    Two usage shapes exist. Anthropic's raw shape reports ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` beside an ``input_tokens`` that excludes them. pollard's
    adapters report ``input_tokens`` including cached tokens and ``output_tokens`` including
    reasoning, with ``cache_read_tokens``, ``cache_write_tokens`` and ``reasoning_tokens`` as
    breakdowns; those are taken out of the totals here so nothing is counted twice.
    """

    def count(key: str) -> int:
        # an unusable count (a string, a float, a negative int...) is charged like a missing one
        value = usable_count(shaped.get(key))
        return 0 if value is None else value

    shaped = _chat_usage(usage)
    input_tokens, output_tokens = count("input_tokens"), count("output_tokens")
    reasoning = count("reasoning_tokens")
    if "cache_read_input_tokens" in shaped or "cache_creation_input_tokens" in shaped:
        cache_read = count("cache_read_input_tokens")
        cache_write = count("cache_creation_input_tokens")
    else:
        cache_read, cache_write = count("cache_read_tokens"), count("cache_write_tokens")
        input_tokens = max(input_tokens - cache_read - cache_write, 0)
        output_tokens = max(output_tokens - reasoning, 0)
    turn: dict[str, Any] = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": reasoning,
    }
    if model:
        turn["model_id"] = model
    return turn


class TokenmasterMeter:
    """Charge per-call token volume and record tokenmaster state and advice on each model call.

    The charge (meter name ``"tokens"``) is the context total of the call: input + cache read +
    cache write + output + reasoning tokens, from the usage your model client returns (pollard's
    shape, Anthropic's raw shape, or Chat Completions' ``prompt_tokens``/``completion_tokens``).
    After each executed model call the usage is recorded into a ``tokenmaster.Meter`` and
    ``node.meta["tokenmaster"]`` receives ``{"turn", "state", "advice", "task"}``. Replayed steps
    are not recorded into tokenmaster again.

    Args:
        model: A tokenmaster model id (for ``tokenmaster.Meter.for_model``), e.g.
            ``"anthropic:claude-sonnet-4-6"``. When neither ``model`` nor ``meter`` is given
            (as pollard 0.8 allows), the first executed model call's ``payload["model"]`` picks
            the profile; a model tokenmaster does not know is recorded as
            ``meta["tokenmaster"] = {"unavailable": reason}`` and the charge still applies.
        meter: An existing ``tokenmaster.Meter`` to record into.
        reserved_output: Output tokens tokenmaster keeps free in its headroom.
        expected_remaining_turns: Task hint passed to the advisor.
        task: A ``tokenmaster.TaskContext`` (overrides ``expected_remaining_turns``).
        policy: A tokenmaster advisor policy.
        name: The meter name.

    Raises:
        ImportError: Naming ``pip install "pollard[tokenmaster]"`` when tokenmaster is missing.
    """

    precheck_is_estimate = False

    def __init__(
        self,
        model: str | None = None,
        *,
        meter: Any = None,
        reserved_output: int = 0,
        expected_remaining_turns: int | None = None,
        task: Any = None,
        policy: Any = None,
        name: str = "tokens",
    ) -> None:
        try:
            tokenmaster = importlib.import_module("tokenmaster")
        except ImportError as exc:
            raise ImportError(_INSTALL) from exc
        if meter is None and model is not None:
            meter = tokenmaster.Meter.for_model(model, reserved_output=reserved_output)
        if task is None and expected_remaining_turns is not None:
            task = tokenmaster.TaskContext(expected_remaining_turns=expected_remaining_turns)
        self.name = name
        self.model = model
        self.meter = meter
        self.task = task
        self.policy = policy
        self._reserved_output = reserved_output
        self._tokenmaster = tokenmaster

    def charge(self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]) -> int:
        """Return the call's token volume (model calls only)."""
        usage = result.get("usage") if isinstance(result, Mapping) else None
        if kind != "model_call" or not isinstance(usage, Mapping):
            return 0
        turn = _turn(usage, None)
        return sum(value for key, value in turn.items() if key != "model_id")

    def precheck_estimate(self, kind: str, payload: Any) -> int | None:
        """Return None (tokenmaster state comes from reported usage, not from prompts)."""
        return None

    def settle_meta(
        self, kind: str, payload: Any, result: Any, meta: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Record an executed model call into tokenmaster; return the meta to store."""
        usage = result.get("usage") if isinstance(result, Mapping) else None
        if kind != "model_call" or not isinstance(usage, Mapping):
            return None
        model = payload.get("model") if isinstance(payload, Mapping) else None
        if self.meter is None:
            try:
                self.meter = self._tokenmaster.Meter.for_model(
                    str(model), reserved_output=self._reserved_output
                )
            except Exception as exc:  # the call already ran: record why, never fail it
                return {"tokenmaster": {"unavailable": f"{type(exc).__name__}: {exc}"}}
        turn = self.meter.record(_turn(usage, model if isinstance(model, str) else self.model))
        advice = self.meter.advise(self.task, policy=self.policy)
        record = {
            "turn": turn.to_dict(),
            "state": self.meter.state().to_dict(),
            "advice": advice.to_dict(),
            "task": None if self.task is None else self.task.to_dict(),
        }
        # Keep the stored form plain JSON (tokenmaster dicts may hold enums or tuples).
        return {"tokenmaster": json.loads(json.dumps(record, default=str))}

    def __repr__(self) -> str:
        return f"TokenmasterMeter(model={self.model!r}, name={self.name!r})"
