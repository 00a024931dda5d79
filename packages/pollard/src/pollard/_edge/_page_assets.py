"""The HTML run view's style and script, read from the package's ``run_view.css``/``.js``.

The script is plain ES2017 with no dependency; the page's Content-Security-Policy allows exactly
this script (by its SHA-256) and nothing remote. It reads the embedded JSON data, draws only the
rows on screen (a virtual list), and builds the timeline, the cost charts and the details panel;
every recorded string is escaped before it is inserted.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CSS", "SCRIPT"]

_HERE = Path(__file__).parent
CSS = (_HERE / "run_view.css").read_text(encoding="utf-8")
SCRIPT = (_HERE / "run_view.js").read_text(encoding="utf-8")
