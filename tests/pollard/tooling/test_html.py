"""The HTML run view, rendered in a real browser (headless Chromium) and read back from its DOM.

Each page is loaded once per fragment (``#status=refused`` and the like set the filters), and
the DOM the page's script built is parsed here. Render times are measured in `bench/` only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

from pollard import MemoryStore
from pollard._edge._view import ViewNode
from pollard.html import render_html, render_rows, write_html

from ._browser import Browser, find_chromium
from ._trees import SECRET_PROMPT, SECRET_RESULT, Sample, build_fanout, build_sample, fanout_prompt


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    found = find_chromium()
    if found is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("headless Chromium is required when CI=true (install the chromium package)")
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    with Browser(found) as running:
        yield running


def _load(browser: Browser, page: Path, fragment: str = "") -> _Element:
    """Load the file in Chromium, let its script draw, and return the DOM it built."""
    browser.open(page, fragment)
    # The script marks the body when it has drawn the page (a script error would not).
    assert browser.evaluate("document.body.dataset.state") == "ready"
    return _dom(browser.dom())


@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[_Element] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[_Element]:
        out: list[_Element] = []
        stack = list(reversed(self.children))
        while stack:
            node = stack.pop()
            if (tag is None or node.tag == tag) and (cls is None or cls in node.classes):
                out.append(node)
            stack.extend(reversed(node.children))
        return out

    def by_id(self, wanted: str) -> _Element:
        for node in self.find_all():
            if node.attrs.get("id") == wanted:
                return node
        raise AssertionError(f"no element with id {wanted!r}")

    @property
    def words(self) -> str:
        return " ".join(self.text.split())


_VOID = {"meta", "input", "br", "img", "link", "hr"}


class _Tree(HTMLParser):
    """A small DOM: every element with its attributes and its whole text."""

    def __init__(self) -> None:
        super().__init__()
        self.root = _Element("#document", {})
        self._open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = _Element(tag, {k: v or "" for k, v in attrs})
        self._open[-1].children.append(node)
        if tag not in _VOID:
            self._open.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open[-1].children.append(_Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._open) - 1, 0, -1):
            if self._open[depth].tag == tag:
                del self._open[depth:]
                return

    def handle_data(self, data: str) -> None:
        if self._open[-1].tag in {"script", "style"}:
            return
        for node in self._open:
            node.text += data


def _dom(text: str) -> _Element:
    parser = _Tree()
    parser.feed(text)
    return parser.root


def _rows(dom: _Element) -> list[_Element]:
    return [el for el in dom.by_id("spacer").children if "row" in el.classes]


def _row(dom: _Element, node_id: str) -> _Element:
    for row in _rows(dom):
        if row.find_all("span", "id")[0].words == node_id[:8]:
            return row
    raise AssertionError(f"no row drawn for {node_id[:8]}")


def _page_data(page: str) -> dict[str, object]:
    found = re.search(r'<script type="application/json" id="pollard-data">(.*?)</script>', page)
    assert found is not None
    data: dict[str, object] = json.loads(found.group(1))
    return data


@pytest.fixture
def sample_store() -> tuple[MemoryStore, Sample]:
    store = MemoryStore()
    return store, build_sample(store)


def test_the_page_draws_the_tree_with_markers_and_stays_content_free(
    browser: Browser, sample_store: tuple[MemoryStore, Sample], tmp_path: Path
) -> None:
    store, sample = sample_store
    page = tmp_path / "run.html"
    written = write_html(store, sample.root, page)
    assert written == page.stat().st_size
    dom = _load(browser, page)
    rows = _rows(dom)
    assert len(rows) == len(list(store.walk(sample.root)))

    assert _row(dom, sample.root).words.startswith("root f187428a triage")
    model = _row(dom, sample.model)
    assert "model_call" in model.words and "openai/gpt-5.5" in model.words
    assert "60 tok $0.0031" in model.words
    tool = _row(dom, sample.tool)
    assert "send@1" in tool.words and "[REDACTED]" in tool.words and "redacted" in tool.classes
    refusal = _row(dom, sample.refusal)
    assert "budget:tokens" in refusal.words and "[REFUSED]" in refusal.words
    assert "refused" in refusal.classes
    assert (
        "[PRUNED]" in _row(dom, sample.pruned).words
        and "pruned" in _row(dom, sample.pruned).classes
    )
    assert "under-pruned" in _row(dom, sample.pruned_child).classes
    assert "[CACHED]" in _row(dom, sample.left).words  # served with avoided charges
    # The root's subtree roll-up: its own cost is nothing, its subtree's the model call's.
    assert "\u03a3 $0.0031" in _row(dom, sample.root).words

    text = " ".join(browser.evaluate("document.body.innerText").split())
    assert "spent steps=4 tokens=135 usd=0.0031" in text
    assert "refusals 1" in text and "hidden (content-free view" in text
    assert "8 of 8 steps shown" in dom.by_id("count").words
    # Content-free by default: no prompt or result text in the file or in the drawn document.
    raw = page.read_text(encoding="utf-8")
    for secret in (SECRET_PROMPT, SECRET_RESULT, "tok-very-secret"):
        assert secret not in raw and secret not in text
    assert "Payload and result hidden" in dom.by_id("detail").words or "Select a row" in (
        dom.by_id("detail").words
    )


def test_payloads_appear_only_when_asked_for(
    browser: Browser, sample_store: tuple[MemoryStore, Sample], tmp_path: Path
) -> None:
    store, sample = sample_store
    page = tmp_path / "payloads.html"
    write_html(store, sample.root, page, payloads=True)
    dom = _load(browser, page, f"n-{sample.tool}")
    detail = dom.by_id("detail")
    assert detail.attrs["data-i"] != "" and sample.tool in detail.words
    assert "__pollard_redacted" in detail.find_all("pre", "payload")[0].words  # the marker
    assert "tok-very-secret" not in page.read_text(encoding="utf-8")  # never the secret
    dom = _load(browser, page, f"n-{sample.model}")
    assert SECRET_PROMPT in dom.by_id("detail").words
    assert SECRET_RESULT in dom.by_id("detail").words


def test_fan_out_children_show_their_prompt_index_in_prompt_order(
    browser: Browser, tmp_path: Path
) -> None:
    store = MemoryStore()
    run = build_fanout(store, 10)
    page = tmp_path / "fanout.html"
    write_html(store, run.root, page)
    raw = page.read_text(encoding="utf-8")
    assert not any(fanout_prompt(i) in raw for i in range(10))
    assert SECRET_PROMPT not in raw and SECRET_RESULT not in raw
    dom = _load(browser, page)
    rows = _rows(dom)
    # root, the ten prompts in prompt order (stored in id order), then the fan-in note
    labels = [row.find_all("span", "label")[0].words for row in rows]
    assert labels[1:11] == [
        f"#{i} budget:tokens"
        if run.calls[i] in run.refused
        else (f"#{i} call_failed model_call" if run.calls[i] in run.failed else f"#{i} gpt-5-nano")
        for i in range(10)
    ]
    assert [row.find_all("span", "id")[0].words for row in rows[1:11]] == [
        call[:8] for call in run.calls
    ]

    # The timeline: one bar per timed step, placed by start and sized by duration.
    bars = {row.find_all("span", "id")[0].words: row.find_all("span", "bar") for row in rows}
    first, second = bars[run.calls[0][:8]][0], bars[run.calls[8][:8]][0]
    assert float(first.attrs["data-start"]) < float(second.attrs["data-start"])
    assert first.attrs["style"].startswith("left:0.000%;width:")
    assert "refused" in bars[run.refused[0][:8]][0].classes
    assert "refused" in bars[run.refused[0][:8]][0].attrs["title"]
    assert "failed" in bars[run.failed[0][:8]][0].classes
    assert "retry" in bars[run.retried[0][:8]][0].classes
    assert re.search(r"in flight: at most [2-9] at once", dom.by_id("peak").words)
    assert dom.by_id("strip").find_all("rect")

    # The burn-down: tokens spent against the run's limit, the refusal marked.
    figures = {fig.attrs["data-meter"]: fig for fig in dom.find_all("figure", "burn-down")}
    tokens = figures["tokens"]
    assert tokens.find_all("path", "spent") and tokens.find_all("line", "limit")
    assert tokens.find_all("line", "limit")[0].attrs["data-limit"] == str(run.limit)
    assert len(tokens.find_all("g", "refusal-mark")) == 1
    assert f"of a limit of {run.limit:,}; 1 refusal" in tokens.words
    assert "usd" in figures and "no limit recorded" in figures["usd"].words
    # The top cost contributors name steps the reader can open.
    top = dom.by_id("top").find_all("button")
    assert top and all(b.attrs.get("data-go") for b in top) and "gpt-5-nano" in top[0].words


def test_the_filters_narrow_the_list(browser: Browser, tmp_path: Path) -> None:
    store = MemoryStore()
    run = build_fanout(store, 10)
    page = tmp_path / "fanout.html"
    write_html(store, run.root, page)

    dom = _load(browser, page, "status=refused")
    assert [r.find_all("span", "id")[0].words for r in _rows(dom)] == [i[:8] for i in run.refused]
    assert "1 of 12 steps shown" in dom.by_id("count").words

    # A cost range (own usd): prompts 5 and 6 cost 0.00047 and 0.00048.
    dom = _load(browser, page, "min=0.00047&max=0.00048")
    assert [r.find_all("span", "id")[0].words for r in _rows(dom)] == [
        run.calls[5][:8],
        run.calls[6][:8],
    ]
    # Kind and label text together.
    dom = _load(browser, page, "kind=model_call&q=" + quote("#6"))
    assert [r.find_all("span", "id")[0].words for r in _rows(dom)] == [run.calls[6][:8]]

    dom = _load(browser, page, "status=failed")
    assert [r.find_all("span", "id")[0].words for r in _rows(dom)] == [i[:8] for i in run.failed]


def test_a_10000_step_run_is_under_2_mb_and_draws_only_the_first_screen(
    browser: Browser, tmp_path: Path
) -> None:
    store = MemoryStore()
    run = build_fanout(store, 10_000)
    page = tmp_path / "big.html"
    size = write_html(store, run.root, page)
    assert size < 2_000_000, size
    raw = page.read_text(encoding="utf-8")
    assert SECRET_PROMPT not in raw and SECRET_RESULT not in raw
    dom = _load(browser, page)
    rows = _rows(dom)
    assert 10 < len(rows) < 100  # drawn on demand, not 10,002 elements
    assert "all 10,002 of 10,002 steps shown" in dom.by_id("count").words
    assert [r.find_all("span", "label")[0].words for r in rows[1:4]] == [
        "#0 gpt-5-nano",
        "#1 gpt-5-nano",
        "#2 gpt-5-nano",
    ]
    assert len(dom.find_all("g", "refusal-mark")) == len(run.refused)
    # A step far down opens from its fragment: the list scrolls to it and the panel shows it.
    dom = _load(browser, page, f"n-{run.calls[9_000]}")
    selected = [r for r in _rows(dom) if r.attrs["aria-selected"] == "true"]
    assert [r.find_all("span", "label")[0].words for r in selected] == ["#9000 gpt-5-nano"]
    assert run.calls[9_000] in dom.by_id("detail").words


def _stamp(ms: int) -> str:
    return f"2026-01-02T03:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}000Z"


def _wide_rows(count: int) -> list[ViewNode]:
    """``count`` view rows under one root, built directly (the page is what is under test)."""
    base = ViewNode(
        id="0" * 64,
        parent=None,
        kind="root",
        attempt=0,
        depth=0,
        label="wide",
        charges={},
        avoided={},
        refusal=None,
        pruned=False,
        redacted=False,
        dry_run=False,
        created_at="2026-01-02T03:04:05.000000Z",
        duration_s=None,
        result_conflicts=0,
        merge_conflicts=0,
    )
    rows = [base]
    from decimal import Decimal

    one, tokens = Decimal(1), Decimal(150)
    for n in range(1, count):
        rows.append(
            ViewNode(
                id=f"{n:064x}",
                parent=base.id,
                kind="model_call",
                attempt=0,
                depth=1,
                label="gpt-5-nano",
                charges={"steps": one, "tokens": tokens},
                avoided={},
                refusal=None,
                pruned=False,
                redacted=False,
                dry_run=False,
                created_at=_stamp(n * 20),
                duration_s=0.5,
                result_conflicts=0,
                merge_conflicts=0,
                fanout_index=n - 1,
                indent=1,
            )
        )
        base.children.append(rows[-1].id)
    return rows


def test_a_100000_step_run_still_opens(browser: Browser, tmp_path: Path) -> None:
    rows = _wide_rows(100_000)
    page = tmp_path / "huge.html"
    page.write_text(render_rows(rows, root_id=rows[0].id, payloads=False), encoding="utf-8")
    dom = _load(browser, page)
    assert "all 100,000 of 100,000 steps shown" in dom.by_id("count").words
    drawn = _rows(dom)
    assert 10 < len(drawn) < 100
    assert drawn[1].find_all("span", "label")[0].words == "#0 gpt-5-nano"
    assert drawn[1].find_all("span", "bar")


def test_the_page_loads_nothing_and_runs_only_its_own_script(
    sample_store: tuple[MemoryStore, Sample],
) -> None:
    store, sample = sample_store
    page = render_html(store, sample.root, payloads=True)
    dom = _dom(page)
    scripts = dom.find_all("script")
    assert [s.attrs.get("type") for s in scripts] == ["application/json", None]
    assert all("src" not in s.attrs for s in scripts)
    assert not {e.tag for e in dom.find_all()} & {
        "img",
        "link",
        "iframe",
        "object",
        "embed",
        "video",
        "audio",
        "source",
    }
    for element in dom.find_all():
        for name, value in element.attrs.items():
            assert not name.startswith("on"), (element.tag, name)
            if name in {"href", "src", "action"}:
                assert value.startswith("#"), (element.tag, name, value)
    assert not re.search(r"url\(|@import|https?://", page.replace("http-equiv", ""))
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert policy is not None
    assert policy.group(1).startswith(
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-"
    )
    # The data is JSON inside its element: no "<" can close it early.
    assert "<" not in page.split('id="pollard-data">')[1].split("</script>")[0]
    assert _page_data(page)["n"] == 8


def test_markup_in_labels_is_escaped(tmp_path: Path) -> None:
    from pollard import Node, NodeKind

    store = MemoryStore()
    root = Node.create(NodeKind.ROOT, None, {"run": "</script><script>alert(1)</script>"})
    store.put(root)
    page = render_html(store, root.id)
    assert "alert(1)</script>" not in page and "<script>alert" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the title
    assert _page_data(page)["strings"] == ["</script><script>alert(1)</script>"]


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
    assert _page_data(page)["n"] == 8  # the tree is still shown


def test_bars_rows_keys_and_controls_drive_the_page(browser: Browser, tmp_path: Path) -> None:
    store = MemoryStore()
    run = build_fanout(store, 10)
    page = tmp_path / "fanout.html"
    write_html(store, run.root, page)
    browser.open(page)

    def shown() -> list[str]:
        ids: list[str] = browser.evaluate(
            "[...document.querySelectorAll('#spacer .row .id')].map(e => e.textContent)"
        )
        return ids

    def detail() -> str:
        text: str = browser.evaluate("document.getElementById('detail').innerText")
        return text

    # Clicking a timeline bar opens its step.
    browser.evaluate(f"document.querySelector('#r-{7} .bar').click()")
    assert run.calls[6] in detail() and "#6" in detail()  # row 7 is prompt 6 (after the root)
    # Keys move the selection through the list; Left goes to the parent.
    browser.evaluate("document.getElementById('steps').focus()")
    browser.press("ArrowDown")
    assert run.calls[7] in detail()
    browser.press("End")
    assert run.fan_in in detail()
    browser.press("Home")
    browser.press("ArrowDown")
    assert run.calls[0] in detail()
    browser.press("ArrowLeft")
    assert run.root in detail()
    selected = browser.evaluate(
        "document.getElementById('steps').getAttribute('aria-activedescendant')"
    )
    assert selected == "r-0"
    row = "document.getElementById('r-0')"
    assert browser.evaluate(
        f"[{row}.getAttribute('role'), {row}.getAttribute('aria-posinset')]"
    ) == [
        "treeitem",
        "1",
    ]
    # The controls filter as the reader types.
    browser.evaluate(
        "(() => { const s = document.getElementById('f-status'); s.value = 'refused';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    assert shown() == [r[:8] for r in run.refused]
    browser.evaluate(
        "(() => { document.getElementById('f-status').value = '';"
        " const t = document.getElementById('f-text'); t.value = 'CALL_FAILED';"
        " t.dispatchEvent(new Event('input')); })()"
    )
    assert shown() == [f[:8] for f in run.failed]
    # Printing draws every shown row in the page flow (no virtual list on paper).
    browser.evaluate(
        "(() => { const t = document.getElementById('f-text'); t.value = '';"
        " t.dispatchEvent(new Event('input')); window.dispatchEvent(new Event('beforeprint')); })()"
    )
    assert len(shown()) == 12
    assert browser.evaluate("document.querySelector('#spacer .row').style.top") == ""


def test_the_page_reads_in_light_and_dark(browser: Browser, tmp_path: Path) -> None:
    store = MemoryStore()
    sample = build_sample(store)
    page = tmp_path / "run.html"
    write_html(store, sample.root, page)
    colours = {}
    for scheme in ("light", "dark"):
        browser.color_scheme(scheme)
        browser.open(page)
        colours[scheme] = browser.evaluate(
            "[getComputedStyle(document.body).backgroundColor,"
            " getComputedStyle(document.body).color]"
        )
    browser.color_scheme("light")
    assert colours["light"] == ["rgb(255, 255, 255)", "rgb(29, 31, 35)"]
    assert colours["dark"] == ["rgb(21, 23, 26)", "rgb(230, 232, 235)"]
