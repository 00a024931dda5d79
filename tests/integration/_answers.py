"""Compare a served (replayed or hybrid) bridge answer with the live one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pollux import Event, Output, OutputCollection


def answer(value: Output | OutputCollection | Event | Sequence[Any]) -> Any:
    """``value`` as JSON data without the facts of its one dispatch.

    A served Output is the recorded answer, but its ``metrics.duration_s`` is the recorded step's
    time and it has no provider response id (``diagnostics.raw["response"]["response_id"]``),
    so those two are left out of the comparison; everything else must be equal.
    """
    if isinstance(value, OutputCollection):
        return {**value.to_jsonable(), "outputs": answer(value.outputs)}
    if isinstance(value, Event):
        data = value.to_jsonable()
        if value.output is not None:
            data["output"] = answer(value.output)
        return data
    if isinstance(value, Output):
        data = value.to_jsonable()
        del data["metrics"]["duration_s"]
        data.get("diagnostics", {}).get("response", {}).pop("response_id", None)
        return data
    return [answer(item) for item in value]
