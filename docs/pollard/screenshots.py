"""Regenerate the run-view screenshots of docs/pollard/observability.md: `make screenshots`.

Builds a 400-prompt ``pollux run_many``-shaped fan-out (the tests' `build_fanout`: a token
budget that refuses the last prompts, a failed call, retries, provider cache reads), writes its
content-free page with `pollard.html.write_html`, and captures three views in headless Chromium:
the steps with their timeline, the cost view, and the refused steps filtered (dark scheme).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pollard import MemoryStore  # noqa: E402
from pollard.html import write_html  # noqa: E402
from tests.pollard.tooling._browser import Browser, find_chromium  # noqa: E402
from tests.pollard.tooling._trees import build_fanout  # noqa: E402

OUT = Path(__file__).parent / "img"


def main() -> int:
    """Write the three PNGs into docs/pollard/img/ and list them; 1 without Chromium."""
    chromium = find_chromium()
    if chromium is None:
        sys.stderr.write("screenshots: Chromium is not installed (apt-get install chromium)\n")
        return 1
    store = MemoryStore()
    fan = build_fanout(store, 400)
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, Browser(chromium, width=1280, height=860) as web:
        page = Path(tmp) / "run.html"
        write_html(store, fan.root, page)
        web.open(page, "run")
        web.evaluate("document.querySelector('#r-14 .bar').click()")  # prompt 13: a model call
        web.evaluate("window.scrollTo(0, 0)")
        web.screenshot(OUT / "run-view-steps.png")
        web.open(page, "cost")
        web.screenshot(OUT / "run-view-cost.png")
        web.color_scheme("dark")
        web.open(page, f"status=refused&n={fan.refused[0]}")
        web.evaluate("document.body.setAttribute('data-view', 'run'); window.scrollTo(0, 0)")
        web.screenshot(OUT / "run-view-refused-dark.png")
    for name in sorted(OUT.glob("run-view-*.png")):
        sys.stdout.write(f"{name.relative_to(ROOT)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
