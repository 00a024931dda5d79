"""Shared pieces of the team tests: a hard token meter, a model, a small registry."""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pollard import ActionSpec, BudgetExceeded, Registry, Run, Store, TeamAgent
from pollard.meters import StepMeter, TokenMeter

OBJECT = {"type": "object"}


class FiveTokens:
    """Every prompt is 5 input tokens (an exact estimator: the hold is the true worst case)."""

    def estimate_input_tokens(self, payload: Any) -> int:
        return 5


def hard_meters() -> list[Any]:
    """Steps, and tokens held at their worst case (5 in + max_tokens out) before each call."""
    return [StepMeter(), TokenMeter(FiveTokens())]


def model(payload: Any) -> dict[str, Any]:
    """Answers with exactly the worst case: 5 input tokens, max_tokens output tokens."""
    return {"text": "ok", "usage": {"input_tokens": 5, "output_tokens": payload["max_tokens"]}}


def registry() -> Registry:
    return Registry(
        [
            ActionSpec("search", "1", "Search.", OBJECT, False, handler=lambda a: {"hits": 1}),
            ActionSpec("write", "1", "Write.", OBJECT, True, handler=lambda a: {"ok": True}),
        ]
    )


def work_until_refused(agents: list[TeamAgent[Run]], calls: int = 100) -> dict[str, int]:
    """Each agent on its own thread, all released at once, calls until a budget refuses."""
    start = threading.Barrier(len(agents))
    done: dict[str, int] = {}
    errors: list[BaseException] = []

    def work(agent: TeamAgent[Run]) -> None:
        ran = 0
        start.wait()
        try:
            for i in range(calls):
                agent.run.model_call({"q": i, "max_tokens": 10}, fn=model)
                ran += 1
        except BudgetExceeded:
            pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        done[agent.name] = ran

    threads = [threading.Thread(target=work, args=(a,)) for a in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return done


def charged(store: Store, node_id: str, meter: str) -> Decimal:
    """What the nodes of a subtree were charged for ``meter``, counted node by node."""
    total = Decimal(0)
    for node in store.walk(node_id):
        value = node.meta.get("charges", {}).get(meter)
        if value is not None:
            total += Decimal(str(value))
    return total


Check = Callable[[Store], None]
