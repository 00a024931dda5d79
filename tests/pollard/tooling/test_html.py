"""The static HTML view, rendered in a real browser (headless Chromium)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pollard import MemoryStore
from pollard.html import render_html, write_html

from ._trees import SECRET_PROMPT, SECRET_RESULT, Sample, build_sample

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> str:
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail("headless Chromium is required when CI=true (install the chromium package)")
    pytest.skip("headless Chromium is not installed (apt-get install chromium)")


def _render_in_browser(page: Path, tmp_path: Path) -> str:
    """Let Chromium load and lay out the file and return the DOM it built.

    (``--dump-dom`` itself needs the browser's script engine, so scripts stay enabled in the
    browser; the page has none, and its Content-Security-Policy would block any.)
    """
    profile = tmp_path / "profile"
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--dump-dom",
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "<main>" in done.stdout, done.stderr[-2000:]
    return done.stdout


class _Nodes(HTMLParser):
    """Collect each rendered node line: its classes and visible summary text."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, dict[str, str]] = {}
        self._current: str | None = None
        self._in_summary = 0
        self.text: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        node_id = attributes.get("id") or ""
        if tag == "li" and node_id.startswith("n-"):
            self._current = node_id[2:]
            self.nodes[self._current] = {"class": attributes.get("class") or "", "summary": ""}
        if tag == "summary" and self._current is not None:
            self._in_summary += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary" and self._in_summary:
            self._in_summary -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_summary and self._current is not None:
            self.nodes[self._current]["summary"] += data


def _parse(dom: str) -> _Nodes:
    parser = _Nodes()
    parser.feed(dom)
    for node in parser.nodes.values():
        node["summary"] = " ".join(node["summary"].split())
    return parser


@pytest.fixture
def sample_store() -> tuple[MemoryStore, Sample]:
    store = MemoryStore()
    return store, build_sample(store)


def test_the_page_renders_the_tree_with_markers(
    sample_store: tuple[MemoryStore, Sample], tmp_path: Path
) -> None:
    store, sample = sample_store
    page = tmp_path / "run.html"
    written = write_html(store, sample.root, page)
    assert written == page.stat().st_size
    parsed = _parse(_render_in_browser(page, tmp_path))
    nodes = parsed.nodes
    assert set(nodes) == {node.id for node in store.walk(sample.root)}

    assert nodes[sample.root]["summary"].startswith("root f187428a triage")
    assert "model_call" in nodes[sample.model]["summary"]
    assert "openai/gpt-5.5" in nodes[sample.model]["summary"]
    assert "[steps=1 tokens=60 usd=0.0031]" in nodes[sample.model]["summary"]
    assert "send@1" in nodes[sample.tool]["summary"]
    assert "[REDACTED]" in nodes[sample.tool]["summary"]
    assert "redacted" in nodes[sample.tool]["class"].split()
    assert "budget:tokens" in nodes[sample.refusal]["summary"]
    assert "[REFUSED]" in nodes[sample.refusal]["summary"]
    assert "refused" in nodes[sample.refusal]["class"].split()
    assert "[PRUNED]" in nodes[sample.pruned]["summary"]
    assert "pruned" in nodes[sample.pruned]["class"].split()
    assert "under-pruned" in nodes[sample.pruned_child]["class"].split()
    assert nodes[sample.anchor]["summary"].startswith("note")
    assert "branch" in nodes[sample.anchor]["summary"]

    # Nothing is built at load time: the browser's DOM holds exactly the static file's nodes.
    static = _parse(page.read_text(encoding="utf-8"))
    assert {k: v["summary"] for k, v in static.nodes.items()} == {
        k: v["summary"] for k, v in nodes.items()
    }

    text = " ".join(" ".join(parsed.text).split())
    assert "spent steps=4 tokens=135 usd=0.0031" in text
    assert "refusals 1" in text
    # Content-free by default: no prompt or result text anywhere in the document.
    assert SECRET_PROMPT not in text and SECRET_RESULT not in text
    assert "hidden (content-free view" in text


def test_payloads_appear_only_when_asked_for(
    sample_store: tuple[MemoryStore, Sample], tmp_path: Path
) -> None:
    store, sample = sample_store
    page = tmp_path / "payloads.html"
    write_html(store, sample.root, page, payloads=True)
    parsed = _parse(_render_in_browser(page, tmp_path))
    text = " ".join(parsed.text)
    assert SECRET_PROMPT in text
    assert SECRET_RESULT in text
    assert "__pollard_redacted" in text  # the marker, never the secret it replaced


def test_the_page_is_one_static_file_without_scripts_or_remote_assets(
    sample_store: tuple[MemoryStore, Sample],
) -> None:
    store, sample = sample_store
    page = render_html(store, sample.root, payloads=True)
    parser = _parse(page)
    tags = {tag for tag, _ in parser.tags}
    assert "script" not in tags
    assert not tags & {"img", "link", "iframe", "object", "embed", "video", "audio", "source"}
    for tag, attributes in parser.tags:
        for name, value in attributes.items():
            assert not name.startswith("on"), (tag, name)
            if name in {"href", "src", "action"} and value is not None:
                assert value.startswith("#"), (tag, name, value)
    assert not re.search(
        r"url\(|@import|https?://", page.split("<body>")[0].replace("http-equiv", "")
    )
    assert "default-src 'none'" in page


def test_markup_in_labels_is_escaped(tmp_path: Path) -> None:
    from pollard import Node, NodeKind

    store = MemoryStore()
    root = Node.create(NodeKind.ROOT, None, {"run": "<script>alert(1)</script>"})
    store.put(root)
    page = render_html(store, root.id)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_summary_carries_the_seal_or_says_it_does_not_verify(tmp_path: Path) -> None:
    from pollard import SQLiteStore, seal

    from ._cli import tamper

    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        sample = build_sample(store)
        digest = seal(store, sample.root).digest
        assert f"<dt>seal</dt><dd><code>{digest}</code></dd>" in render_html(store, sample.root)
    tamper(path, f"UPDATE nodes SET result = '{{\"queued\":false}}' WHERE id = X'{sample.tool}'")
    with SQLiteStore(path, read_only=True) as store:
        page = render_html(store, sample.root)
    assert "does not verify" in page and sample.tool in page
    assert "[REFUSED]" in page  # the tree is still shown
