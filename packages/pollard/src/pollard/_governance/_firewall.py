"""The registered branch of ``tool_call`` and ``confirm``: the registry firewall as core steps.

Both entry points are generators driven by the sync or the async shell (see ``pollard._step``),
so the firewall exists once for ``Run`` and ``AsyncRun``. The order of a registered call:

1. resolve the name (and version) in the registry; 2. redact sensitive fields; 3. validate the
arguments; 4. in hybrid/replay, serve a recorded call without asking policies again; 5. policies
(first DENY refuses, else any CONFIRM holds the call); 6. dry run records side-effecting actions
without calling them; 7. the handler runs as a normal step.

Identity: a registered call's payload is ``{"tool", "version", "args" (redacted), "spec_digest"}``
(plus ``"dry_run": true`` for a dry-run record). It commits to its own action's digest only; the
registry digest goes to meta, so an unrelated registry edit leaves recorded ids valid.

Durable confirmation: a CONFIRM answer records a refusal whose payload holds everything needed to
run the call later (tool, version, spec digest, redacted args, attempt); its id is the resume token.
The originals of sensitive arguments never reach the store: they are kept in the runtime's memory
for the process that asked, and must be passed again (``confirm(token, args=...)``) after a
restart, where they are checked against the recorded markers.
"""

from __future__ import annotations

import copy
import inspect
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

from pollard._core._canon import node_id, payload_digest, validate_json
from pollard._core._ledger import utc_now_iso
from pollard._core._node import Node, NodeKind
from pollard._governance import _approvals as approvals
from pollard._governance._legacy08 import (
    blocked_digests_08,
    identity_payload_08,
    registry_digest_08,
)
from pollard._step._effects import Effect, Invoke, Offload, Step, io
from pollard.errors import ConfirmationRequired, IntegrityError, PolicyViolation, PollardError
from pollard.policy import Decision, PolicyContext
from pollard.redaction import contains_redaction, redact

if TYPE_CHECKING:
    from pollard._step._cursor import RunState
    from pollard.policy import Policy
    from pollard.registry import ActionSpec, Registry

__all__ = [
    "SENSITIVE_HINT",
    "Firewall",
    "bind_root",
    "confirm",
    "identity_payload",
    "request_approval",
    "tool_call",
]

SENSITIVE_HINT = "sensitive"
"""The hint of markers that replace schema-sensitive fields."""
UNREGISTERED_HINT = "unregistered action arguments"
"""The hint of the marker that replaces all arguments of an unknown action."""

_TOOL = NodeKind.TOOL_CALL.value
_CONFIRM_HINT = (
    "call run.confirm(error.resume_token) once the action is approved; after a restart, pass "
    "sensitive arguments again with run.confirm(token, args=...)"
)


class _IsAsync(Effect):
    """Asks the shell which driver runs the step (False for the sync shell)."""

    __slots__ = ()

    def run_sync(self) -> Any:
        return False

    async def run_async(self, offload: Offload) -> Any:
        return True


def identity_payload(spec: ActionSpec, redacted_args: Any) -> dict[str, Any]:
    """Return the identity payload of a registered call (args already redacted)."""
    return {
        "tool": spec.name,
        "version": spec.version,
        "args": redacted_args,
        "spec_digest": spec.spec_digest,
    }


def _marker(registry: Registry) -> Callable[[object], object]:
    key = registry.redaction_key

    def replace(value: object) -> object:
        return redact(value, SENSITIVE_HINT, key=key)

    return replace


def _checked_args(args: object) -> dict[str, Any]:
    if not isinstance(args, Mapping):
        raise TypeError(f"tool_call args must be a dict, got {type(args).__name__}")
    plain = dict(args)
    validate_json(plain)  # TypeError naming the $.path of a value that is not JSON
    return copy.deepcopy(plain)


def _refusal_payload(
    rule: str,
    detail: str,
    blocked: Mapping[str, Any],
    *,
    tool: str,
    version: str | None,
    spec: ActionSpec | None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "reason": "policy",
        "rule": rule,
        "detail": detail,
        "blocked_kind": _TOOL,
        "blocked_payload_digest": payload_digest(blocked),
        "tool": tool,
        "version": version,
    }
    if spec is not None:
        payload["spec_digest"] = spec.spec_digest
    return payload


def _refuse(
    fw: Firewall,
    state: RunState,
    rule: str,
    detail: str,
    blocked: Mapping[str, Any],
    *,
    tool: str,
    version: str | None,
    spec: ActionSpec | None = None,
    extra: Mapping[str, Any] | None = None,
    error: Callable[[str], PollardError] | None = None,
    original: Mapping[str, Any] | None = None,
) -> Step:
    """Record a policy refusal under the cursor and raise (the generator never returns).

    ``original``: the call's unredacted args, to find a refusal pollard 0.8 recorded in replay.
    """
    registry = fw.registry
    payload = _refusal_payload(rule, detail, blocked, tool=tool, version=version, spec=spec)
    payload.update(extra or {})

    def violation(refusal_id: str) -> PollardError:
        return PolicyViolation(f"tool_call refused: {detail}", refusal_id, detail=detail)

    legacy = () if original is None else blocked_digests_08(tool, original, spec, registry)
    return (
        yield from state.refuse(
            payload,
            error or violation,
            meta={"registry_digest": registry.registry_digest},
            legacy_digests=legacy,
        )
    )


def tool_call(
    fw: Firewall,
    state: RunState,
    name: str,
    args: Mapping[str, Any],
    *,
    version: str | None = None,
    attempt: int = 0,
    actor: str | None = None,
) -> Step:
    """Resolve, validate, redact, ask policies and run one registered tool call."""
    registry: Registry = fw.registry
    if actor is None:
        actor = state.actor
    if not isinstance(name, str):
        raise TypeError(f"tool_call name must be a str, got {type(name).__name__}")
    if version is not None and not isinstance(version, str):
        raise TypeError(f"tool_call version must be a str or None, got {type(version).__name__}")
    original = _checked_args(args)
    spec = registry.find(name)
    if spec is None:
        # No schema says which fields are secret: the whole argument object is redacted, so an
        # unregistered call never puts a plaintext value into the store.
        blocked = {
            "tool": name,
            "version": version,
            "args": redact(original, UNREGISTERED_HINT, key=registry.redaction_key),
        }
        shown = name + (f"@{version}" if version is not None else "")
        return (
            yield from _refuse(
                fw,
                state,
                "unknown_action",
                f"unknown registered action: {shown}",
                blocked,
                tool=name,
                version=version,
                original=original,
            )
        )
    redacted = spec.redact_args(original, _marker(registry))
    payload = identity_payload(spec, redacted)
    permitted = state.tools
    if permitted is not None and name not in permitted:
        # A team agent calls only the tools it was given: refused before any policy or
        # dispatch, and recorded like every other refusal.
        allowed = ", ".join(sorted(permitted)) or "none"
        return (
            yield from _refuse(
                fw,
                state,
                "not_permitted",
                f"agent {state.actor!r} may not call {name} (its tools: {allowed})",
                payload,
                tool=name,
                version=version,
                spec=spec,
                extra={"actor": state.actor},
            )
        )
    if version is not None and version != spec.version:
        return (
            yield from _refuse(
                fw,
                state,
                "version_mismatch",
                f"version mismatch for {name}: requested {version}, registered {spec.version}",
                {**payload, "version": version},
                tool=name,
                version=version,
                spec=spec,
                original=original,
            )
        )
    finding = spec.validate(original, engine=registry.schema_engine)
    if finding is not None:
        return (
            yield from _refuse(
                fw,
                state,
                "invalid_args",
                f"schema validation failed: {finding}",
                payload,
                tool=name,
                version=spec.version,
                spec=spec,
                original=original,
            )
        )
    return (
        yield from _admit(fw, state, spec, original, payload, attempt, confirmed=False, actor=actor)
    )


def _decide(
    fw: Firewall,
    state: RunState,
    spec: ActionSpec,
    original: dict[str, Any],
    confirmed: bool,
    actor: str | None,
) -> Step:
    """Run the policies; return ``{decision: first policy name}`` (only DENY when one denies)."""
    policies = fw.policies
    if not policies:
        return {}
    report = yield io(state.report, exact=True)
    counters = {name: Decimal(value) for name, value in report["total"].items()}
    verdicts: dict[Decision, str] = {}
    for policy in policies:
        context = PolicyContext(
            spec=spec,
            args=copy.deepcopy(original),
            cursor_id=state.cursor_id,
            run_label=state.label,
            counters=dict(counters),
            confirmed=confirmed,
            dry_run=state.rt.dry_run,
            actor=actor,
        )
        answer = yield Invoke(policy.decide, context)
        try:
            decision = Decision(answer)
        except ValueError:
            raise TypeError(
                f"policy {_policy_name(policy)} returned {answer!r}; "
                "return Decision.ALLOW, Decision.DENY, Decision.CONFIRM or "
                "Decision.REQUIRE_APPROVAL"
            ) from None
        if decision is Decision.DENY:
            return {decision: _policy_name(policy)}
        verdicts.setdefault(decision, _policy_name(policy))
    return verdicts


def _policy_name(policy: object) -> str:
    name = getattr(policy, "name", None)
    return name if isinstance(name, str) and name else type(policy).__name__


def _admit(
    fw: Firewall,
    state: RunState,
    spec: ActionSpec,
    original: dict[str, Any],
    payload: dict[str, Any],
    attempt: int,
    *,
    confirmed: bool,
    actor: str | None = None,
) -> Step:
    rt = state.rt
    meta = {"registry_digest": fw.registry.registry_digest}
    dry = bool(rt.dry_run and spec.side_effects)
    # A dry-run record has its own identity, so it is never served as (or collides with) the
    # real call recorded later.
    step_payload = {**payload, "dry_run": True} if dry else payload
    if state.mode != "record":
        found = yield from state.lookup(_TOOL, step_payload, attempt)
        if found is None and not dry:
            # A call pollard 0.8 recorded has its older identity: serve that node as it is.
            legacy = identity_payload_08(spec, fw.registry, original)
            found = yield from state.lookup(_TOOL, legacy, attempt)
            if found is not None and found.result is not None:
                return (yield from state.step(_TOOL, legacy, _unreachable, None, attempt=attempt))
        if found is not None and (found.result is not None or found.meta.get("dry_run")):
            # Recorded calls were admitted when they were recorded: serve them as they are.
            if dry:
                return (yield from state.record_dry_run(_TOOL, step_payload, attempt=attempt))
            return (yield from state.step(_TOOL, payload, _unreachable, None, attempt=attempt))
    verdicts = yield from _decide(fw, state, spec, original, confirmed, actor)
    if Decision.DENY in verdicts:
        return (
            yield from _refuse(
                fw,
                state,
                "denied",
                f"denied by policy {verdicts[Decision.DENY]}",
                step_payload,
                tool=spec.name,
                version=spec.version,
                spec=spec,
                original=original,
            )
        )
    approved = None
    if Decision.REQUIRE_APPROVAL in verdicts:
        # A stored approval, decided by someone else, is the only way past this: a process-local
        # confirmation (confirmed=True) does not satisfy it.
        approved = yield from approvals.require(
            state,
            spec,
            fw.registry.registry_digest,
            payload["args"],
            step_payload,
            actor,
            attempt,
            verdicts[Decision.REQUIRE_APPROVAL],
        )
    if Decision.CONFIRM in verdicts and not confirmed:
        who = verdicts[Decision.CONFIRM]
        pending = copy.deepcopy(original)
        detail = f"confirmation required by policy {who}"

        def hold(refusal_id: str) -> PollardError:
            fw.pending[refusal_id] = pending
            return ConfirmationRequired(
                f"tool_call {spec.name}@{spec.version} needs confirmation (policy {who}); "
                f"resume token {refusal_id}",
                refusal_id,
                hint=_CONFIRM_HINT,
            )

        extra: dict[str, Any] = {"args": payload["args"], "attempt": attempt}
        if actor is not None:
            # Who asked is part of the request (a stored approval is bound to the actor), and
            # only when there is one, so the ids of requests without an actor do not change.
            extra["actor"] = actor
        # The same call asked again from the same node (after a rollback, say) after an earlier
        # request was confirmed is a new request: give it its own token instead of the old one.
        base = _refusal_payload(
            "confirmation_required",
            detail,
            step_payload,
            tool=spec.name,
            version=spec.version,
            spec=spec,
        )
        while True:
            candidate = node_id(NodeKind.REFUSAL.value, state.cursor_id, {**base, **extra})
            existing = yield io(rt.store.find, candidate)
            status = existing.meta.get("confirmation") if existing is not None else None
            if not (isinstance(status, Mapping) and status.get("status") == "confirmed"):
                break
            extra["request"] = int(extra.get("request", 0)) + 1
        # The request is recorded (the ledger is the truth), but the cursor stays where the
        # call was asked, as in pollard 0.8: the next step (or the confirmed call) goes there.
        cursor, depth = state.cursor_id, state.depth
        try:
            return (
                yield from _refuse(
                    fw,
                    state,
                    "confirmation_required",
                    detail,
                    step_payload,
                    tool=spec.name,
                    version=spec.version,
                    spec=spec,
                    extra=extra,
                    error=hold,
                )
            )
        except ConfirmationRequired:
            state.cursor_id, state.depth = cursor, depth
            raise
    if dry:  # nothing runs, so an approval is not spent
        return (yield from state.record_dry_run(_TOOL, step_payload, attempt=attempt, meta=meta))
    handler = spec.handler
    if handler is None:  # checked after policies and dry run: a dry run needs no handler
        return (
            yield from _refuse(
                fw,
                state,
                "no_handler",
                "registered action has no handler",
                payload,
                tool=spec.name,
                version=spec.version,
                spec=spec,
            )
        )
    is_async = yield _IsAsync()
    if not is_async and _is_async_callable(handler):
        # Refuse before dispatch: nothing ran, so nothing is recorded or charged.
        raise TypeError(
            f"the handler of {spec.name!r} is async; use AsyncRuntime (atool_call) to call it"
        )
    if approved is not None:
        # Spent on this call's step node; from here the effects-once machinery holds: a
        # completed step is served, one in flight at a crash is ambiguous, never re-run, and a
        # confirmation cannot make an approved action run a second time.
        step_id = node_id(_TOOL, state.cursor_id, payload, attempt)
        yield from approvals.spend(state, approved, step_id)
        meta = {**meta, "approval": approved.id}
    # A newly confirmed request runs even when an earlier confirmed one stored this step.
    return (
        yield from state.step(
            _TOOL,
            payload,
            handler,
            original,
            attempt=attempt,
            meta=meta,
            rerun=confirmed and approved is None,
        )
    )


def _is_async_callable(function: object) -> bool:
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(function, "__call__", None)  # noqa: B004 - a callable object's async __call__
    return inspect.iscoroutinefunction(call)


def _unreachable(_arg: object) -> NoReturn:  # pragma: no cover - only served nodes reach here
    raise AssertionError("a served registered call must not be executed")


# -- approvals -------------------------------------------------------------------------------------


def request_approval(
    fw: Firewall,
    state: RunState,
    name: str,
    args: Mapping[str, Any],
    *,
    version: str | None = None,
    attempt: int = 0,
    actor: str | None = None,
) -> Step:
    """Record the approval request the call would make (the cursor stays); return its node.

    The request is the one the firewall looks up when the call is made, so deciding it
    approves exactly that call. An unknown action, another version or invalid arguments raise
    ``ValueError`` (nothing was attempted, so nothing is recorded).
    """
    registry: Registry = fw.registry
    if actor is None:
        actor = state.actor
    original = _checked_args(args)
    spec = registry.find(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"cannot request approval: unknown registered action {name!r}")
    if version is not None and version != spec.version:
        raise ValueError(
            f"cannot request approval: {name} is registered as version {spec.version}, "
            f"not {version}"
        )
    finding = spec.validate(original, engine=registry.schema_engine)
    if finding is not None:
        raise ValueError(f"cannot request approval: schema validation failed: {finding}")
    redacted = spec.redact_args(original, _marker(registry))
    payload = identity_payload(spec, redacted)
    body = approvals.request_payload(
        spec, registry.registry_digest, redacted, payload, actor, attempt
    )
    node = Node.create(NodeKind.REFUSAL, state.cursor_id, body)
    found = yield io(state.rt.store.find, node.id)
    if found is not None:
        return found
    if state.rt.mode == "replay":
        raise PollardError(
            "request_approval writes a request; replay mode never writes",
            hint="request approvals in record or hybrid mode",
        )
    node = node.with_meta(
        {"created_at": utc_now_iso(), "registry_digest": registry.registry_digest}
    )
    yield io(state.rt.store.put, node)
    return node


# -- confirmation ----------------------------------------------------------------------------------


class TokenError(PollardError, KeyError, ValueError):
    """A resume token that cannot be confirmed: unknown, already used, or with other arguments.

    A ``KeyError`` (what pollard 0.8 raised) and a ``ValueError`` (what this project raised).
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


def _bad_token(token: object, why: str) -> TokenError:
    return TokenError(
        f"cannot confirm {token!r}: {why}",
        hint="a resume token is single-use: confirm each ConfirmationRequired.resume_token once",
    )


def confirm(
    fw: Firewall, state: RunState, token: str, *, args: Mapping[str, Any] | None = None
) -> Step:
    """Execute the registered call held by a confirmation refusal (see the module docstring)."""
    rt = state.rt
    registry: Registry = fw.registry
    if not isinstance(token, str):
        raise TypeError(f"a confirmation token is a str, got {type(token).__name__}")
    refusal = yield io(rt.store.find, token)
    if (
        refusal is None
        or refusal.kind is not NodeKind.REFUSAL
        or not isinstance(refusal.payload, Mapping)
        or refusal.payload.get("rule") != "confirmation_required"
    ):
        raise _bad_token(token, "it is not a pending confirmation in this store")
    parent = refusal.parent
    assert parent is not None
    chain = yield io(state.ancestors, parent)  # ValueError when it is another run's
    recorded = refusal.payload
    status = refusal.meta.get("confirmation")
    if isinstance(status, Mapping) and status.get("status") == "confirmed":
        if rt.mode == "replay":  # serving the recording hands nothing out: nothing runs
            node = yield io(rt.store.get, str(status["node_id"]))
            state.cursor_id, state.depth = node.id, len(chain)
            return node
        # Single-use (as in pollard 0.8): a second confirm never hands the action out again.
        raise _bad_token(token, f"it was already used (the call is node {status['node_id']})")
    # The confirmed call belongs where the call was asked, not under the refusal.
    state.cursor_id, state.depth = parent, len(chain) - 1
    name, version = str(recorded["tool"]), recorded.get("version")
    spec = registry.find(name)
    if spec is None or spec.version != version or spec.spec_digest != recorded.get("spec_digest"):
        return (
            yield from _refuse(
                fw,
                state,
                "spec_changed",
                f"the action {name}@{version} changed or left the registry since confirmation "
                "was requested",
                {"tool": name, "version": version, "token": token},
                tool=name,
                version=version if isinstance(version, str) else None,
            )
        )
    original = _confirmed_args(fw, state, spec, token, recorded, args)
    payload = identity_payload(spec, recorded["args"])
    attempt = recorded.get("attempt", 0)
    if rt.mode != "replay":
        done = yield from _claim(state, token, status, len(chain))
        if done is not None:
            return done
    try:
        node = yield from _admit(
            fw,
            state,
            spec,
            original,
            payload,
            attempt if isinstance(attempt, int) else 0,
            confirmed=True,
            actor=_text(recorded.get("actor")) or state.actor,
        )
    except GeneratorExit:
        raise
    except BaseException:
        if rt.mode != "replay":
            # Nothing was confirmed (a refusal, a failed or cancelled handler, whose node is
            # recorded): open the next round, so a deliberate retry can claim it again.
            yield io(
                rt.store.update_meta,
                token,
                {"confirmation": {"status": "retry", "round": _round(status) + 1}},
            )
        raise
    if rt.mode != "replay":
        yield io(
            rt.store.update_meta,
            token,
            {"confirmation": {"status": "confirmed", "node_id": node.id}},
        )
    fw.pending.pop(token, None)
    return node


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _round(status: object) -> int:
    number = status.get("round", 0) if isinstance(status, Mapping) else 0
    return number if isinstance(number, int) and not isinstance(number, bool) else 0


def _claim(state: RunState, token: str, status: object, depth: int) -> Step:
    """Claim the right to execute a confirmation; return the node when another runtime did.

    Runtimes confirming one token at the same moment (threads or processes on one store) race
    for one store claim, so exactly one of them runs the handler. A loser returns the winner's
    node once it is recorded, and otherwise raises instead of executing the action twice.
    """
    rt = state.rt
    owner = uuid.uuid4().hex
    winner = yield io(rt.store.claim, f"confirm:{token}:{_round(status)}", owner)
    if winner == owner:
        return None
    current = yield io(rt.store.get, token)
    after = current.meta.get("confirmation")
    if isinstance(after, Mapping) and after.get("status") == "confirmed":
        raise _bad_token(token, f"it was already used (the call is node {after['node_id']})")
    raise PollardError(
        f"cannot confirm {token}: another runtime is executing this confirmation",
        hint="call run.confirm(token) again once it has finished to get its node; if that "
        "runtime died mid-call, check whether the action took effect before asking again",
    )


def _confirmed_args(
    fw: Firewall,
    state: RunState,
    spec: ActionSpec,
    token: str,
    recorded: Mapping[str, Any],
    given: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Return the original arguments of a pending call, checked against the recorded ones."""
    registry: Registry = fw.registry
    if given is not None:
        original = _checked_args(given)
    elif token in fw.pending:
        original = copy.deepcopy(fw.pending[token])
    elif not contains_redaction(recorded.get("args")):
        original = copy.deepcopy(dict(recorded["args"]))
    else:
        raise _bad_token(
            token,
            "its sensitive arguments are not in the store (by design); pass them again with "
            "run.confirm(token, args=...)",
        )
    if spec.redact_args(original, _marker(registry)) != recorded.get("args"):
        raise _bad_token(token, "the arguments do not match the ones recorded for confirmation")
    finding = spec.validate(original, engine=registry.schema_engine)
    if finding is not None:  # pragma: no cover - the spec digest is unchanged, so this held before
        raise _bad_token(token, f"schema validation failed: {finding}")
    return original


# -- root binding ----------------------------------------------------------------------------------


def bind_root(fw: Firewall, state: RunState) -> None:
    """Bind the run root to the registry digest (audit only; never in an identity).

    Called once per run by the shell, as a plain call. As in pollard 0.8, a run label bound to one
    registry is not re-opened under another (in any mode): its recorded calls were admitted by
    the first. A root opened without a registry is bound on its first registered open. Replay
    writes nothing.

    Raises:
        IntegrityError: The root is already bound to a different registry.
    """
    rt = state.rt
    digest = fw.registry.registry_digest
    root = rt.store.find(state.root_id)
    if root is None:  # replay of a run that was never recorded: MissingRecording comes later
        return
    bound = root.meta.get("registry_digest")
    if bound is not None and bound != digest and bound == registry_digest_08(fw.registry):
        return  # recorded by pollard 0.8 under this same registry (0.8 digested it differently)
    if bound is not None and bound != digest:
        raise IntegrityError(
            f"run root is already bound to a different registry (run {state.label!r} was "
            f"recorded under registry {str(bound)[:12]}..., this runtime has {digest[:12]}...)",
            state.root_id,
            hint="open the run with the registry it was recorded under, or record under a new "
            "label or attempt (Runtime.run(label, attempt=N))",
        )
    if bound == digest or rt.mode == "replay":
        return
    rt.store.update_meta(state.root_id, {"registry_digest": digest})


# -- the gate --------------------------------------------------------------------------------------


class Firewall:
    """The registry firewall as the step machine's `Gate` (built by the runtime shells).

    Args:
        registry: The action registry calls resolve against.
        policies: The policies asked, in order, before a registered call runs.

    Attributes:
        pending: Original arguments of calls held for confirmation by this process, by token
            (sensitive originals never reach the store).
    """

    def __init__(self, registry: Registry, policies: Sequence[Policy]) -> None:
        self._registry = registry
        self._policies = tuple(policies)
        self.pending: dict[str, Any] = {}

    @property
    def registry(self) -> Registry:
        """The action registry."""
        return self._registry

    @property
    def policies(self) -> tuple[Policy, ...]:
        """The policies, in order."""
        return self._policies

    def tool_call(
        self,
        state: RunState,
        name: str,
        args: Any,
        *,
        version: str | None,
        attempt: int,
        actor: str | None = None,
    ) -> Step:
        """Resolve, validate, redact, ask policies and run one registered tool call."""
        return tool_call(self, state, name, args, version=version, attempt=attempt, actor=actor)

    def request_approval(
        self,
        state: RunState,
        name: str,
        args: Any,
        *,
        version: str | None = None,
        attempt: int = 0,
        actor: str | None = None,
    ) -> Step:
        """Record (or find) the approval request of a registered call without making it."""
        return request_approval(
            self, state, name, args, version=version, attempt=attempt, actor=actor
        )

    def confirm(self, state: RunState, token: str, *, args: Any = None) -> Step:
        """Run a call a policy held for confirmation."""
        return confirm(self, state, token, args=args)

    def bind_root(self, state: RunState) -> None:
        """Record the registry digest on the run root."""
        bind_root(self, state)
