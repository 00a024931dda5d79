"""The HTML run view at 10,000 and 100,000 steps: file size, Python render time, browser time.

The runs are ``pollux run_many``-shaped fan-outs built node by node in a MemoryStore (the shape
the tests use). Each page is written with `pollard.html.write_html` (what ``pollard show
--html`` runs), then opened in one headless Chromium; "first screen" is the page's own
``performance.now()`` when its script has drawn and laid out the first rows (navigation start
to first screen: HTML and JSON parse, roll-ups, filters, first rows). Targets: a 10,000-step run
under 2 MB and its first screen under 1 s. Skipped without Chromium.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench._result import Result
from pollard import MemoryStore
from pollard.html import write_html
from tests.pollard.tooling._browser import Browser, find_chromium
from tests.pollard.tooling._trees import build_fanout

_REPEAT = 3


def run() -> list[Result]:
    results: list[Result] = []
    chromium = find_chromium()
    with tempfile.TemporaryDirectory() as tmp:
        pages: dict[int, Path] = {}
        for steps in (10_000, 100_000):
            store = MemoryStore()
            fan = build_fanout(store, steps)
            page = Path(tmp) / f"run-{steps}.html"
            start = time.perf_counter()
            size = write_html(store, fan.root, page)
            elapsed = time.perf_counter() - start
            pages[steps] = page
            results.append(
                Result(
                    f"run view {steps:,} steps: file size",
                    size / 1e6,
                    "MB",
                    target=2.0 if steps == 10_000 else None,
                    direction="lower",
                )
            )
            results.append(
                Result(
                    f"run view {steps:,} steps: write_html (Python)",
                    elapsed,
                    "s",
                    direction="lower",
                )
            )
        if chromium is None:
            results.append(
                Result("run view: Chromium not installed, browser figures skipped", 0, "")
            )
            return results
        with Browser(chromium) as browser:
            for steps, page in pages.items():
                firsts: list[float] = []
                loads: list[float] = []
                for _ in range(_REPEAT):
                    start = time.perf_counter()
                    browser.open(page)
                    loads.append(time.perf_counter() - start)
                    firsts.append(float(browser.evaluate("document.body.dataset.renderMs")))
                results.append(
                    Result(
                        f"run view {steps:,} steps: first screen in Chromium",
                        statistics.median(firsts),
                        "ms",
                        target=1000.0 if steps == 10_000 else None,
                        direction="lower",
                        note=f"median of {_REPEAT}",
                    )
                )
                results.append(
                    Result(
                        f"run view {steps:,} steps: load event in Chromium",
                        statistics.median(loads) * 1000,
                        "ms",
                        direction="lower",
                        note=f"median of {_REPEAT}, from navigate",
                    )
                )
    return results
