"""pollard tooling throughput on a 5,000-step SQLite run: show, HTML, OTel, merge, export/import.

The run is a chain of model calls (each the child of the previous one, as agent loops are) with a
two-way fork every 50 steps. Every figure is nodes per second through the public API (the CLI
is a thin shell over it), so the numbers say how long `pollard show`, `merge`, `export` and
`import` take on a run of this size. The original has no offline HTML/OTel figures to compare.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench._result import Result
from pollard import MemoryStore, Node, NodeKind, SQLiteStore, export_subtree, import_subtree, merge
from pollard._cli.text import render_tree
from pollard._edge._view import build_view
from pollard.html import render_html

STEPS = 5_000


def _build(store: SQLiteStore) -> str:
    root = Node.create(NodeKind.ROOT, None, {"run": "bench-tooling"})
    store.put(root)
    parent = root.id
    for i in range(STEPS):
        node = Node.create(
            NodeKind.MODEL_CALL,
            parent,
            {"model": "mock-1", "messages": [{"role": "user", "content": f"step {i}"}]},
            result={"text": f"answer {i}", "usage": {"input_tokens": 10, "output_tokens": 5}},
            meta={
                "created_at": "2026-01-01T00:00:00.000000Z",
                "duration_s": 0.01,
                "charges": {"steps": "1", "tokens": "15"},
            },
        )
        store.put(node)
        if i % 50 == 0:
            store.put(
                Node.create(NodeKind.NOTE, parent, {"status": f"fork {i}"}, meta={"pruned": True})
            )
        parent = node.id
    return root.id


def _rate(name: str, nodes: int, action: Callable[[], object]) -> Result:
    start = time.perf_counter()
    action()
    elapsed = time.perf_counter() - start
    return Result(name, nodes / elapsed, "nodes/s")


def run() -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        with SQLiteStore(base / "runs.db") as store:
            root = _build(store)
            nodes = sum(1 for _ in store.walk(root))
            results = [
                _rate(
                    "show: view + text tree (SQLite)",
                    nodes,
                    lambda: render_tree(build_view(store.walk(root))),
                ),
                _rate("show --html: static page (SQLite)", nodes, lambda: render_html(store, root)),
                _rate(
                    "export_subtree to a file (SQLite)",
                    nodes,
                    lambda: export_subtree(store, root, base / "run.json"),
                ),
            ]
            with SQLiteStore(base / "merged.db") as dest:
                results.append(
                    _rate("merge into an empty SQLite store", nodes, lambda: merge(dest, store))
                )
                results.append(
                    _rate("merge again (all nodes present)", nodes, lambda: merge(dest, store))
                )
            with SQLiteStore(base / "imported.db") as target:
                results.append(
                    _rate(
                        "import_subtree into an empty SQLite store",
                        nodes,
                        lambda: import_subtree(base / "run.json", target),
                    )
                )
            results.append(
                _rate(
                    "import_subtree into a MemoryStore",
                    nodes,
                    lambda: import_subtree(base / "run.json", MemoryStore()),
                )
            )
            try:
                from opentelemetry.sdk.trace import TracerProvider

                from pollard.otel import export_spans
            except ImportError:
                return results
            provider = TracerProvider()  # no processor: measures pollard's side of the export
            tracer = provider.get_tracer("bench")
            results.append(
                _rate(
                    "otel export_spans (SQLite)", nodes, lambda: export_spans(store, root, tracer)
                )
            )
            provider.shutdown()
    return results
