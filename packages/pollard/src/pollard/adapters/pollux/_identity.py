"""The identity of a bridge node (the model-visible request) and its recorded result."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pollard.errors import PollardError
from pollux import Config, Environment, Input, Output, OutputRequirements, Source, Usage
from pollux.interaction import requirements_from

from ._estimator import remember_media

if TYPE_CHECKING:
    from pollard import Node
    from pollux import ResponseSchemaInput

__all__ = [
    "BRIDGE_VERSION",
    "canonical",
    "output_from_node",
    "request_identities",
    "request_identity",
    "result_of",
]

BRIDGE_VERSION = 1
"""The ``"pollux"`` field of every identity payload; bumped when the payload's meaning changes."""

# pollux provider -> OpenTelemetry ``gen_ai.provider.name`` (read from ``payload["_pollard"]``).
_GEN_AI_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "openrouter": "openrouter",
    "azure_openai": "azure.ai.openai",
    "vertex": "gcp.vertex_ai",
}


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def _json(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{what} must be JSON data to be part of a pollard identity: {exc}"
        ) from None


def _source_identity(source: Source, provider: str, model: str | None) -> dict[str, Any]:
    content = source.cache_identity_hash(provider=provider)
    remember_media(source, content, provider, model)  # for `PolluxTokenEstimator`
    return {
        "type": source.source_type,
        "mime_type": source.mime_type,
        "hash": content,
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


def request_identities(
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
        # The model an estimate prices by: an Azure deployment's, or the config's.
        model = config.pricing_model or config.model
        env["sources"] = [_source_identity(s, provider, model) for s in environment.sources]
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
        if config.pricing_model is not None:
            # The model an Azure deployment serves: the cost meters price the call by it
            # before the answer names its model (`pollard.meters.priced_models`).
            common["_pollard"]["pricing_model"] = config.pricing_model
    common["environment"] = env
    required = _requirements_identity(requirements, provider)
    payloads = []
    for turn in turns:
        payload = {**common, "input": _input_identity(turn)}
        if required:
            payload["requirements"] = required
        payloads.append(payload)
    return payloads


def request_identity(
    api: str,
    config: Config,
    environment: Environment,
    turn: Input,
    requirements: OutputRequirements,
) -> dict[str, Any]:
    return request_identities(api, config, environment, (turn,), requirements)[0]


def result_of(output: Output, *, batch: bool = False) -> dict[str, Any]:
    """The recorded result of a pollux call: the answer, without the facts of its dispatch.

    pollard keeps a node's first result and records a re-run's differing result as a conflict
    (compared by digest), so nothing that differs between identical calls may be recorded: not
    the measured ``metrics.duration_s`` (pollard's own measurement is ``meta["duration_s"]``,
    which `output_from_node` restores), not a quota's wait (``diagnostics.raw["quota"]``) and
    not the id the provider gave this one response
    (``diagnostics.raw["response"]["response_id"]``). A ``batch`` answer is collected exactly
    once and its response id names the batch item, so that id stays.
    """
    data = output.to_jsonable()  # fresh dicts: editing them leaves the Output alone
    del data["metrics"]["duration_s"]
    # Why a prompt cache missed depends on what ran before in this process, not on the answer.
    data.get("diagnostics", {}).pop("cache_miss", None)
    # How long a quota held the call back is a fact of this dispatch, like its duration.
    data.get("diagnostics", {}).pop("quota", None)
    response = data.get("diagnostics", {}).get("response")
    if not batch and isinstance(response, dict):
        response.pop("response_id", None)
    return {"text": output.text, "output": data, "usage": usage_of(output.usage)}


def usage_of(usage: Usage) -> dict[str, Any]:
    """Pollux's `Usage` in the normalized shape every pollard adapter reports.

    pollux counts cache reads and writes inside ``input_tokens``, as pollard's adapters do, so
    the meters price each token once: reads at the read price, writes at the write price, the
    1-hour part of the writes (``cache_write_1h_tokens``) at the 1-hour price. The provider's own
    price (OpenRouter's ``usage.cost``) is kept as exact text in ``provider_cost_usd``, which the
    cost meters charge instead of their computed price. A call whose provider reported no usage
    records no counts (``{"reported": false}``), so pollard marks it ``usage_missing`` instead of
    charging a silent zero.
    """
    if not usage.reported:
        return {"reported": False}
    out: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cached_tokens or 0,
        "cache_write_tokens": usage.cache_write_tokens or 0,
        "reasoning_tokens": usage.reasoning_tokens or 0,
    }
    if usage.cache_write_1h_tokens:
        out["cache_write_5m_tokens"] = usage.cache_write_5m_tokens or 0
        out["cache_write_1h_tokens"] = usage.cache_write_1h_tokens
    if usage.provider_cost_usd is not None:
        out["provider_cost_usd"] = str(usage.provider_cost_usd)
    return out


def output_from_node(node: Node, *, output: ResponseSchemaInput | None = None) -> Output:
    """Rebuild the `pollux.Output` a bridge node recorded.

    ``metrics.duration_s`` is the step's measured time (``node.meta["duration_s"]``; a deferred
    answer has none and keeps 0.0), unless the recorded output holds its own (older recordings).

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
    metrics = data.get("metrics", {})
    if isinstance(metrics, Mapping) and "duration_s" not in metrics:
        # Recorded without it (see result_of): the step's measured time. A node recorded with
        # the duration inside its output (by older bridges) keeps serving that value.
        duration = node.meta.get("duration_s")
        if (
            isinstance(duration, (int, float))
            and type(duration) is not bool
            and math.isfinite(duration)
        ):
            data = {**data, "metrics": {**metrics, "duration_s": duration}}
    data = _structured_in_answer_order(data)
    model = requirements_from({"output": output}).output_schema_model()
    return Output.from_jsonable(data, response_schema=model)


def _structured_in_answer_order(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The recorded output with ``structured`` in the key order the model answered in.

    A store keeps a node's result as canonical JSON, keys sorted, so the structured value comes
    back reordered while the answer's text is verbatim. When the text parses to the same value,
    that parse (the model's order) is served: a replay prints byte for byte what the call did.
    """
    structured = data.get("structured")
    text = data.get("text")
    if not isinstance(structured, (dict, list)) or not isinstance(text, str):
        return data
    try:
        parsed = json.loads(text)
    except ValueError:
        return data
    return {**data, "structured": parsed} if parsed == structured else data
