"""The step core: ONE state machine behind `Run` (sync) and `AsyncRun` (async).

Every operation is a generator that yields *effects* (call your function, pull a stream chunk,
deliver a callback, do store I/O) and returns its value. The sync shell runs effects inline; the
async shell awaits awaitables, iterates async streams and can move store I/O off the event loop.
So the step logic (replay lookup, precheck, reserve, execute, settle, record) exists once.

Stable primitives for governance (``pollard._governance``) and other internal callers, all
on `RunState` and all generators to be driven with ``yield from``:

* ``state.step(kind, payload, fn, arg, *, attempt=0, on_delta=None, keep_chunks=False,
  meta=None)`` runs one normal step: replay/hybrid lookup, budget precheck and reservation,
  ``fn(arg)``, settlement and recording. Returns the node.
* ``state.refuse(payload, error)`` records a refusal node with ``payload`` under the cursor, moves
  the cursor onto it and raises ``error(refusal_id)``. In replay mode the refusal must already be
  recorded (it is never written).
* ``state.record_dry_run(kind, payload, *, attempt=0, charges=None, meta=None)`` records a node
  without calling any handler (``meta.dry_run = True``, no result; charges default to
  ``{"steps": 1}``). In hybrid/replay a recorded dry-run node is served instead.
* ``state.lookup(kind, payload, attempt=0)`` returns the recorded node for a step (hybrid/replay)
  or None, without side effects.

The registered branch of ``tool_call`` and ``confirm`` is delegated to
``pollard._governance._firewall.tool_call(state, name, args, *, version, attempt)`` and
``pollard._governance._firewall.confirm(state, token)``, both generators of the same kind.
When a runtime has a registry, ``bind_root(state)`` runs once per run after the root exists.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

from pollard._core._ledger import (
    ZERO,
    BudgetClaim,
    Shortfall,
    WindowClaim,
    WindowEvent,
    decimal_text,
    to_decimal,
    utc_now_iso,
)
from pollard._core._node import Node, NodeKind
from pollard._step._effects import END as _END
from pollard._step._effects import (
    CloseStream,
    Effect,
    Emit,
    Invoke,
    Io,
    NextChunk,
    Step,
    drive_async,
    drive_sync,
    io,
)
from pollard._step._lease import LeaseKeeper
from pollard.errors import (
    BudgetExceeded,
    IntegrityError,
    MissingRecording,
    PolicyViolation,
    PollardError,
)

if TYPE_CHECKING:
    from pollard._core._store import Store

__all__ = [
    "ARGS",
    "PAYLOAD",
    "Effect",
    "Emit",
    "Invoke",
    "Io",
    "NextChunk",
    "RunState",
    "RuntimeCore",
    "Scope",
    "drive_async",
    "drive_sync",
    "io",
]

PAYLOAD: Any = object()
"""``arg`` sentinel for `RunState.step`: call ``fn`` with the payload the caller passed."""
ARGS: Any = object()
"""``arg`` sentinel for `RunState.step`: call ``fn`` with ``payload["args"]``."""


# -- runtime-wide state ----------------------------------------------------------------------------


@dataclass(slots=True)
class Scope:
    """A budget scope: the node it is anchored at and its limits."""

    id: str
    limits: dict[str, Decimal]


class RuntimeCore:
    """What every run of one runtime shares: store, meters, mode, governance settings, caches."""

    def __init__(
        self,
        store: Store,
        *,
        meters: list[Any],
        mode: str,
        registry: Any,
        policies: tuple[Any, ...],
        dry_run: bool,
        on_node: Callable[[Node], Any] | None,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.meters = meters
        self.meter_names = frozenset(m.name for m in meters)
        self.windows = [m for m in meters if _is_window(m)]
        self.measurers = [m for m in meters if callable(getattr(m, "measure", None))]
        self.annotators = [m for m in meters if callable(getattr(m, "settle_meta", None))]
        self.estimating = [(m, bool(getattr(m, "precheck_is_estimate", False))) for m in meters]
        self.mode = mode
        self.registry = registry
        self.policies = policies
        self.dry_run = dry_run
        self.on_node = on_node
        self.lease_seconds = lease_seconds
        self.verified: set[str] = set()
        self.keeper = LeaseKeeper(store, lease_seconds)
        self._reserving = threading.Condition()
        self._closing = False  # set by close(release=True): reserves are refused
        self._in_flight = 0  # reserve calls running (close waits for them)
        self.pending: dict[str, Any] = {}  # governance: pending confirmations by token

    def reserve(self, claims: Any, windows: Any, *, lease_seconds: float) -> Any:
        """``store.reserve`` for a step; a reservation is tracked (and renewed) at once.

        Tracking starts in the same call (possibly a worker thread), so `close` sees every
        reservation a step holds, even one whose step was cancelled meanwhile.
        """
        with self._reserving:
            if self._closing:
                raise PollardError(
                    "the runtime is closed (its store is closing)",
                    hint="create a new runtime to run more steps",
                )
            self._in_flight += 1
        try:
            admission = self.store.reserve(claims, windows, lease_seconds=lease_seconds)
            if admission.reservation_id is not None:
                self.keeper.add(admission.reservation_id)
            return admission
        finally:
            with self._reserving:
                self._in_flight -= 1
                self._reserving.notify_all()

    def release_admission(self, admission: Any) -> None:
        """Release the reservation of an admission nobody will use (a cancelled step)."""
        rid = getattr(admission, "reservation_id", None)
        if rid is not None and self.keeper.remove(rid):  # not already released by close()
            self.store.release(rid)

    def close(self, *, release: bool) -> None:
        """Stop reserving and renewing; with ``release``, release reservations still held.

        Waits for reservations being made in other threads. ``release`` is for a store the
        runtime is about to close: steps still running can no longer settle there, so their
        holds are dropped now instead of lingering until their leases expire.
        """
        with self._reserving:
            # A reserve queued for a worker thread but not yet started must not slip in
            # between the drain below and the store's close: refuse it.
            self._closing = release
            self._reserving.wait_for(lambda: self._in_flight == 0, timeout=60)
            held = self.keeper.drain()
        self.keeper.close()
        if release:
            for rid in held:
                with contextlib.suppress(Exception):  # best effort: the lease still expires
                    self.store.release(rid)

    def verify_ancestry(self, node: Node) -> None:
        """Verify a node and its unverified ancestors (cached, so replay stays linear)."""
        chain: list[str] = []
        current: Node | None = node
        while current is not None and current.id not in self.verified:
            current.check()
            chain.append(current.id)
            if current.parent is None:
                break
            parent = self.store.find(current.parent)
            if parent is None:
                raise IntegrityError(
                    f"node {current.id} has a parent {current.parent} that is not stored",
                    current.id,
                )
            current = parent
        self.verified.update(chain)


def _is_window(meter: Any) -> bool:
    return hasattr(meter, "window_seconds") and callable(getattr(meter, "key", None))


def _digest(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()


def _summary(kind: str, payload: Any, canonical: bytes) -> str:
    digest = _digest(canonical)
    if isinstance(payload, Mapping):
        if kind == "model_call" and isinstance(payload.get("model"), str):
            return f"model_call model={payload['model']} digest={digest}"
        if kind == "tool_call" and isinstance(payload.get("tool"), str):
            version = payload.get("version")
            tool = payload["tool"] + (f"@{version}" if isinstance(version, str) else "")
            return f"tool_call tool={tool} digest={digest}"
    return f"{kind} digest={digest}"


def _diff_paths(left: Any, right: Any, limit: int = 3) -> list[str]:
    """Return up to ``limit`` JSON paths where two values differ (iterative)."""
    out: list[str] = []
    stack: list[tuple[str, Any, Any]] = [("$", left, right)]
    while stack and len(out) < limit:
        path, a, b = stack.pop()
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), reverse=True):
                if key not in a or key not in b:
                    out.append(f"{path}.{key}")
                else:
                    stack.append((f"{path}.{key}", a[key], b[key]))
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"{path} (length {len(b)} recorded, {len(a)} now)")
            for index in reversed(range(min(len(a), len(b)))):
                stack.append((f"{path}[{index}]", a[index], b[index]))
        elif type(a) is not type(b) or a != b:
            out.append(path)
    return out[:limit]


def _merge_delta(target: dict[str, Any], delta: Mapping[str, Any]) -> None:
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


class RunState:
    """The cursor and accounting of one run (or branch); shared by the sync and async shells.

    Attributes:
        rt: The runtime core.
        label: The run label.
        root_id: The root node id.
        cursor_id: The node new steps attach to.
        depth: The cursor depth (the root is 0).
        scopes: Budget scopes, outermost first (the root scope is always first).
        spent: Charges settled through this run object, by meter.
        avoided: Charges served from recordings instead of executed, by meter.
    """

    def __init__(
        self,
        rt: RuntimeCore,
        label: str,
        root_id: str,
        cursor_id: str,
        depth: int,
        scopes: tuple[Scope, ...],
    ) -> None:
        self.rt = rt
        self.label = label
        self.root_id = root_id
        self.cursor_id = cursor_id
        self.depth = depth
        self.scopes = scopes
        self.spent: dict[str, Decimal] = {}
        self.avoided: dict[str, Decimal] = {}
        self.branch_counts: dict[str, int] = {}
        # The runtime object that opened this run: holding it keeps a runtime created inline
        # (``Runtime("runs.db").run(...)``) and its store open for as long as the run is used.
        self.owner: Any = None

    @property
    def store(self) -> Store:
        """The runtime's store."""
        return self.rt.store

    @property
    def mode(self) -> str:
        """``record``, ``hybrid`` or ``replay``."""
        return self.rt.mode

    # -- shared helpers ------------------------------------------------------------------------

    def _move(self, node: Node) -> None:
        self.cursor_id = node.id
        self.depth += 1

    def _stored(self, node: Node) -> Step:
        if self.rt.on_node is not None:
            yield Emit(self.rt.on_node, node, swallow=True)

    def _scope_ids(self) -> list[str]:
        return [scope.id for i, scope in enumerate(self.scopes) if i == 0 or scope.limits]

    def _estimates(self, kind: str, payload: Any) -> dict[str, tuple[Decimal | None, bool]]:
        estimates: dict[str, tuple[Decimal | None, bool]] = {}
        for meter, approx in self.rt.estimating:
            raw = meter.precheck_estimate(kind, payload)
            estimates[meter.name] = (None if raw is None else to_decimal(raw), approx)
        return estimates

    def _depth_shortfall(self) -> Shortfall | None:
        for scope in self.scopes:
            limit = scope.limits.get("depth")
            if limit is not None and self.depth + 1 > limit:
                return Shortfall(
                    "budget",
                    scope.id,
                    "depth",
                    Decimal(1),
                    limit - self.depth,
                    limit,
                    Decimal(self.depth),
                )
        return None

    def _claims(
        self, estimates: Mapping[str, tuple[Decimal | None, bool]]
    ) -> tuple[list[BudgetClaim], list[WindowClaim]]:
        claims = [
            BudgetClaim(scope.id, name, limit, *estimates.get(name, (None, False)))
            for scope in self.scopes
            for name, limit in sorted(scope.limits.items())
            if name != "depth"
        ]
        windows = [
            WindowClaim(
                meter.key(self.root_id),
                meter.name,
                meter.limit,
                meter.window_seconds,
                *estimates.get(meter.name, (None, False)),
            )
            for meter in self.rt.windows
        ]
        return claims, windows

    def _refuse_budget(self, short: Shortfall, kind: str, canonical: bytes) -> Step:
        remaining = short.remaining if short.remaining > 0 else ZERO
        payload: dict[str, Any] = {
            "reason": short.reason,
            "meter": short.meter,
            "requested": decimal_text(short.requested),
            "remaining": decimal_text(remaining),
            "blocked_kind": kind,
            "blocked_payload_digest": _digest(canonical),
        }
        if short.approximate and short.requested > 0:
            payload["estimated"] = "true"
        if short.window_seconds is not None:
            seconds = short.window_seconds
            payload["window_seconds"] = (
                int(seconds) if float(seconds).is_integer() else decimal_text(to_decimal(seconds))
            )
        meta = {
            "limit": decimal_text(short.limit),
            "spent": decimal_text(short.spent),
            "scope": short.scope,
        }
        what = "window" if short.reason == "window" else "budget"
        message = (
            f"{short.meter} {what} refused a {kind}: requested {payload['requested']}, "
            f"remaining {payload['remaining']} of {meta['limit']}"
        )

        def error(refusal_id: str) -> PollardError:
            return BudgetExceeded(message, refusal_id, meter=short.meter, reason=short.reason)

        yield from self.refuse(payload, error, meta=meta)

    # -- primitives ----------------------------------------------------------------------------

    def refuse(
        self,
        payload: Mapping[str, Any],
        error: Callable[[str], PollardError],
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> Generator[Effect, Any, NoReturn]:
        """Record a refusal under the cursor, move onto it and raise ``error(refusal_id)``."""
        node = Node.create(
            NodeKind.REFUSAL,
            self.cursor_id,
            dict(payload),
            meta={"created_at": utc_now_iso(), **(meta or {})},
        )
        if self.rt.mode == "replay":
            if not (yield Io(self.rt.store.exists, (node.id,))):
                raise MissingRecording(
                    f"replay: the recorded run has no refusal {node.id} at this point "
                    f"(payload {_diff_summary(payload)})",
                    node.id,
                    f"refusal digest={_digest(node.canonical_payload or b'')}",
                )
        elif (yield Io(self.rt.store.put, (node,))):
            yield from self._stored(node)
        self._move(node)
        raise error(node.id)

    def lookup(self, kind: str, payload: Any, attempt: int = 0) -> Step:
        """Return the recorded node for a step in hybrid/replay mode, else None (no effects)."""
        if self.rt.mode == "record":
            return None
        node = Node.create(kind, self.cursor_id, payload, attempt=attempt)
        return (yield Io(self.rt.store.find, (node.id,)))

    def _serve(self, found: Node, on_delta: Callable[[Any], Any] | None) -> Step:
        yield Io(self.rt.verify_ancestry, (found,))
        charges = {
            name: to_decimal(value) for name, value in (found.meta.get("charges") or {}).items()
        }
        for name, amount in charges.items():
            self.avoided[name] = self.avoided.get(name, ZERO) + amount
        if self.rt.mode == "hybrid" and charges:
            previous = found.meta.get("avoided") or {}
            merged = {
                name: decimal_text(to_decimal(previous.get(name, 0)) + charges.get(name, ZERO))
                for name in sorted(set(previous) | set(charges))
            }
            found = yield Io(
                self.rt.store.update_meta,
                (
                    found.id,
                    {"avoided": merged},
                ),
            )
        self._move(found)
        if on_delta is not None and isinstance(found.result, Mapping):
            for chunk in found.result.get("chunks") or ():
                yield Emit(on_delta, chunk)
        return found

    def _replay_miss(self, node: Node) -> Step:
        kind = node.kind.value
        canonical = node.canonical_payload or b""
        siblings: list[Node] = yield Io(self.rt.store.children, (node.parent,))
        digest = _digest(canonical)
        for sibling in siblings:
            if (
                sibling.kind is NodeKind.REFUSAL
                and isinstance(sibling.payload, Mapping)
                and sibling.payload.get("blocked_payload_digest") == digest
                and sibling.payload.get("blocked_kind") == kind
            ):
                self._move(sibling)
                reason = sibling.payload.get("reason")
                if reason == "policy":
                    raise PolicyViolation(
                        f"replay: recorded policy refusal: {sibling.payload.get('detail')}",
                        sibling.id,
                        detail=str(sibling.payload.get("detail")),
                    )
                raise BudgetExceeded(
                    f"replay: recorded {reason} refusal on {sibling.payload.get('meter')}",
                    sibling.id,
                    meter=str(sibling.payload.get("meter")),
                    reason=str(reason),
                )
        same = [s for s in siblings if s.kind is node.kind]
        detail = "no recorded sibling of the same kind"
        if same:
            best = min(
                same,
                key=lambda s: (len(_diff_paths(node.payload, s.payload, 50)), s.attempt, s.id),
            )
            paths = _diff_paths(node.payload, best.payload)
            if paths:
                detail = f"nearest recorded sibling {best.id[:12]} differs at {', '.join(paths)}"
            else:
                detail = (
                    f"nearest recorded sibling {best.id[:12]} has the same payload with "
                    f"attempt {best.attempt} (this call: attempt {node.attempt})"
                )
        summary = _summary(kind, node.payload, canonical)
        raise MissingRecording(
            f"replay: no recording for {summary} under {node.parent}; {detail}",
            node.id,
            summary,
        )

    def _fresh(self, node: Node) -> Step:
        """Return ``node`` with the first attempt >= its own that is not stored yet."""
        while (yield Io(self.rt.store.exists, (node.id,))):
            node = Node.create(
                node.kind,
                node.parent,
                node.payload,
                attempt=node.attempt + 1,
                result=node.result,
                meta=node.meta,
            )
        return node

    def step(
        self,
        kind: str | NodeKind,
        payload: Any,
        fn: Callable[[Any], Any],
        arg: Any = PAYLOAD,
        *,
        attempt: int = 0,
        on_delta: Callable[[Any], Any] | None = None,
        keep_chunks: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> Step:
        """Run one normal step (see the module docstring); ``fn(arg)`` is called once."""
        rt = self.rt
        node = Node.create(kind, self.cursor_id, payload, attempt=attempt)
        kind = node.kind.value
        # fn gets the caller's own object: the identity was snapshotted above, so nothing fn or
        # the caller does to it later can change the recorded payload.
        if arg is PAYLOAD:
            arg = payload
        elif arg is ARGS:
            arg = payload.get("args") if isinstance(payload, Mapping) else None
        if rt.mode != "record":
            found: Node | None = yield Io(rt.store.find, (node.id,))
            # A recorded dry run (no result) stands in for the step only when this runtime is
            # also dry-running, or in replay (which can never execute); hybrid executes it.
            if found is not None and (
                found.result is not None
                or (found.meta.get("dry_run") and (rt.dry_run or rt.mode == "replay"))
            ):
                return (yield from self._serve(found, on_delta))
            if rt.mode == "replay":
                yield from self._replay_miss(node)
            # Hybrid: the id may exist without a result (a dry-run twin); record mode needs no
            # probe, because commit refuses an existing id and the next attempt is used.
            node = yield from self._fresh(node)
        canonical = node.canonical_payload or b""
        # Precheck and reserve: one atomic store call applies the ledger rule to every scope.
        short = self._depth_shortfall()
        if short is not None:
            yield from self._refuse_budget(short, kind, canonical)
        estimates = self._estimates(kind, node.payload)
        claims, windows = self._claims(estimates)
        reservation: str | None = None
        if claims or windows:
            # If the step is cancelled while an offloaded reserve runs, the driver waits for it
            # and hands the admission to ``undo``, so no reservation outlives the step.
            admission = yield Io(
                rt.reserve,
                (claims, windows),
                {"lease_seconds": rt.lease_seconds},
                undo=rt.release_admission,
            )
            if admission.shortfall is not None:
                yield from self._refuse_budget(admission.shortfall, kind, canonical)
            reservation = admission.reservation_id
        try:
            return (
                yield from self._execute(
                    node, fn, arg, estimates, reservation, on_delta, keep_chunks, meta
                )
            )
        finally:
            if reservation is not None:
                rt.keeper.remove(reservation)

    def _execute(
        self,
        node: Node,
        fn: Callable[[Any], Any],
        arg: Any,
        estimates: Mapping[str, tuple[Decimal | None, bool]],
        reservation: str | None,
        on_delta: Callable[[Any], Any] | None,
        keep_chunks: bool,
        extra_meta: Mapping[str, Any] | None,
    ) -> Step:
        rt = self.rt
        kind = node.kind.value
        meta: dict[str, Any] = {"created_at": utc_now_iso()}
        started = time.perf_counter()
        try:
            readers: list[Any] = []
            if rt.measurers:
                with contextlib.ExitStack() as stack:
                    readers = [stack.enter_context(m.measure()) for m in rt.measurers]
                    raw = yield Invoke(fn, arg)
                    result = yield from self._collect(kind, raw, on_delta, keep_chunks)
                    duration = time.perf_counter() - started
            else:
                raw = yield Invoke(fn, arg)
                result = yield from self._collect(kind, raw, on_delta, keep_chunks)
                duration = time.perf_counter() - started
            for reader in readers:
                readings = getattr(reader, "readings", None)
                if callable(readings):
                    meta.update(readings())
            meta["duration_s"] = round(duration, 6)
            if isinstance(result, Mapping) and isinstance(result.get("usage"), Mapping):
                meta["usage"] = result["usage"]
            elif kind == "model_call":
                meta["usage_missing"] = True
            if extra_meta:
                meta.update(extra_meta)
            charges = self._charges(kind, node.payload, result, meta, estimates=None)
            for meter in rt.annotators:
                patch = meter.settle_meta(kind, node.payload, result, meta)
                if patch:
                    meta.update(patch)
            meta["charges"] = {name: decimal_text(v) for name, v in sorted(charges.items())}
            final = node.with_result(result, meta)
        except GeneratorExit:
            if reservation is not None:
                rt.store.release(reservation)
            raise
        except BaseException as exc:
            duration = time.perf_counter() - started
            if isinstance(exc, Exception):
                yield from self._record_failure(node, exc, estimates, reservation, duration)
                raise
            try:
                yield from self._record_failure(node, exc, estimates, reservation, duration)
            except Exception:
                # A cancellation (or interrupt) stays one even when it cannot be recorded, for
                # example because the runtime closed its store meanwhile; the recording error
                # rides along as the context.
                raise exc  # noqa: B904
            raise
        final = yield from self._settle(final, charges, reservation)
        return final

    def _collect(
        self,
        kind: str,
        raw: Any,
        on_delta: Callable[[Any], Any] | None,
        keep_chunks: bool,
    ) -> Step:
        if isinstance(raw, Mapping):
            result: Any = dict(raw)
        elif raw is not None and (hasattr(raw, "__next__") or hasattr(raw, "__anext__")):
            result = {}
            chunks: list[Any] = []
            try:
                while True:
                    chunk = yield NextChunk(raw)
                    if chunk is _END:
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
                        _merge_delta(result, chunk["delta"])
                    else:
                        _merge_delta(result, chunk)
            except GeneratorExit:
                raise
            except BaseException:
                # Stop the provider stream now rather than whenever it is garbage collected.
                with contextlib.suppress(Exception):
                    yield CloseStream(raw)
                raise
            if keep_chunks:
                result["chunks"] = chunks
        elif kind == "model_call":
            raise TypeError(
                "a model function must return a dict or an iterator of chunk dicts, "
                f"not {type(raw).__name__}"
            )
        elif isinstance(raw, (list, str, int, float, bool)) or raw is None:
            result = {"value": raw}  # tool results are stored as objects
        else:
            raise TypeError(f"a tool function returned {type(raw).__name__}, which is not JSON")
        return result

    def _charges(
        self,
        kind: str,
        payload: Any,
        result: Any,
        meta: Mapping[str, Any],
        *,
        estimates: Mapping[str, tuple[Decimal | None, bool]] | None,
    ) -> dict[str, Decimal]:
        charges: dict[str, Decimal] = {}
        for meter in self.rt.meters:
            amount: Decimal | None = None
            if estimates is not None:
                amount = estimates.get(meter.name, (None, False))[0]
            if amount is None:
                try:
                    amount = to_decimal(meter.charge(kind, payload, result, meta))
                except Exception:
                    if estimates is None:
                        raise
                    amount = ZERO  # a failed step is charged what is known
            if amount != 0:
                charges[meter.name] = amount
        return charges

    def _settle(self, final: Node, charges: Mapping[str, Decimal], reservation: str | None) -> Step:
        events = [
            WindowEvent(meter.key(self.root_id), meter.name, charges[meter.name])
            for meter in self.rt.windows
            if charges.get(meter.name, ZERO) > 0
        ]
        scopes = self._scope_ids()
        while not (
            yield Io(
                self.rt.store.commit,
                (final,),
                {
                    "scopes": scopes,
                    "charges": charges,
                    "windows": events,
                    "reservation_id": reservation,
                },
            )
        ):
            # Someone stored this id first (a concurrent duplicate): record ours as the next
            # attempt so the dispatch and its charges are never lost.
            final = Node.create(
                final.kind,
                final.parent,
                final.payload,
                attempt=final.attempt + 1,
                result=final.result,
                meta=final.meta,
            )
        for name, amount in charges.items():
            self.spent[name] = self.spent.get(name, ZERO) + amount
        self._move(final)
        if self.rt.mode != "record":  # only served steps consult the verified-prefix cache
            self.rt.verified.add(final.id)
        yield from self._stored(final)
        return final

    def _record_failure(
        self,
        node: Node,
        exc: BaseException,
        estimates: Mapping[str, tuple[Decimal | None, bool]],
        reservation: str | None,
        duration: float,
    ) -> Step:
        """Record a failed or cancelled dispatch as a note charged at the estimate."""
        kind = node.kind.value
        meta: dict[str, Any] = {
            "created_at": utc_now_iso(),
            "duration_s": round(duration, 6),
            "error_type": type(exc).__name__,
        }
        charges = self._charges(kind, node.payload, None, meta, estimates=estimates)
        meta["charges"] = {name: decimal_text(v) for name, v in sorted(charges.items())}
        outcome = "failed" if isinstance(exc, Exception) else "cancelled"
        payload = {
            "event": f"call_{outcome}",
            "kind": kind,
            "attempt": node.attempt,
            "payload_digest": _digest(node.canonical_payload or b""),
            "error": type(exc).__name__,
        }
        failure = Node.create(NodeKind.NOTE, node.parent, payload, meta=meta)
        failure = yield from self._fresh(failure)
        scopes = self._scope_ids()
        while not (
            yield from io(
                self.rt.store.commit,
                failure,
                scopes=scopes,
                charges=charges,
                reservation_id=reservation,
            )
        ):
            failure = Node.create(
                NodeKind.NOTE, failure.parent, payload, attempt=failure.attempt + 1, meta=meta
            )
        for name, amount in charges.items():
            self.spent[name] = self.spent.get(name, ZERO) + amount
        yield from self._stored(failure)

    def note(self, payload: Any, *, attempt: int = 0) -> Step:
        """Record a plain note (idempotent); only the depth limit can refuse it."""
        node = Node.create(NodeKind.NOTE, self.cursor_id, payload, attempt=attempt)
        found: Node | None = yield Io(self.rt.store.find, (node.id,))
        if found is not None:
            if self.rt.mode == "replay":
                yield Io(self.rt.verify_ancestry, (found,))
            self._move(found)
            return found
        if self.rt.mode == "replay":
            summary = _summary("note", node.payload, node.canonical_payload or b"")
            raise MissingRecording(
                f"replay: no recorded note {summary} under {node.parent}", node.id, summary
            )
        # A note runs nothing and costs nothing, so only the depth limit applies (pollard 0.8 also
        # refused notes once any meter was spent, which hid "giving up" notes and branches).
        short = self._depth_shortfall()
        if short is not None:
            yield from self._refuse_budget(short, "note", node.canonical_payload or b"")
        node = node.with_meta({"created_at": utc_now_iso()})
        if (yield Io(self.rt.store.put, (node,))):
            yield from self._stored(node)
        self._move(node)
        return node

    def _precheck_only(self, kind: str, node: Node) -> Step:
        canonical = node.canonical_payload or b""
        short = self._depth_shortfall()
        if short is not None:
            yield from self._refuse_budget(short, kind, canonical)
        claims, windows = self._claims(self._estimates(kind, node.payload))
        if claims or windows:
            admission = yield from io(
                self.rt.store.reserve,
                claims,
                windows,
                lease_seconds=self.rt.lease_seconds,
                hold=False,
            )
            if admission.shortfall is not None:
                yield from self._refuse_budget(admission.shortfall, kind, canonical)

    def record_dry_run(
        self,
        kind: str | NodeKind,
        payload: Any,
        *,
        attempt: int = 0,
        charges: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Step:
        """Record a step without executing it (``meta.dry_run``; see the module docstring)."""
        node = Node.create(kind, self.cursor_id, payload, attempt=attempt)
        if self.rt.mode != "record":
            found: Node | None = yield Io(self.rt.store.find, (node.id,))
            if found is not None and found.meta.get("dry_run"):
                return (yield from self._serve(found, None))
            if self.rt.mode == "replay":
                yield from self._replay_miss(node)
        node = yield from self._fresh(node)
        yield from self._precheck_only(node.kind.value, node)
        amounts = {
            name: to_decimal(value)
            for name, value in (charges if charges is not None else {"steps": 1}).items()
        }
        amounts = {name: value for name, value in amounts.items() if value != 0}
        full_meta = {
            "created_at": utc_now_iso(),
            "dry_run": True,
            **(meta or {}),
            "charges": {name: decimal_text(v) for name, v in sorted(amounts.items())},
        }
        final = node.with_meta(full_meta)
        return (yield from self._settle(final, amounts, None))

    # -- cursor --------------------------------------------------------------------------------

    def ancestors(self, node_id: str) -> list[str]:
        """Ids from ``node_id`` up to the run root (inclusive), nearest first."""
        chain: list[str] = []
        current: str | None = node_id
        while current is not None:
            chain.append(current)
            if current == self.root_id:
                return chain
            current = self.rt.store.get(current).parent
        raise ValueError(f"node {node_id} is not in run {self.label!r}")

    def report(self) -> dict[str, dict[str, str]]:
        """Spent and avoided charges of this run object, plus the root scope's ledger totals."""
        return {
            "spent": {name: decimal_text(v) for name, v in sorted(self.spent.items())},
            "avoided": {name: decimal_text(v) for name, v in sorted(self.avoided.items())},
            "total": {
                name: decimal_text(v)
                for name, v in sorted(self.rt.store.totals(self.root_id).items())
            },
        }


def _diff_summary(payload: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={payload[key]}" for key in sorted(payload) if key != "detail")
