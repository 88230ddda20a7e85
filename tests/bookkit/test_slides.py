"""The lecture decks (`make slides`, bookkit/slides.py), opened in Chromium as a lecturer would.

Every chapter's deck is built once (session fixture) into a temporary folder. Each deck: offline
(every asset local, no request leaves the machine), every slide fits the 1280 x 720 frame without
scrolling, no slide is empty, headings keep their case, all math is typeset by the local MathJax
(no TeX left as text), and the deck holds the chapter's key points and its figures.
"""
from __future__ import annotations

import json
import os
import re
from urllib.parse import urlparse

import nbformat
import pytest

from bookkit import build_book as book
from bookkit import slides
from bookkit.browser import CHROMIUM, chromium, serve

STEMS = book.existing_chapters()
URL_ATTR = re.compile(r"""(?:src|href)\s*=\s*["']\s*(?:https?:)?//""", re.I)


@pytest.fixture(scope="session")
def decks(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    slides.build_decks([book.CHAPTERS_SRC / f"{s}.ipynb" for s in STEMS], out)
    return out


def _notebook(stem):
    return nbformat.read(str(book.CHAPTERS_SRC / f"{stem}.ipynb"), as_version=4)


def test_every_chapter_has_a_deck_with_local_assets_only(decks):
    for stem in STEMS:
        page = (decks / f"{stem}.html").read_text(encoding="utf8")
        assert not URL_ATTR.search(page), f"{stem}: the deck references an external URL"
        for ref in set(re.findall(r"""(?:src|href)=["']([^"']+)["']""", page)):
            if not ref.startswith(("data:", "#")):
                assert (decks / ref).exists(), f"{stem}: missing local asset {ref}"
    for css in decks.glob("_assets/**/*.css"):
        assert not re.search(r"url\(\s*['\"]?https?:", css.read_text()), f"{css.name} loads a remote resource"


def test_deck_is_built_from_key_points_and_figures_not_every_cell():
    nb = _notebook("03-multi-head-attention")
    deck = slides.notebook_to_slides(nb, "03-multi-head-attention")
    text = "\n".join(deck)
    first = next(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Key points" in text and "Short answer" in text
    points = re.findall(r"^- (.+)$", first.split("**Key points.**")[1].split("\n## ")[0], re.M)
    for point in points:  # each key point's first words are on a slide
        words = re.sub(r"\$[^$]*\$", "", point).split()[:3]
        assert all(html_escape(w) in text for w in words if w.isalpha()), point
    figures = sum(len(slides._figures(c)) for c in nb.cells if c.cell_type == "code"
                  and "solution" not in c.metadata.get("tags", []))
    assert text.count("<img ") >= figures > 0
    assert len(deck) < sum(1 for c in nb.cells), "one slide per cell is not a deck"
    for cell in nb.cells:  # no long code on a slide, no exercise or solution
        if cell.cell_type == "code" and len(cell.source.strip().split("\n")) > slides.MAX_CODE_LINES:
            assert html_escape(cell.source.strip()) not in text
    assert "YOUR CODE HERE" not in text


def html_escape(s: str) -> str:
    import html
    return html.escape(s)


def test_sentences_are_never_cut():
    paragraph = " ".join(f"Sentence number {i} has exactly seven words." for i in range(30))
    chunks = slides._sentences_in_chunks(paragraph, limit=20)
    assert " ".join(chunks) == paragraph
    assert all(c.endswith("words.") and slides._words(c) <= 21 for c in chunks)


if not CHROMIUM.exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: `make browser-deps` installs it", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing: run `make browser-deps`", allow_module_level=True)


_SLIDES_JS = """() => Reveal.getSlides().map((s, k) => {
  Reveal.slide(k);
  const h = s.querySelector('h1, h2');
  const body = s.cloneNode(true); body.querySelectorAll('h1, h2, mjx-assistive-mml').forEach(e => e.remove());
  return {k, height: s.scrollHeight, heading: h ? h.textContent : '', transform: h ? getComputedStyle(h).textTransform : '',
          content: body.textContent.trim().length + s.querySelectorAll('img, mjx-container').length,
          raw: (s.textContent.match(/\\\\\\(|\\\\\\[/g) || []).length};
})"""


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.mark.parametrize("stem", STEMS)
def test_deck_projects(browser, decks, stem):
    with serve(decks) as site:
        page = browser.new_page(viewport={"width": slides.WIDTH, "height": slides.HEIGHT})
        problems = []
        host = urlparse(site).netloc
        page.on("request", lambda r: urlparse(r.url).netloc not in ("", host) and r.url.startswith("http")
                and problems.append(r.url))
        page.on("pageerror", lambda e: problems.append(str(e)))
        try:
            page.goto(f"{site}/{stem}.html", wait_until="load")
            page.wait_for_function("() => window.Reveal && Reveal.isReady() && window.MathJax && MathJax.startup")
            page.evaluate("() => MathJax.startup.promise")
            info = page.evaluate(_SLIDES_JS)
        finally:
            page.close()
    assert not problems, problems
    assert len(info) >= 3, f"{stem}: only {len(info)} slides"
    tall = [(s["k"], s["heading"], s["height"]) for s in info if s["height"] > slides.HEIGHT]
    assert not tall, f"{stem}: slides taller than the {slides.HEIGHT} px frame (they would scroll): {tall[:4]}"
    empty = [(s["k"], s["heading"]) for s in info if s["content"] == 0]
    assert not empty, f"{stem}: empty slides {empty}"
    assert all(s["transform"] in ("", "none") for s in info), "headings are upper-cased (breaks $d_k$)"
    raw = [(s["k"], s["heading"]) for s in info if s["raw"]]
    assert not raw, f"{stem}: math left as TeX on slides {raw[:4]}"
    if "**Key points.**" in next(c.source for c in _notebook(stem).cells if c.cell_type == "markdown"):
        assert any(s["heading"].startswith("Key points") for s in info), f"{stem}: no key points slide"
