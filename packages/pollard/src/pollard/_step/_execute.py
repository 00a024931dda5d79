"""Execution: call the step function once, merge a stream, measure, and compute the charges."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pollard._core._amounts import charges_meta, plain_map
from pollard._core._ledger import utc_now_iso
from pollard._core._node import Node
from pollard._core._usage import TOKEN_FIELDS, unusable_counts
from pollard._step import _settle as settle
from pollard._step._admission import Estimates, net_estimates
from pollard._step._effects import END, CloseStream, Emit, Invoke, NextChunk, Step
from pollard._step._protocols import Readings
from pollard._step._resume import net_charges

if TYPE_CHECKING:
    from pollard._step._state import CursorState

__all__ = ["execute", "merge_delta"]


def execute(
    state: CursorState,
    node: Node,
    fn: Callable[[Any], Any],
    arg: Any,
    estimates: Estimates,
    reservation: str | None,
    on_delta: Callable[[Any], Any] | None,
    keep_chunks: bool,
    extra_meta: Mapping[str, Any] | None,
    credit: Mapping[str, Decimal] | None = None,
) -> Step:
    """Run ``fn(arg)`` for an admitted step and settle it; a failure is recorded, then raised.

    ``credit`` (a resumed step) is what the call's cancelled dispatches were charged: the
    answer, or another cancellation, is charged only beyond it (`pollard._step._resume`).
    """
    rt = state.rt
    kind = node.kind.value
    meta: dict[str, Any] = {"created_at": utc_now_iso()}
    started = time.perf_counter()
    try:
        if rt.measurers:
            with contextlib.ExitStack() as stack:
                readers = [stack.enter_context(m.measure()) for m in rt.measurers]
                raw = yield Invoke(fn, arg)
                if type(raw) is dict:  # the common result: no stream to merge
                    result = dict(raw)
                else:
                    result = yield from _collect(kind, raw, on_delta, keep_chunks)
                duration = time.perf_counter() - started
            for reader in readers:
                if isinstance(reader, Readings):
                    meta.update(reader.readings())
        else:
            raw = yield Invoke(fn, arg)
            if type(raw) is dict:  # the common result: no stream to merge
                result = dict(raw)
            else:
                result = yield from _collect(kind, raw, on_delta, keep_chunks)
            duration = time.perf_counter() - started
        meta["duration_s"] = round(duration, 6)
        usage = result.get("usage")
        if type(usage) is dict or isinstance(usage, Mapping):  # a dict: no ABC check
            meta["usage"] = usage
            invalid = unusable_counts(usage)
            if invalid:
                # The meters charge an unusable count like a missing one; say so, never a
                # silent zero.
                meta["usage_invalid"] = invalid
                if kind == "model_call":
                    meta["usage_missing"] = True
            elif kind == "model_call" and all(usage.get(key) is None for key in TOKEN_FIELDS):
                # A usage mapping without one field the meters read (``{}``, or a raw shape such
                # as Chat Completions' ``prompt_tokens``) charges nothing, as no usage does.
                meta["usage_missing"] = True
        elif kind == "model_call":
            meta["usage_missing"] = True
        if extra_meta:
            meta.update(extra_meta)
        meta["writer"] = rt.writer  # the node's writer holds it (one writer per node)
        amounts = settle.charges(state, kind, node.payload, result, meta, estimates=None)
        if credit:
            amounts, used = net_charges(amounts, credit)
            meta["credited"] = plain_map(used)
        for meter in rt.annotators:
            patch = meter.settle_meta(kind, node.payload, result, meta)
            if patch:
                meta.update(patch)
        meta.update(charges_meta(amounts))
        final = node.with_result(result, meta)
    except GeneratorExit:
        if reservation is not None:
            rt.store.release(reservation)
        raise
    except BaseException as exc:
        duration = time.perf_counter() - started
        if isinstance(exc, Exception):
            yield from settle.record_failure(state, node, exc, estimates, reservation, duration)
            raise
        if credit:  # cancelled again: charged only beyond what the earlier ones were
            estimates = net_estimates(estimates, credit)
        try:
            yield from settle.record_failure(state, node, exc, estimates, reservation, duration)
        except Exception:
            # A cancellation (or interrupt) stays one even when it cannot be recorded, for
            # example because the runtime closed its store meanwhile; the recording error
            # rides along as the context.
            raise exc  # noqa: B904
        raise
    return (yield from settle.settle(state, final, amounts, reservation))


def _collect(
    kind: str,
    raw: Any,
    on_delta: Callable[[Any], Any] | None,
    keep_chunks: bool,
) -> Step:
    """The step result: a dict as is, a merged stream, or a tool's plain value as ``{"value"}``."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is not None and (hasattr(raw, "__next__") or hasattr(raw, "__anext__")):
        result: dict[str, Any] = {}
        chunks: list[Any] = []
        try:
            while True:
                chunk = yield NextChunk(raw)
                if chunk is END:
                    break
                if not isinstance(chunk, Mapping):
                    raise TypeError(f"stream chunks must be dicts, got {type(chunk).__name__}")
                if on_delta is not None:
                    yield Emit(on_delta, chunk)
                if keep_chunks:
                    chunks.append(json.loads(json.dumps(chunk)))
                if "result" in chunk and isinstance(chunk["result"], Mapping):
                    result = json.loads(json.dumps(chunk["result"]))
                elif "delta" in chunk and isinstance(chunk["delta"], Mapping):
                    merge_delta(result, chunk["delta"])
                else:
                    merge_delta(result, chunk)
        except GeneratorExit:
            raise
        except BaseException:
            # Stop the provider stream now rather than whenever it is garbage collected.
            with contextlib.suppress(Exception):
                yield CloseStream(raw)
            raise
        if keep_chunks:
            result["chunks"] = chunks
        return result
    if kind == "model_call":
        raise TypeError(
            "a model function must return a dict or an iterator of chunk dicts, "
            f"not {type(raw).__name__}"
        )
    if isinstance(raw, (list, str, int, float, bool)) or raw is None:
        return {"value": raw}  # tool results are stored as objects
    raise TypeError(f"a tool function returned {type(raw).__name__}, which is not JSON")


def merge_delta(target: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """Deep-merge a stream delta: strings concatenate, lists append, dicts recurse."""
    stack: list[tuple[dict[str, Any], Mapping[str, Any]]] = [(target, delta)]
    while stack:
        into, patch = stack.pop()
        for key, value in patch.items():
            current = into.get(key)
            if isinstance(current, str) and isinstance(value, str):
                into[key] = current + value
            elif isinstance(current, list) and isinstance(value, list):
                current.extend(value)
            elif isinstance(current, dict) and isinstance(value, Mapping):
                stack.append((current, value))
            else:
                into[key] = (
                    json.loads(json.dumps(value)) if isinstance(value, (dict, list)) else value
                )
