"""The static book in a real browser: Debian's Chromium, driven by Playwright.

Serves book/_build/html from 127.0.0.1 (building the book first if it is missing or stale) and
checks every page of the table of contents: it loads with no console error, no failed or
off-machine request, MathJax has typeset every formula (no raw ``$...$`` left), every image has a
non-zero natural size, solutions stay hidden until their toggle is clicked, and each static
widget switches its displayed output when a control moves. Screenshots of two pages are saved
under book/_build/screenshots/.

Chromium comes from `make browser-deps` (a prerequisite of `make test`). Without it this module
skips locally and fails under CI (CI=true), so a missing browser cannot pass silently there.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from bookkit import build_book as book


CHROMIUM = Path("/usr/bin/chromium")
# as root on a machine without outside network: no sandbox, no GPU, no background connections
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
SCREENSHOTS = book.BOOK / "_build" / "screenshots"

if not CHROMIUM.exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: `make browser-deps` installs it", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing: run `make browser-deps`", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


def toc_pages() -> list[str]:
    toc = book.make_toc()
    return [toc["root"]] + [c["file"] for p in toc["parts"] for c in p["chapters"]]


PAGES = toc_pages()
CHAPTER_PAGES = [p for p in PAGES if p.startswith("chapters/")]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="module")
def site():
    html = book.ensure_built()
    handler = functools.partial(_QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class PageLog:
    """Console errors, uncaught exceptions, failed and off-machine requests of one page."""

    def __init__(self, page, site: str):
        self.problems: list[str] = []
        host = urlparse(site).netloc
        page.on("console", lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"))
        page.on("pageerror", lambda e: self.problems.append(f"uncaught exception: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))

        def on_request(r):
            u = urlparse(r.url)
            if u.scheme in ("http", "https", "ws", "wss") and u.netloc != host:
                self.problems.append(f"off-machine request: {r.url}")
        page.on("request", on_request)


def open_page(browser, site: str, name: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log = PageLog(page, site)
    page.goto(f"{site}/{name}.html", wait_until="load")
    # MathJax 3 typesets asynchronously: wait for its startup promise where the page loads it
    page.wait_for_function("() => !document.querySelector('script[src*=\"mathjax/tex-chtml\"]')"
                           " || (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)")
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    return page, log


# text of the article without code, program output, rendered math and the widgets' printed text
_PROSE_JS = """() => {
  const a = document.querySelector('article') || document.body;
  const c = a.cloneNode(true);
  c.querySelectorAll('pre, code, mjx-container, script, style, .highlight, .cell_output, .tlib-widget')
   .forEach(e => e.remove());
  return c.textContent;
}"""
RAW_MATH = re.compile(r"\$[^$\s][^$]*\$|\\\(|\\\[|\\begin\{")


@pytest.mark.parametrize("name", PAGES)
def test_page_loads_clean_with_math_and_figures(browser, site, name):
    page, log = open_page(browser, site, name)
    try:
        n_math = page.locator("article .math").count()
        n_typeset = page.locator("article mjx-container").count()
        assert n_typeset >= n_math, f"{name}: {n_math} formulas, only {n_typeset} typeset by MathJax"
        if n_math:
            assert page.evaluate("() => !!window.MathJax && !!MathJax.version"), "MathJax did not load"
        raw = RAW_MATH.findall(page.evaluate(_PROSE_JS))
        assert not raw, f"{name}: math left untypeset: {raw[:5]}"
        # every image, visible or in a hidden widget panel, decodes to a non-empty picture
        sizes = page.evaluate("""async () => {
            const imgs = [...document.querySelectorAll('article img')];
            await Promise.all(imgs.map(i => i.decode().catch(() => null)));
            return imgs.map(i => [i.getAttribute('alt') || i.currentSrc.slice(0, 80), i.naturalWidth, i.naturalHeight]);
        }""")
        empty = [s for s in sizes if s[1] == 0 or s[2] == 0]
        assert not empty, f"{name}: {len(empty)} of {len(sizes)} images are empty: {empty[:3]}"
        assert not log.problems, f"{name}:\n" + "\n".join(log.problems)
    finally:
        page.close()


def _visible_panels(widget) -> list[str]:
    return widget.evaluate("w => [...w.querySelectorAll('.tlib-panel')]"
                           ".filter(p => getComputedStyle(p).display !== 'none').map(p => p.dataset.key)")


def _move_a_control(page, widget) -> bool:
    """Change the first control that has more than one setting, as a reader would; False if none.

    (A Text control without presets is a one-option dropdown in the static book.)"""
    controls = widget.locator("[data-tlib-control]")
    for k in range(controls.count()):
        control = controls.nth(k)
        kind = control.evaluate("c => c.tagName.toLowerCase() + ':' + (c.type || '')")
        if kind == "input:range" and control.evaluate("c => Number(c.max) > Number(c.min)"):
            at_max = control.evaluate("c => c.value === c.max")
            control.focus()
            page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")  # a real key press: fires 'input'
            return True
        if kind == "input:checkbox":
            control.click()
            return True
        if kind.startswith("select"):
            options = control.evaluate("c => [...c.options].map(o => o.value)")
            if len(options) > 1:
                current = control.input_value()
                control.select_option(next(v for v in options if v != current))
                return True
    return False


@pytest.mark.parametrize("name", CHAPTER_PAGES)
def test_static_widgets_switch_output(browser, site, name):
    page, log = open_page(browser, site, name)
    try:
        widgets = page.locator(".tlib-widget")
        for k in range(widgets.count()):
            w = widgets.nth(k)
            w.scroll_into_view_if_needed()
            before = _visible_panels(w)
            assert len(before) == 1, f"{name} widget {k}: {len(before)} panels shown at first"
            shown_before = w.locator(".tlib-panel:visible").first.inner_html()
            assert _move_a_control(page, w), f"{name} widget {k}: no control with more than one setting"
            after = _visible_panels(w)
            assert len(after) == 1 and after != before, f"{name} widget {k}: panels {before} -> {after}"
            if k == 0:  # the displayed output itself changed, not just the panel's key
                assert w.locator(".tlib-panel:visible").first.inner_html() != shown_before
        assert not log.problems, f"{name}:\n" + "\n".join(log.problems)
    finally:
        page.close()


def test_slider_changes_figure_and_screenshots(browser, site):
    """The how-to chapter's temperature slider: the label, the figure and the numbers change."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page, log = open_page(browser, site, "chapters/00-how-to-use")
    try:
        w = page.locator(".tlib-widget").first
        slider = w.locator("input[type=range]").first
        label = w.locator("output").first
        panel = w.locator(".tlib-panel:visible")
        before = (label.inner_text(), panel.locator("img").get_attribute("src"), panel.locator("pre").inner_text())
        slider.focus()
        page.keyboard.press("ArrowRight")
        after = (label.inner_text(), panel.locator("img").get_attribute("src"), panel.locator("pre").inner_text())
        assert before[0] != after[0], "the slider's value label did not change"
        assert before[1] != after[1], "the figure did not change"
        assert before[2] != after[2], "the printed weights did not change"
        w.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / "00-how-to-use.png"), full_page=False)
        assert not log.problems, "\n".join(log.problems)
    finally:
        page.close()
    second = next((p for p in CHAPTER_PAGES if not p.endswith("00-how-to-use")), "notation")
    page, log = open_page(browser, site, second)
    try:
        page.screenshot(path=str(SCREENSHOTS / f"{Path(second).name}.png"), full_page=False)
    finally:
        page.close()
    assert (SCREENSHOTS / "00-how-to-use.png").stat().st_size > 10_000


def test_solutions_hidden_until_toggled(browser, site):
    pages = [p for p in CHAPTER_PAGES
             if 'tag_solution' in (book.HTML / f"{p}.html").read_text(encoding="utf8")]
    assert pages, "no chapter page has a solution cell"
    for name in pages:
        page, log = open_page(browser, site, name)
        try:
            cells = page.locator("div.cell.tag_solution")
            for k in range(cells.count()):
                cell = cells.nth(k)
                code = cell.locator(".cell_input pre").first
                assert not code.is_visible(), f"{name}: solution {k} is visible before its toggle"
                toggle = cell.locator("summary").first
                assert "solution" in toggle.inner_text().lower()
                toggle.click()
                assert code.is_visible(), f"{name}: solution {k} did not open"
            assert not log.problems, "\n".join(log.problems)
        finally:
            page.close()


def test_search_works_offline(browser, site):
    page = browser.new_page()
    log = PageLog(page, site)
    try:
        page.goto(f"{site}/search.html?q=softmax", wait_until="load")
        hits = page.locator("#search-results ul.search li")
        hits.first.wait_for(timeout=20_000)
        assert hits.count() >= 1
        assert not log.problems, "\n".join(log.problems)
    finally:
        page.close()
