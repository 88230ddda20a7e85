"""The static HTML book: table of contents, book-only notebook edits, offline assets, solutions.

The first tests read only the sources and run in milliseconds; the rest read book/_build/html,
which ``book.ensure_built()`` (bookkit/build_book.py) rebuilds when an input changed since the last build.
tests/bookkit/test_browser.py opens the same build in Chromium.
"""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bookkit import build_book as book
from bookkit import conventions

PARTS = ["Start here", "Attention", "Building blocks", "Efficient attention", "The whole model", "Language models",
         "Scale", "Adapting a pretrained model", "Inside the model", "Current open models", "Reasoning",
         "Serving many users", "Measuring a model", "Appendix"]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def load_parts():
    return book._load_yaml(book.BOOK / "parts.yml")


# -- sources ----------------------------------------------------------------------------------
def test_parts_in_seed_order_and_every_chapter_listed():
    parts = load_parts()
    assert [p["caption"] for p in parts["parts"]] == PARTS
    planned = book.planned_chapters(parts)
    labels = [conventions.chapter_label(s) for s in planned]
    numbers = [int(x) for x in labels if x.isdigit()]
    assert numbers == list(range(len(numbers))), "chapters must be listed in their numbered order"
    letters = [x for x in labels if not x.isdigit()]
    assert labels == [str(n).zfill(2) for n in numbers] + letters, "appendices come after the numbered chapters"
    assert letters == [chr(ord("A") + i) for i in range(len(letters))], "appendices are lettered A, B, ... in order"
    assert book.unplanned_chapters(parts) == [], "add these chapters to book/parts.yml"


def test_every_book_page_is_in_the_toc():
    """A page under book/ that parts.yml does not list would silently stay out of the book."""
    parts = load_parts()
    listed = {parts["root"]} | {f for p in parts["parts"] for f in p["files"]}
    pages = {p.stem for p in book.BOOK.glob("*.md")} | {p.stem for p in book.BOOK.glob("*.ipynb")}
    assert pages - listed == set(), "add these pages to book/parts.yml"


def test_toc_holds_exactly_the_chapters_that_exist():
    toc = book.make_toc()
    in_toc = [c["file"] for p in toc["parts"] for c in p["chapters"] if c["file"].startswith("chapters/")]
    on_disk = sorted(p.stem for p in book.CHAPTERS_SRC.glob("*.ipynb")
                     if book.CHAPTER_STEM.match(p.stem) and p.with_suffix(".md").exists())
    assert in_toc == [f"chapters/{s}" for s in on_disk]
    pages = {c["file"] for p in toc["parts"] for c in p["chapters"]}
    assert {"notation", "references", "authoring"} <= pages
    assert toc["root"] == "index"


def test_toc_skips_planned_chapters_that_do_not_exist_yet():
    parts = {"root": "index", "parts": [
        {"caption": "A", "files": ["chapters/00-how-to-use", "chapters/98-not-written-yet", "notation"]},
        {"caption": "B", "files": ["chapters/99-not-written-either"]},
    ]}
    toc = book.make_toc(parts)
    assert toc["parts"] == [{"caption": "A", "chapters": [{"file": "chapters/00-how-to-use"}, {"file": "notation"}]}]
    with pytest.raises(FileNotFoundError, match="no-such-page"):
        book.make_toc({"root": "index", "parts": [{"caption": "A", "files": ["no-such-page"]}]})


def _nb(cells, widgets=True):
    return {"cells": cells, "metadata": {"widgets": {"state": {}}} if widgets else {}, "nbformat": 4,
            "nbformat_minor": 5}


def test_book_copy_hides_solutions_drops_widget_state_and_relinks():
    md = {"cell_type": "markdown", "metadata": {},
          "source": "See [masks](04-masking.md#causal), [heads](03-multi-head-attention.md), "
                    "[a later one](13-encoder-vs-decoder.md) and [a typo](44-nothing.md)."}
    sol = {"cell_type": "code", "metadata": {"tags": ["solution"]}, "source": "x = 1", "outputs": []}
    nb = _nb([md, sol])
    out = book.book_notebook(nb, existing={"04-masking", "03-multi-head-attention"},
                             planned={"04-masking", "03-multi-head-attention", "13-encoder-vs-decoder"})
    assert "widgets" not in out["metadata"]
    assert out["cells"][0]["source"] == ("See [masks](04-masking.ipynb#causal), [heads](03-multi-head-attention.ipynb), "
                                         "a later one and [a typo](44-nothing.md).")
    assert out["cells"][1]["metadata"]["tags"] == ["solution", "hide-input"]
    assert out["cells"][1]["metadata"]["mystnb"]["code_prompt_show"] == "Show solution"
    assert nb["cells"][1]["metadata"]["tags"] == ["solution"], "the input notebook must stay untouched"


def test_progress_bars_collapse_to_their_last_state():
    text = ["train:  0%|   | 0/10\r", "train: 50%|## | 5/10\rtrain:100%|###| 10/10\n", "loss 0.125\n"]
    assert book.collapse_carriage_returns(text) == "train:100%|###| 10/10\nloss 0.125\n"
    stream = {"cell_type": "code", "metadata": {}, "source": "fit()",
              "outputs": [{"output_type": "stream", "name": "stderr", "text": text}]}
    out = book.book_notebook(_nb([stream]), set(), set())
    assert out["cells"][0]["outputs"][0]["text"] == "train:100%|###| 10/10\nloss 0.125\n"


def test_error_outputs_are_found():
    ok = {"cell_type": "code", "metadata": {"tags": ["raises-exception"]}, "source": "1/0",
          "outputs": [{"output_type": "error", "ename": "ZeroDivisionError", "evalue": "", "traceback": []}]}
    bad = {**ok, "metadata": {}}
    assert book.error_cells(_nb([ok, bad])) == [1]


@pytest.mark.parametrize("stem", book.existing_chapters())
def test_chapter_notebook_renders_statically(stem):
    """No error output, and every widget carries the static HTML control the book shows."""
    nb = json.loads((book.CHAPTERS_SRC / f"{stem}.ipynb").read_text(encoding="utf8"))
    assert book.error_cells(nb) == []
    for n, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                assert "tlib-widget" in "".join(data.get("text/html", "")), (
                    f"{stem} cell {n}: a widget without a static rendering is dead in the book; "
                    "use transformer_lib.widgets.explore")


def test_config_is_offline_and_never_executes():
    cfg = book._load_yaml(book.BOOK / "_config.yml")
    sphinx = cfg["sphinx"]["config"]
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert sphinx["nb_ipywidgets_js"] == {}
    assert ["html", "text/html", 5] in sphinx["nb_mime_priority_overrides"]
    assert not sphinx["mathjax_path"].startswith(("http:", "https:", "//"))
    assert "sphinx_thebe" not in sphinx["extensions"]
    assert not (book.BOOK / "_static").exists(), "Jupyter Book 1 would load every .js in book/_static"


def test_bibliography_has_the_papers_the_book_cites():
    bib = (book.BOOK / "references.bib").read_text(encoding="utf8")
    for key, what in [("vaswani2017attention", "Attention Is All You Need"),
                      ("beltagy2020longformer", "Longformer"), ("zaheer2020bigbird", "Big Bird"),
                      ("su2021roformer", "Rotary Position Embedding"), ("press2022train", "Linear Biases"),
                      ("xiong2020layer", "Layer Normalization in the Transformer"),
                      ("oord2016wavenet", "WaveNet")]:
        assert re.search(r"@\w+\{" + key + r",[^@]*" + re.escape(what), bib), key


# -- the built HTML ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def html():
    return book.ensure_built()


class _Resources(HTMLParser):
    """Every URL an HTML page makes the browser fetch by itself (not plain <a> links)."""

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self.inline_css: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "style":
            self._in_style = True
        if a.get("style"):
            self.inline_css.append(a["style"])
        if tag == "link" and a.get("href"):
            rel = (a.get("rel") or "").lower()
            if any(r in rel for r in ("stylesheet", "preload", "icon", "modulepreload", "prefetch", "font", "manifest")):
                self.urls.append((f"link[{rel}]", a["href"]))
        for attr in ("src", "srcset", "data", "poster"):
            if a.get(attr) and tag in ("script", "img", "iframe", "source", "audio", "video", "embed", "object",
                                       "track", "input", "image"):
                self.urls.append((f"{tag}[{attr}]", a[attr]))

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.inline_css.append(data)


EXTERNAL = re.compile(r"^\s*(https?:)?//", re.I)
CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""", re.I)


def _external_css(css: str) -> list[str]:
    return [u for u in CSS_URL.findall(css) if EXTERNAL.match(u)]


def test_book_pages_exist(html):
    toc = book.make_toc()
    for f in [toc["root"]] + [c["file"] for p in toc["parts"] for c in p["chapters"]]:
        assert (html / f"{f}.html").exists(), f
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()
    assert (html / ".nojekyll").exists(), "GitHub Pages would hide the _static folder"
    assert (html / "explainer.html").exists(), "the live model page (bookkit/explainer) was not written"
    assert list((html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))


def test_no_external_scripts_stylesheets_or_fonts(html):
    problems = []
    for page in sorted(html.rglob("*.html")):
        parser = _Resources()
        text = page.read_text(encoding="utf8")
        parser.feed(text)
        rel = page.relative_to(html)
        problems += [f"{rel}: {what} = {url}" for what, url in parser.urls if EXTERNAL.match(url)]
        problems += [f"{rel}: inline css {u}" for css in parser.inline_css for u in _external_css(css)]
        for needle in ("require.min.js", "embed-amd.js", "html-manager", "widget-state+json", "thebe@", "cdn.jsdelivr",
                       "unpkg.com", "cdnjs", "fonts.googleapis"):
            if needle in text:
                problems.append(f"{rel}: mentions {needle}")
    for css in sorted(html.rglob("*.css")):
        problems += [f"{css.relative_to(html)}: {u}" for u in _external_css(css.read_text(encoding="utf8"))]
    assert not problems, "\n".join(problems[:20])


def test_external_url_scanner_catches_cdn_assets():
    parser = _Resources()
    parser.feed('<link rel="stylesheet" href="https://cdn.example.org/x.css"><script src="//cdn.example.org/m.js">'
                '</script><img src="data:image/png;base64,AAAA"><a href="https://arxiv.org/abs/1706.03762">paper</a>'
                '<style>@font-face{src:url(https://fonts.example.org/f.woff2)}</style>')
    external = [u for _, u in parser.urls if EXTERNAL.match(u)]
    assert external == ["https://cdn.example.org/x.css", "//cdn.example.org/m.js"]
    assert [u for c in parser.inline_css for u in _external_css(c)] == ["https://fonts.example.org/f.woff2"]


@pytest.mark.parametrize("stem", book.existing_chapters())
def test_chapter_page_solutions_collapsed_and_widgets_static(html, stem):
    text = (html / "chapters" / f"{stem}.html").read_text(encoding="utf8")
    nb = json.loads((book.CHAPTERS_SRC / f"{stem}.ipynb").read_text(encoding="utf8"))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    n_solution = sum("solution" in c.get("metadata", {}).get("tags", []) for c in cells)
    n_widgets = sum(WIDGET_VIEW in o.get("data", {}) for c in cells for o in c.get("outputs", []))
    # each solution cell: its input inside a closed <details> toggle labelled "Show solution"
    solution_divs = re.findall(r'<div class="(cell tag_solution[^"]*)">(.*?)(?=<div class="cell[ "]|$)', text, flags=re.S)
    assert len(solution_divs) == n_solution
    for classes, div in solution_divs:
        assert "tag_hide-input" in classes.split()
        assert re.match(r'\s*<details class="[^"]*hide above-input">\s*<summary', div), "solution not collapsed"
        assert "Show solution" in div and "<details open" not in div
    assert text.count("class='tlib-widget'") == n_widgets
    assert "jupyter-widgets" not in text


# -- glossary, launch buttons, version ----------------------------------------------------------
GLOSSARY_TERMS = ["Query", "Key", "Value", "Head", "Mask", "Causal mask", "Padding mask", "Positional encoding",
                  "RoPE", "Layer norm", "Residual connection", "KV cache", "Perplexity", "BPE", "Token", "Logits",
                  "Temperature", "Top-p", "FlashAttention"]
CHAPTER_LINK = re.compile(r'<a class="reference internal" href="(chapters/[^"#]+\.html)(?:#([^"]+))?"')


def _article(text: str) -> str:
    return text[text.index("<article"):text.index("</article>")]


def test_relink_points_book_pages_at_chapters_that_exist():
    text = "[a](chapters/04-masking.ipynb#the-math), [b](chapters/15-tokenization.ipynb) and [c](chapters/44-typo.ipynb)"
    out = book.relink(text, existing={"04-masking"}, planned={"04-masking", "15-tokenization"}, folder="chapters/")
    assert out == "[a](chapters/04-masking.ipynb#the-math), b and [c](chapters/44-typo.ipynb)"


def test_glossary_has_the_books_terms():
    source = (book.BOOK / "glossary.md").read_text(encoding="utf8")
    terms = re.findall(r"^(\S[^\n]*)\n  \S", source, re.M)
    for term in GLOSSARY_TERMS:
        assert any(t.startswith(term) for t in terms), f"the glossary lacks {term!r}"
    assert terms == sorted(terms, key=str.lower), "keep the glossary in alphabetical order"


def test_every_glossary_link_resolves(html):
    """Each link to a chapter that is in the book reaches an existing page and section id."""
    source = (book.BOOK / "glossary.md").read_text(encoding="utf8")
    existing = set(book.existing_chapters())
    wanted = [m for m in re.findall(r"\]\(chapters/(\d\d-[a-z0-9-]+)\.ipynb(?:#([^)]+))?\)", source) if m[0] in existing]
    links = CHAPTER_LINK.findall(_article((html / "glossary.html").read_text(encoding="utf8")))
    assert len(links) == len(wanted), "a glossary link to a chapter in the book was dropped"
    for page, anchor in links:
        target = html / page
        assert target.exists(), page
        if anchor:
            assert f'id="{anchor}"' in target.read_text(encoding="utf8"), f"{page} has no section #{anchor}"


def test_version_in_footer_and_changelog(html):
    import transformer_lib
    version = transformer_lib.__version__
    for page, href in [("index.html", "_static/CHANGELOG.txt"), ("chapters/00-how-to-use.html", "../_static/CHANGELOG.txt")]:
        text = (html / page).read_text(encoding="utf8")
        assert f"Version {version}" in text, page
        assert f"<a href='{href}'>CHANGELOG.md</a>" in text, f"{page}: the footer's CHANGELOG.md is not a link"
    changelog = (book.ROOT / "CHANGELOG.md").read_text(encoding="utf8")
    assert (html / "_static" / "CHANGELOG.txt").read_text(encoding="utf8") == changelog
    assert re.search(rf"^## \[?{re.escape(version)}\]?", changelog, re.M), "CHANGELOG.md has no entry for this version"


@pytest.mark.parametrize("stem", book.existing_chapters())
def test_launch_and_download_buttons(html, stem):
    """Binder and download on every chapter; no JupyterHub button pointing at a hub that a
    published site does not have (book/_config.yml leaves jupyterhub_url empty)."""
    cfg = book._load_yaml(book.BOOK / "_config.yml")
    repo = cfg["repository"]["url"].rstrip("/")
    binder = cfg["launch_buttons"]["binderhub_url"].rstrip("/")
    assert cfg["launch_buttons"]["jupyterhub_url"] == ""
    org_repo = "/".join(repo.split("/")[-2:])
    text = (html / "chapters" / f"{stem}.html").read_text(encoding="utf8").replace("&amp;", "&")
    assert f'href="{binder}/v2/gh/{org_repo}/' in text and f"urlpath=lab/tree/chapters/{stem}.ipynb" in text
    assert "localhost" not in text and "127.0.0.1" not in text
    assert "/hub/user-redirect/git-pull" not in text, "a JupyterHub button without a hub"
    assert f'href="../_sources/chapters/{stem}.ipynb"' in text, "no download button"
    assert (html / "_sources" / "chapters" / f"{stem}.ipynb").exists()


def test_a_course_sets_its_hub_from_the_environment(monkeypatch):
    """TLIB_JUPYTERHUB_URL gives the launch buttons a hub (the course guide's setting)."""
    from types import SimpleNamespace
    from bookkit import sphinx_book
    config = SimpleNamespace(html_theme_options={"launch_buttons": {"jupyterhub_url": ""}})
    monkeypatch.setenv("TLIB_JUPYTERHUB_URL", "https://hub.example.edu")
    sphinx_book._on_config_inited(None, config)
    assert config.html_theme_options["launch_buttons"]["jupyterhub_url"] == "https://hub.example.edu"
    config = SimpleNamespace(html_theme_options={"launch_buttons": {"jupyterhub_url": ""}})
    monkeypatch.delenv("TLIB_JUPYTERHUB_URL")
    sphinx_book._on_config_inited(None, config)
    assert config.html_theme_options["launch_buttons"]["jupyterhub_url"] == ""


def test_glossary_says_nothing_is_unfinished():
    text = (book.BOOK / "glossary.md").read_text(encoding="utf8").lower()
    for phrase in ("still being written", "not written yet", "coming soon", "todo"):
        assert phrase not in text, phrase


def test_further_reading_links_works_in_the_bibliography():
    keys = book.bib_keys()
    assert keys[("vaswani", "2017")] == "vaswani2017attention" and keys[("oord", "2016")] == "oord2016wavenet"
    md = {"cell_type": "markdown", "metadata": {},
          "source": "Vaswani et al. (2017) in the text.\n\n## Further reading\n\n- Vaswani et al. (2017), *Attention*."
                    "\n- Michel, Levy, Neubig (2019); Nobody et al. (2019)."}
    after = {"cell_type": "markdown", "metadata": {}, "source": "- Clark et al. (2019)\n\n## Next\n\nVoita et al. (2019)"}
    out = book.book_notebook(_nb([md, after]), set(), set(), keys)
    first, second = out["cells"][0]["source"], out["cells"][1]["source"]
    assert first.startswith("Vaswani et al. (2017) in the text."), "only the Further reading section is linked"
    assert "- Vaswani et al. {cite:yearpar}`vaswani2017attention`, *Attention*." in first
    assert "Michel, Levy, Neubig {cite:yearpar}`michel2019sixteen`" in first and "Nobody et al. (2019)" in first
    assert second == "- Clark et al. {cite:yearpar}`clark2019what`\n\n## Next\n\nVoita et al. (2019)"


def test_further_reading_links_entries_written_with_initials_and_tells_same_year_works_apart():
    keys = book.bib_keys()
    md = {"cell_type": "markdown", "metadata": {}, "source": (
        "## Further reading\n\n"
        "- J. L. Ba, J. R. Kiros, G. E. Hinton, *Layer Normalization* (2016), arXiv:1607.06450.\n"
        "- B. Zhang, R. Sennrich, *Root Mean Square Layer Normalization* (NeurIPS 2019), arXiv:1910.07467.\n"
        "- J. Su et al., *RoFormer: Enhanced Transformer with Rotary Position Embedding*, 2021.\n"
        "- O. Press, N. A. Smith, M. Lewis, *Train Short, Test Long: Attention with Linear Biases Enables\n"
        "  Input Length Extrapolation*, ICLR 2022.\n"
        "- Kudo and Richardson (2018), *SentencePiece*, and Kudo (2018), *Subword Regularization*.\n"
        "- Q. Nobody, *A Work Not in the Bibliography*, 2019.")}
    text = book.book_notebook(_nb([md]), set(), set(), keys)["cells"][0]["source"]
    assert "*Layer Normalization* ({cite:year}`ba2016layer`), arXiv:1607.06450." in text  # not the arXiv number
    assert "(NeurIPS {cite:year}`zhang2019root`), arXiv:1910.07467." in text
    assert "Embedding*, {cite:year}`su2021roformer`." in text  # by title: the entry's year is the journal's
    assert "Extrapolation*, ICLR {cite:year}`press2022train`." in text  # the year on a continuation line
    assert "Kudo and Richardson {cite:yearpar}`kudo2018sentencepiece`" in text
    assert "Kudo {cite:yearpar}`kudo2018subword`" in text
    assert "*A Work Not in the Bibliography*, 2019." in text


def test_check_cell_output_is_labelled_as_the_reference_solutions():
    check = {"cell_type": "code", "metadata": {}, "source": 'check("ch01.softmax_rows", answer)',
             "outputs": [{"output_type": "stream", "name": "stdout", "text": "PASS [ch01.softmax_rows]: ok\n"}]}
    plain = {"cell_type": "code", "metadata": {}, "source": "print(1)",
             "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}]}
    out = book.book_notebook(_nb([check, plain]), set(), set())
    outputs = out["cells"][0]["outputs"]
    assert "reference solution" in outputs[0]["data"]["text/html"] and outputs[1]["text"].startswith("PASS")
    assert out["cells"][1]["outputs"] == plain["outputs"]


def test_built_chapters_label_verdicts_and_link_further_reading(html):
    for stem in book.existing_chapters():
        text = _article((html / "chapters" / f"{stem}.html").read_text(encoding="utf8"))
        for m in re.finditer(r"PASS \[", text):  # every saved verdict follows the note
            assert "reference solution" in text[max(0, m.start() - 3000):m.start()], f"{stem}: unlabelled PASS"
    text = (html / "chapters" / "03-multi-head-attention.html").read_text(encoding="utf8")
    further = text[text.index('id="further-reading"'):]
    assert further.count('href="../references.html#') >= 3, "Further reading does not link the references"


def test_chapter_pages_under_one_megabyte(html):
    """Page weight: inline figures and widget frames live in _static/frames (loaded lazily)."""
    sizes = {stem: (html / "chapters" / f"{stem}.html").stat().st_size for stem in book.existing_chapters()}
    heavy = {s: n for s, n in sizes.items() if n > 1_000_000}
    assert not heavy, f"chapter pages over 1 MB: {heavy}"
    for stem in book.existing_chapters():
        text = (html / "chapters" / f"{stem}.html").read_text(encoding="utf8")
        for src in re.findall(r'src="(?:\.\./)?(_static/frames/[0-9a-f]+\.png)"', text):
            assert (html / src).exists(), f"{stem}: {src} missing"
    assert len(list((html / "_static" / "frames").glob("*.png"))) > 50


def test_externalize_images_moves_inline_pngs_once(tmp_path):
    import base64
    png = base64.b64encode(b"\x89PNG" + bytes(range(256)) * 20).decode()
    (tmp_path / "chapters").mkdir()
    page = tmp_path / "chapters" / "x.html"
    page.write_text(f"<img alt='a b' src='data:image/png;base64,{png}'/><img src=\"data:image/png;base64,AAAA\">")
    saved = book.externalize_images(tmp_path)
    text = page.read_text()
    name = re.search(r'src="\.\./_static/frames/([0-9a-f]+\.png)"', text).group(1)
    assert (tmp_path / "_static" / "frames" / name).read_bytes() == base64.b64decode(png)
    assert 'loading="lazy"' in text and "base64,AAAA" in text, "a tiny image stays inline"
    assert saved > 4000 and book.externalize_images(tmp_path) == 0 and page.read_text() == text
    # an alt text may hold a '>' (the appendix's "for this m > 1"): the image is still moved out
    other = tmp_path / "chapters" / "y.html"
    other.write_text(f'<img class="f" alt="error when m > 1, n_trees = 5" src=\'data:image/png;base64,{png}\'/>')
    assert book.externalize_images(tmp_path) > 4000 and "base64" not in other.read_text()


def test_every_img_of_the_built_book_has_alt_text(html):
    """Screen readers read the alt of every picture; a figure without one is silent."""
    missing = []
    for page in sorted(Path(html).rglob("*.html")):
        for tag in re.findall(r"<img\b[^>]*>", page.read_text(errors="replace"), re.I):
            alt = re.search(r"""\balt\s*=\s*(["'])(.*?)\1""", tag, re.S)
            words = alt.group(2).split() if alt else []
            # docutils falls back to the file name (".../abc123.png") when no alt was given: not words
            if len(words) < 2 or re.search(r"\.(png|jpe?g|svg|gif)$", words[-1], re.I):
                missing.append(f"{page.relative_to(html)}: {tag[:100]}")
    assert not missing, f"{len(missing)} images without a description as alt text, e.g. {missing[:5]}"


# -- code width: `python -m bookkit.notebooks format` -----------------------------------------
FORMAT_CHAPTERS = ["04-masking", "13-encoder-vs-decoder"]
_STRING_LINE = re.compile(r"""^\s*[rRbBuUfF]{0,2}("|')""")


def _wide_code_lines(source: str, width: int) -> list[tuple[str, bool]]:
    """(line, inside a string literal) for each line of ``source`` wider than ``width``."""
    import io
    import tokenize
    strings = set()
    try:
        for t in tokenize.generate_tokens(io.StringIO(source + "\n").readline):
            if t.type == tokenize.STRING:
                strings |= set(range(t.start[0], t.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass
    return [(l, n in strings) for n, l in enumerate(source.split("\n"), 1) if len(l) > width]


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _widen_first_plain_code_cell(stem: Path, width: int) -> None:
    """Put one statement wider than ``width`` at the top of the first code cell without metadata,
    in both the .md and the .ipynb (kept in sync): the committed chapters fit the column already,
    and the format command needs something to fold."""
    wide = "format_test_total = " + " + ".join(f"value_number_{i}" for i in range(12)) + "  # noqa"
    wide = wide.replace("value_number_", "len('x') * ")  # runnable, not run: outputs stay as they are
    assert len(wide) > width
    md = stem.with_suffix(".md").read_text(encoding="utf8")
    header = "```{code-cell} ipython3\n"
    start = 0
    while True:
        start = md.index(header, start) + len(header)
        if not md.startswith("---", start):
            break
    index = md[:start].count(header) - 1  # the code cell's index among the chapter's code cells
    stem.with_suffix(".md").write_text(md[:start] + wide + "\n" + md[start:], encoding="utf8")
    nb = json.loads(stem.with_suffix(".ipynb").read_text(encoding="utf8"))
    cell = _code_cells(nb)[index]
    source = "".join(cell["source"])
    cell["source"] = (wide + "\n" + source).splitlines(keepends=True)
    stem.with_suffix(".ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf8")


def test_format_command_fits_code_to_the_column_keeps_outputs_and_pairing(tmp_path):
    """On copies of two chapters: every code line fits CODE_WIDTH (except a string literal that
    black cannot split, counted and bounded), outputs, counts and metadata are byte-identical (what
    nbval compares), .md and .ipynb stay in sync, and a second run changes nothing."""
    import ast
    import subprocess
    import sys
    from bookkit import notebooks
    width = notebooks.CODE_WIDTH
    for stem in FORMAT_CHAPTERS:
        for ext in (".md", ".ipynb"):
            (tmp_path / f"{stem}{ext}").write_bytes((book.CHAPTERS_SRC / f"{stem}{ext}").read_bytes())
        _widen_first_plain_code_cell(tmp_path / stem, width)  # the chapters themselves fit already
        assert notebooks.cells_in_sync(tmp_path / f"{stem}.md") == []
    before = {s: json.loads((tmp_path / f"{s}.ipynb").read_text(encoding="utf8")) for s in FORMAT_CHAPTERS}
    originals = {s: (tmp_path / f"{s}.md").read_text(encoding="utf8") for s in FORMAT_CHAPTERS}
    wide_before = sum(len(l) > width for s in FORMAT_CHAPTERS for c in _code_cells(before[s])
                      for l in "".join(c["source"]).split("\n"))
    assert wide_before > 0, "the chosen chapters should have lines to fold (else this test proves nothing)"
    cmd = [sys.executable, "-m", "bookkit.notebooks", "format"] + [str(tmp_path / f"{s}.md") for s in FORMAT_CHAPTERS]
    subprocess.run(cmd, check=True, capture_output=True, cwd=book.ROOT)
    snapshot = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for stem in FORMAT_CHAPTERS:
        after = json.loads((tmp_path / f"{stem}.ipynb").read_text(encoding="utf8"))
        assert notebooks.cells_in_sync(tmp_path / f"{stem}.md") == []
        assert len(after["cells"]) == len(before[stem]["cells"])
        for old, new in zip(before[stem]["cells"], after["cells"]):
            assert (old.get("outputs"), old.get("execution_count"), old["metadata"]) == \
                   (new.get("outputs"), new.get("execution_count"), new["metadata"]), f"{stem}: outputs changed"
        assert after["metadata"] == before[stem]["metadata"]
        too_wide = [l for c in _code_cells(after) for l in _wide_code_lines("".join(c["source"]), width)]
        assert all(in_string for _, in_string in too_wide), \
            f"{stem}: code wider than {width}: {[l for l, s in too_wide if not s][:3]}"
        assert len(too_wide) <= 10, f"{stem}: {len(too_wide)} string lines wider than {width}"
        for old, new in zip(_code_cells(before[stem]), _code_cells(after)):  # the same program
            try:
                old_tree = ast.dump(ast.parse("".join(old["source"])))
            except SyntaxError:
                continue  # an IPython magic: black masked it, compared by the outputs above
            assert ast.dump(ast.parse("".join(new["source"]))) == old_tree, f"{stem}: a cell's program changed"
        md_text = (tmp_path / f"{stem}.md").read_text(encoding="utf8")
        original = originals[stem]
        prose = lambda t: re.sub(r"```\{code-cell\}.*?\n```", "", t, flags=re.S)
        assert prose(md_text) == prose(original), f"{stem}: formatting touched the Markdown"
    subprocess.run(cmd, check=True, capture_output=True, cwd=book.ROOT)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == snapshot, "format is not idempotent"


def test_format_code_folds_calls_and_comments_and_leaves_magics_and_bad_syntax():
    from bookkit.notebooks import format_code
    long_call = "y = some_function(" + ", ".join(f"argument_{i}" for i in range(12)) + ")"
    out = format_code(long_call, width=60)
    assert max(map(len, out.splitlines())) <= 60 and out.count("argument_") == 12
    comment = "x = 1  # " + "word " * 30
    out = format_code(comment.strip(), width=60)
    assert max(map(len, out.splitlines())) <= 60 and out.splitlines()[-1] == "x = 1"
    assert format_code("%timeit sum(range(10))") == "%timeit sum(range(10))"
    assert format_code("def f(:\n    pass") == "def f(:\n    pass"
    assert format_code(format_code(long_call, 60), 60) == format_code(long_call, 60)


def test_built_site_carries_the_licences_and_a_notice_for_every_static_file(html):
    for name in ("LICENSE.txt", "LICENSE-CONTENT.md", "THIRD-PARTY-NOTICES.md"):
        assert (html / name).exists(), name
    static = html / "_static"
    missing = [str(p.relative_to(static)) for p in static.rglob("*") if p.is_file()
               and not book.has_notice(str(p.relative_to(static)))]
    assert not missing, f"files of the built site with no line in THIRD-PARTY-NOTICES.md: {missing[:20]}"
    page = (html / "licences.html").read_text(encoding="utf8")
    assert "CC BY 4.0" in page and "onnxruntime-web" in page and "MIT License" in page
