"""pollard offline: a budgeted run, two branches from a shared prefix, a refusal, replay, a seal.

Run it with ``python examples/pollard_offline.py``; it needs no provider account.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pollard import Budget, BudgetExceeded, Runtime, seal

try:  # run as `python examples/pollard_offline.py` or imported as examples.pollard_offline
    from mock_model import call_model
except ImportError:
    from examples.mock_model import call_model


def main() -> None:
    db = Path(tempfile.mkdtemp()) / "runs.db"
    question = {"role": "user", "content": "Summarize the incident report in one line."}

    with Runtime(db) as rt:
        run = rt.run("offline", budget=Budget(tokens=60, steps=4))
        plan = run.model_call({"model": "mock-1", "messages": [question]}, fn=call_model)
        print("prefix:", plan.result["text"], plan.meta["charges"])
        for tone in ("terse", "friendly"):
            branch = run.branch()
            ask = {"role": "user", "content": f"Now say it in a {tone} tone."}
            node = branch.model_call(
                {"model": "mock-1", "messages": [question, ask], "temperature": 0.2},
                fn=call_model,
            )
            print(f"branch {tone}:", node.result["text"])
        try:
            for i in range(5):
                run.model_call({"model": "mock-1", "messages": [question], "i": i}, fn=call_model)
        except BudgetExceeded as refused:
            print("refused:", refused)
        print("report:", run.report())
        digest = seal(rt.store, run.root_id).digest

    def offline(payload: object) -> dict[str, object]:
        raise AssertionError("replay never calls the model")

    with Runtime(db, mode="replay") as rt:
        replay = rt.run("offline")
        again = replay.model_call({"model": "mock-1", "messages": [question]}, fn=offline)
        print("replayed:", again.result["text"], "avoided:", replay.report()["avoided"])
        assert seal(rt.store, replay.root_id).digest == digest
        print("seal:", digest)


if __name__ == "__main__":
    main()
