"""explainer.html: the chapter-16 GPT running in the page (onnxruntime-web), in Debian's Chromium.

Builds only the explainer (bookkit.explainer.build.write_explainer) into a temporary folder,
serves it from 127.0.0.1 (bookkit.browser.serve) and checks, against torch:

* the JavaScript tokenizer (bpe.js, run by node: tests/bookkit/bpe_parity.js) gives the Python
  tokenizer's ids on varied strings (accents, emoji, CJK, tabs, runs of spaces, newlines, the
  empty string, whitespace that JavaScript's \\s and Python's differ on) and on random text;
* the page's top-10 candidates (``data-token-id``, ``data-prob``) equal torch's softmax on several
  prompts to 1e-4, and its attention maps equal the model's to 1e-5;
* "Continue" with top-k 1 appends torch's greedy token; a seed gives the same continuation twice;
* a reader's own exported model, picked with the file input, replaces the book's;
* the attention map's rows and columns are labelled with the tokens (each label centred on its
  row or column), and its colour scale runs from weight 0 to 1 in the map's own colours;
* a first load fetches the single-threaded WebAssembly build only, each file once, under 12 MB;
* every request goes to 127.0.0.1; the page fits 390 px without sideways scrolling and keeps
  4.5:1 contrast in dark mode.

The edit-to-candidates time is printed (``-s`` shows it), never asserted.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch

from bookkit.explainer import EDITS_JS
from bookkit.browser import CHROMIUM, chromium, serve

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
if not CHROMIUM.exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: `make browser-deps` installs it", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing: run `make browser-deps`", allow_module_level=True)
pytest.importorskip("playwright.sync_api")

from hypothesis import given, settings, strategies as st  # noqa: E402

import transformer_lib as tl  # noqa: E402
from bookkit.explainer.build import unicode_classes, write_explainer  # noqa: E402
from transformer_lib.data import load_gpt_checkpoint  # noqa: E402
from transformer_lib.export import export_onnx  # noqa: E402
from transformer_lib.tokenization import BPETokenizer  # noqa: E402

PARITY_JS = Path(__file__).with_name("bpe_parity.js")
NODE = shutil.which("node")
PHONE = {"width": 390, "height": 844}
PROMPTS = ["The attention of a head is", "A transformer", "Über café, 東京 🙂 and\ttabs",
           "In chapter 16 the model\n\nlearns   to", "the " * 80]
VARIED = ["", " ", "a", "Hello, world!", "café naïve Über façade", "Ünïcödé ß ø å æ œ", "🙂👍🏽👩‍👩‍👧 emoji",
          "東京 中文 日本語のテキスト 한국어", "tab\there\t\tand\t", "many     spaces   ", "line\n\nbreaks\r\n\n",
          "it's we're I'll they'd you've", "x\u0085y\ufeffz\u00a0w\u2028v", "123 4567 3.14 ١٢٣", "\u1680\u3000 \u205f",
          "  \n  ", "<|endoftext|>", "a" * 300, "—–‐‑‒ «quotes» „Anführung“", "Ελληνικά Русский עברית العربية"]


@pytest.fixture(scope="module")
def book_gpt():
    return load_gpt_checkpoint()


@pytest.fixture(scope="module")
def classes():
    return unicode_classes()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explainer-site")
    write_explainer(folder)
    with serve(folder) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


class Requests:
    """Every request, console error and uncaught exception of one page."""

    def __init__(self, page):
        self.urls, self.problems = [], []
        page.on("request", lambda r: self.urls.append(r.url))
        page.on("console", lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"))
        page.on("pageerror", lambda e: self.problems.append(f"uncaught exception: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))


def open_explainer(browser, site, **context):
    ctx = browser.new_context(**context)
    page = ctx.new_page()
    log = Requests(page)
    page.goto(f"{site}/explainer.html", wait_until="load")
    page.evaluate("() => window.explainer.ready")
    return ctx, page, log


@torch.no_grad()
def torch_top(model, tok, text: str, k: int = 10, context: int = 64):
    ids = torch.tensor([tok.encode(text)[-context:]])
    probs = torch.softmax(model(ids)[0, -1].double(), dim=-1)
    top = probs.topk(k)
    return top.indices.tolist(), top.values.tolist(), ids


# -- the tokenizer in JavaScript ----------------------------------------------------------------

def node_encode(tokenizer: BPETokenizer, classes: dict, strings: list[str], tmp_path: Path) -> dict:
    if NODE is None:
        pytest.skip("node is missing (Debian: apt-get install nodejs)")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"tokenizer": json.loads(tokenizer.to_json()), "classes": classes,
                                 "strings": strings}, ensure_ascii=False), encoding="utf-8")
    done = subprocess.run([NODE, str(PARITY_JS), str(cases)], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_js_tokenizer_ids_equal_python_on_varied_strings(book_gpt, classes, tmp_path):
    _, tok, _ = book_gpt
    out = node_encode(tok, classes, VARIED, tmp_path)
    assert out["size"] == len(tok)
    for text, ids, decoded in zip(VARIED, out["ids"], out["decoded"]):
        assert ids == tok.encode(text), repr(text)
        assert decoded == text, repr(text)


def test_js_tokenizer_with_special_tokens(classes, tmp_path):
    tok = BPETokenizer.train("the cat sat on the mat.<|endoftext|>the dog ate it<|endoftext|>" * 30, 300,
                             special_tokens=["<|endoftext|>", "<|user|>"])
    strings = ["the cat<|endoftext|>the dog", "<|user|>hi<|endoftext|>", "<|endoftext", "cat sat"]
    out = node_encode(tok, classes, strings, tmp_path)
    assert out["ids"] == [tok.encode(s) for s in strings]


@settings(max_examples=5, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=40, max_size=40))
def test_js_tokenizer_ids_equal_python_on_random_text(book_gpt, classes, tmp_path_factory, strings):
    _, tok, _ = book_gpt
    out = node_encode(tok, classes, strings, tmp_path_factory.mktemp("random"))
    assert out["ids"] == [tok.encode(s) for s in strings]


# -- the page against torch ---------------------------------------------------------------------

def test_top10_candidates_equal_torch(browser, site, book_gpt):
    model, tok, _ = book_gpt
    ctx, page, log = open_explainer(browser, site)
    try:
        for n, text in enumerate(PROMPTS):
            if n == 0:  # typed, as a reader does: the input event drives the update
                page.fill("#explainer-input", text)
                page.wait_for_function("t => document.getElementById('explainer-next').dataset.text === t", arg=text)
            else:
                page.evaluate("t => window.explainer.update(t)", text)
            shown = page.evaluate("""() => [...document.querySelectorAll('#explainer-next > [data-token-id]')]
                                     .map(e => [Number(e.dataset.tokenId), Number(e.dataset.prob)])""")
            assert page.evaluate("() => document.getElementById('explainer-next').dataset.text") == text
            ids, probs, _ = torch_top(model, tok, text)
            assert [i for i, _ in shown] == ids, text
            for (_, p_page), p_torch in zip(shown, probs):
                assert abs(p_page - p_torch) <= 1e-4, (text, p_page, p_torch)
        assert not log.problems, log.problems
    finally:
        ctx.close()


@torch.no_grad()
def test_attention_maps_equal_torch_and_the_canvas_changes_with_the_head(browser, site, book_gpt):
    from transformer_lib.export import ExportGraph, export_config

    model, tok, _ = book_gpt
    ctx, page, _ = open_explainer(browser, site)
    try:
        text = PROMPTS[3]
        page.evaluate("t => window.explainer.update(t)", text)
        _, attention, _ = ExportGraph(model, export_config(model, tok)).eval()(torch.tensor([tok.encode(text)]))
        for layer in range(2):
            for head in range(4):
                rows = torch.tensor(page.evaluate("([l, h]) => window.explainer.attention(l, h)", [layer, head]))
                torch.testing.assert_close(rows, attention[0, layer, head], rtol=0, atol=1e-5)
        # pointing at a square names its two tokens and the weight torch computed for it
        L = len(tok.encode(text))
        page.locator("#explainer-attention").scroll_into_view_if_needed()
        box = page.locator("#explainer-attention").bounding_box()
        q, k = L - 1, 1
        page.mouse.move(box["x"] + (k + 0.5) * box["width"] / L, box["y"] + (q + 0.5) * box["height"] / L)
        cell = page.locator("#explainer-cell").text_content()
        assert f"token {q + 1} " in cell and f"token {k + 1} " in cell, cell
        assert f"{float(attention[0, 0, 0, q, k]):.3f}" in cell, cell
        pixels = "() => document.getElementById('explainer-attention').toDataURL()"
        before = page.evaluate(pixels)
        page.select_option("#explainer-head", "2")
        assert page.evaluate(pixels) != before, "choosing another head did not redraw the map"
        assert page.locator("#explainer-tokens code").count() == len(tok.encode(text))
    finally:
        ctx.close()


def test_continue_is_greedy_at_top_k_1_and_reproducible_with_a_seed(browser, site, book_gpt):
    model, tok, _ = book_gpt
    ctx, page, _ = open_explainer(browser, site)
    try:
        start = "The model"
        page.fill("#explainer-input", start)
        page.fill("#explainer-topk", "1")
        page.evaluate("t => window.explainer.update(t)", start)
        chosen = page.evaluate("() => window.explainer.continueOne()")
        greedy = torch_top(model, tok, start, k=1)[0][0]
        assert chosen == greedy
        assert page.input_value("#explainer-input") == start + tok.decode([greedy])

        def sample(seed: int) -> str:
            page.fill("#explainer-topk", "40")
            page.fill("#explainer-seed", str(seed))
            page.fill("#explainer-input", start)
            page.evaluate("t => window.explainer.update(t)", start)
            for _ in range(6):
                page.click("#explainer-continue")
                page.wait_for_function("() => document.getElementById('explainer-next').dataset.text === "
                                       "document.getElementById('explainer-input').value")
            return page.input_value("#explainer-input")

        first, again, other = sample(7), sample(7), sample(8)
        assert first == again and first != start
        assert other != first, "seeds 7 and 8 sampled the same six tokens"
    finally:
        ctx.close()


@torch.no_grad()
def test_a_readers_own_rope_model_replaces_the_books(browser, site, tmp_path):
    tok = BPETokenizer.train("the cat sat on the mat; the dog sat on the log. " * 30, 280)
    torch.manual_seed(3)
    # chapter 16's GPT trained with RoPE instead of a learned table: exported through its own forward
    model = tl.DecoderOnlyLM(len(tok), d_model=32, num_heads=4, num_kv_heads=2, num_layers=3, max_len=32,
                             positional="rope").eval()  # a grouped-query RoPE GPT: 2 key/value heads for 4
    path = export_onnx(model, tmp_path / "my_gpt.onnx", tok)
    ctx, page, log = open_explainer(browser, site)
    try:
        page.set_input_files("#explainer-file", str(path))
        page.wait_for_function("() => document.getElementById('explainer-model').textContent.includes('my_gpt.onnx')")
        text = "the dog sat on"
        page.evaluate("t => window.explainer.update(t)", text)
        shown = page.evaluate("() => window.explainer.candidates()")
        ids, probs, _ = torch_top(model, tok, text, k=10, context=32)
        assert [c["id"] for c in shown] == ids
        assert max(abs(c["prob"] - p) for c, p in zip(shown, probs)) <= 1e-4
        assert page.locator("#explainer-layer option").count() == 3
        # a file that is not an exported model is refused with a message, and nothing breaks
        bad = tmp_path / "notes.onnx"
        bad.write_bytes(b"not a model")
        page.set_input_files("#explainer-file", str(bad))
        page.wait_for_function("() => document.getElementById('explainer-status').textContent.includes('Could not use')")
        assert not log.problems, log.problems
    finally:
        ctx.close()


# -- the attention map's axes and scale, the page's weight -------------------------------------

AXES_JS = """() => {
  const map = document.getElementById('explainer-attention').getBoundingClientRect();
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const labels = id => [...document.querySelectorAll('#' + id + ' code')].map(e => [e.textContent, box(e)]);
  return {map: [map.left, map.top, map.right, map.bottom], rows: labels('explainer-rows'), cols: labels('explainer-cols')};
}"""

# the map's colour at weight w (read from its canvas) and the scale's colour at position w
PIXELS_JS = """([q, k]) => {
  const map = document.getElementById('explainer-attention'), L = window.explainer.ids.length;
  const cell = map.width / L, g = map.getContext('2d');
  const at = [...g.getImageData(Math.floor((k + 0.5) * cell), Math.floor((q + 0.5) * cell), 1, 1).data].slice(0, 3);
  const scale = document.getElementById('explainer-scale'), s = scale.getContext('2d');
  const end = x => [...s.getImageData(x, scale.height >> 1, 1, 1).data].slice(0, 3);
  return {cell: at, low: end(0), high: end(scale.width - 1),
          ticks: [...document.querySelectorAll('.ex-scale-tick')].map(e => e.textContent),
          colour1: window.explainer.colour(1), colour0: window.explainer.colour(0)};
}"""


def test_both_axes_of_the_map_are_labelled_with_the_tokens(browser, site, book_gpt):
    model, tok, _ = book_gpt
    ctx, page, _ = open_explainer(browser, site)
    try:
        for text in (PROMPTS[0], PROMPTS[3]):
            page.evaluate("t => window.explainer.update(t)", text)
            shown = [tok.decode([i]).replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")
                     for i in tok.encode(text)]
            got = page.evaluate(AXES_JS)
            left, top, right, bottom = got["map"]
            L = len(shown)
            assert [t for t, _ in got["rows"]] == shown and [t for t, _ in got["cols"]] == shown, text
            band = (bottom - top) / L
            for q, (_, (l, t, r, b)) in enumerate(got["rows"]):  # row label q: left of the map, on row q
                assert r <= left + 1 and abs((t + b) / 2 - (top + (q + 0.5) * band)) <= 1, (q, t, b)
            band = (right - left) / L
            for k, (_, (l, t, r, b)) in enumerate(got["cols"]):  # column label k: above the map, on column k
                assert b <= top + 1 and abs((l + r) / 2 - (left + (k + 0.5) * band)) <= 1, (k, l, r)
    finally:
        ctx.close()


def test_the_colour_scale_runs_from_weight_0_to_1_in_the_maps_colours(browser, site):
    ctx, page, _ = open_explainer(browser, site)
    try:
        page.evaluate("t => window.explainer.update(t)", PROMPTS[0])
        got = page.evaluate(PIXELS_JS, [0, 0])  # row 1 sees only itself: weight exactly 1
        rgb = lambda s: [int(x) for x in s[4:-1].split(",")]  # noqa: E731
        assert got["ticks"] == ["0", "1"]
        assert got["high"] == rgb(got["colour1"]) == got["cell"], got
        assert got["low"] == rgb(got["colour0"]), got
        assert sum(got["low"]) > sum(got["high"]) + 300, "weight 0 must be light and weight 1 dark"
    finally:
        ctx.close()


def test_first_load_fetches_the_single_threaded_build_only(browser, site):
    """Bytes fetched on a first load (empty cache): the page, its scripts, the model and the
    single-threaded WebAssembly, each once. The threaded build it replaced made this ~15 MB."""
    ctx = browser.new_context()
    page = ctx.new_page()
    fetched = []
    page.on("requestfinished", lambda r: fetched.append((r.url, r.sizes()["responseBodySize"])))
    try:
        page.goto(f"{site}/explainer.html", wait_until="load")
        page.evaluate("() => window.explainer.ready")
        page.wait_for_load_state("networkidle")
        total = sum(size for _, size in fetched)
        print(f"\nfirst load: {len(fetched)} requests, {total / 1e6:.2f} MB")
        wasm = [u for u, _ in fetched if u.endswith(".wasm")]
        assert [u.rsplit("/", 1)[1] for u in wasm] == ["ort-wasm-simd.wasm"], wasm
        assert not [u for u, _ in fetched if "thread" in u or "worker" in u or "jsep" in u]
        assert len({u for u, _ in fetched}) == len(fetched), "a file was fetched twice"
        # the SIMD .wasm (10.6 MB), the model with its tokenizer (~1 MB), ~0.15 MB of page and script
        assert total <= 12e6, f"the first load fetched {total / 1e6:.2f} MB"
    finally:
        ctx.close()


# -- offline, latency, phone, dark --------------------------------------------------------------

def test_no_request_leaves_the_machine_and_edits_update_fast(browser, site):
    ctx, page, log = open_explainer(browser, site)
    try:
        # edit-to-candidates: from the input event to the list holding the new text's candidates
        times, _ = page.evaluate(EDITS_JS, [20, False])
        print(f"\nedit -> candidates over {len(times)} edits: median {statistics.median(times):.1f} ms, "
              f"max {max(times):.1f} ms (target < 100 ms; machine load {os.getloadavg()[0]:.1f})")
        host = urlparse(site).netloc
        assert log.urls, "no request recorded"
        off = [u for u in log.urls if urlparse(u).scheme not in ("data", "blob") and urlparse(u).netloc != host]
        assert not off, f"requests left the machine: {off}"
        assert any(u.endswith(".wasm") for u in log.urls), "onnxruntime's WebAssembly was not loaded locally"
        assert not log.problems, log.problems
    finally:
        ctx.close()


def test_phone_layout_has_no_sideways_scroll(browser, site):
    ctx, page, _ = open_explainer(browser, site, viewport=PHONE)
    try:
        page.evaluate("t => window.explainer.update(t)", PROMPTS[4])
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"the page is {width} px wide at {PHONE['width']} px"
        box = page.locator("#explainer-attention").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
        assert page.locator("#explainer-next > li").count() == 10
    finally:
        ctx.close()


CONTRAST_JS = """() => {
  const parse = c => c.match(/[\\d.]+/g).map(Number);
  const lum = c => { const f = x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); };
                     return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const bgOf = e => { for (let a = e; a; a = a.parentElement) { const c = parse(getComputedStyle(a).backgroundColor);
                      if (c.length < 4 || c[3] > 0.5) return c; } return [255, 255, 255]; };
  const low = [];
  for (const e of document.querySelectorAll('h1, h2, p, label, li, code, a, textarea, button, select')) {
    if (!e.textContent.trim() && e.tagName !== 'TEXTAREA') continue;
    const a = lum(parse(getComputedStyle(e).color)), b = lum(bgOf(e));
    const r = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (r < 4.5) low.push([e.tagName, e.className, Math.round(r * 100) / 100, e.textContent.trim().slice(0, 30)]);
  }
  return {low, bg: getComputedStyle(document.body).backgroundColor, theme: document.documentElement.dataset.theme};
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_light_and_dark_mode_keep_aa_contrast(browser, site, scheme):
    ctx, page, _ = open_explainer(browser, site, color_scheme=scheme)
    try:
        page.fill("#explainer-topk", "3")  # greyed candidates outside the top-k are checked too
        page.evaluate("t => window.explainer.update(t)", PROMPTS[0])
        result = page.evaluate(CONTRAST_JS)
        assert result["theme"] == scheme
        bg = [float(x) for x in result["bg"][4:-1].split(",")[:3]]
        assert (sum(bg) / 3 < 60) == (scheme == "dark"), f"{scheme} mode has background {result['bg']}"
        assert not result["low"], f"text below 4.5:1 in {scheme} mode: {result['low'][:5]}"
    finally:
        ctx.close()


def test_write_explainer_names_a_bad_folder(tmp_path):
    with pytest.raises(TypeError, match="out_dir"):
        write_explainer(3)
    with pytest.raises(ValueError, match="out_dir"):
        write_explainer(tmp_path / "missing")


def test_opened_from_disk_the_model_starts_and_answers_as_over_http(browser, site, tmp_path, book_gpt):
    """The offline bundle's promise (`make dist`: open html/index.html): from a file:// URL a
    browser refuses fetch(), so the page takes the model and the runtime's .wasm from
    explainer/offline.js; the candidates are the same as over HTTP, and nothing leaves the disk."""
    folder = tmp_path / "from-disk"
    folder.mkdir()
    write_explainer(folder)
    ctx = browser.new_context()
    page = ctx.new_page()
    log = Requests(page)
    try:
        page.goto((folder / "explainer.html").as_uri(), wait_until="load")
        page.evaluate("() => window.explainer.ready")
        text = "The attention of a model"
        page.evaluate("t => window.explainer.update(t)", text)
        from_disk = page.evaluate("""() => [...document.querySelectorAll('#explainer-next > [data-token-id]')]
                                     .map(e => Number(e.dataset.tokenId))""")
        assert "could not start" not in page.locator("#explainer-status").inner_text()
        ids, _, _ = torch_top(book_gpt[0], book_gpt[1], text)
        assert from_disk == ids, (from_disk, ids)
        off = [u for u in log.urls if urlparse(u).scheme not in ("file", "data", "blob")]
        assert not off, f"requests left the disk: {off}"
        assert not log.problems, log.problems
    finally:
        ctx.close()
