"""One campaign's outcome and the table they are printed in."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Outcome:
    """What one campaign did and found.

    Attributes:
        name: The campaign.
        guarantee: The promise it checks, in one line.
        trials: How many trials ran (bounded by ``cap``).
        cap: The count cap of the campaign.
        failures: Trials that broke the guarantee.
        figure: The campaign's headline figure (for example "0 of 40 kills lost a node").
        seconds: Wall time spent.
        notes: Details of failures (printed under the table).
    """

    name: str
    guarantee: str
    trials: int = 0
    cap: int = 0
    failures: int = 0
    figure: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    worst: int = 0  # the largest excess a campaign saw (overspend, lost nodes, ...)

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "SKIP"
        return "ok" if self.failures == 0 and self.trials > 0 else "FAIL"

    def fail(self, note: str) -> None:
        self.failures += 1
        if len(self.notes) < 5:
            self.notes.append(note)


class Deadline:
    """A campaign's time cap: ``while more():`` stops at the count cap or the time cap."""

    def __init__(self, seconds: float, count: int) -> None:
        self.end = time.monotonic() + seconds
        self.count = count
        self.done = 0

    def more(self) -> bool:
        if self.done >= self.count or time.monotonic() >= self.end:
            return False
        self.done += 1
        return True


def table(outcomes: list[Outcome]) -> str:
    headers = ["campaign", "trials", "fail", "figure", "s", "verdict"]
    rows = [
        [
            o.name,
            f"{o.trials}/{o.cap}",
            str(o.failures),
            o.skipped or o.figure,
            f"{o.seconds:.1f}",
            o.verdict,
        ]
        for o in outcomes
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    for o in outcomes:
        for note in o.notes:
            lines.append(f"  {o.name}: {note}")
    return "\n".join(lines)
