"""A refusal caused by an estimator's figure says so, and the function never runs."""

from __future__ import annotations

import pytest

from pollard import Budget, Runtime
from pollard.errors import BudgetExceeded
from pollard.estimators.openai import OpenAITokenEstimator
from pollard.meters import StepMeter, TokenMeter

from .test_estimators import WordEncoding


def test_an_estimated_token_refusal_is_marked_estimated() -> None:
    estimator = OpenAITokenEstimator(encoding=WordEncoding(), tokens_per_message=0)
    runtime = Runtime(meters=[StepMeter(), TokenMeter(estimator, reserved_output_tokens=10)])
    ran: list[object] = []
    with runtime.run("estimate", budget=Budget(tokens=50)) as run:
        small = {"model": "m", "input": "one two three"}
        node = run.model_call(small, fn=lambda p: ran.append(p) or {"usage": {"input_tokens": 3}})
        assert node.meta["charges"]["tokens"] == 3
        big = {"model": "m", "input": " ".join(["word"] * 60)}
        with pytest.raises(BudgetExceeded) as info:
            run.model_call(big, fn=lambda p: ran.append(p) or {})
    refusal = run.store.get(info.value.refusal_id)
    assert refusal.payload["estimated"] == "true"
    assert refusal.payload["meter"] == "tokens"
    assert refusal.payload["requested"] == "70"  # 60 estimated input + 10 reserved output
    assert len(ran) == 1
