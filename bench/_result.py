"""One benchmark measurement, with an optional target it is checked against."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal


@dataclass(frozen=True)
class Result:
    """A named measurement.

    ``higher_is_better`` decides how ``target`` is compared; ``baseline`` names what the value was
    measured side by side against, when it is a ratio.
    """

    name: str
    value: float
    unit: str
    target: float | None = None
    direction: Literal["higher", "lower"] = "higher"
    note: str = ""

    @property
    def met(self) -> bool:
        if self.target is None:
            return True
        return (
            self.value >= self.target if self.direction == "higher" else self.value <= self.target
        )

    def row(self) -> str:
        goal = ""
        if self.target is not None:
            sign = ">=" if self.direction == "higher" else "<="
            goal = (
                f"  (target {sign} {self.target:g} {self.unit}: {'ok' if self.met else 'MISSED'})"
            )
        note = f"  [{self.note}]" if self.note else ""
        return f"  {self.name:<58} {self.value:>12.4g} {self.unit}{goal}{note}"

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["met"] = self.met
        return data
