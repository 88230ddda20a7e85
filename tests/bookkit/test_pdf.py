"""The PDF of the whole book (`make pdf`): every chapter in it, math typeset, a sane length.

``bookkit.pdf.ensure_pdf()`` reuses book/_build/pdf/book.pdf when it is newer than the book's
inputs and builds it otherwise (about two minutes: Sphinx's one-page build, then Chromium prints
it). Without Chromium this module skips locally and fails under CI, like tests/bookkit/test_browser.py.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
import unicodedata

import pytest

from bookkit import build_book as book
from bookkit.browser import CHROMIUM

if not CHROMIUM.exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: `make browser-deps` installs it", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing: run `make browser-deps`", allow_module_level=True)
pytest.importorskip("playwright.sync_api")
pypdf = pytest.importorskip("pypdf")

# TeX that MathJax would have turned into symbols: left in the text, it was never typeset
RAW_MATH = re.compile(r"\$\$|\\(?:frac|sqrt|begin|end|mathrm|mathbf|text|left|right|sum|cdot|top|operatorname)\b"
                      r"|\\[()\[\]]|\$[^$\n]{0,60}[_^\\][^$\n]{0,60}\$")
# the page that documents MyST syntax for authors shows `$...$` and `$$...$$` on purpose
SYNTAX_PAGES = {"Writing a chapter"}


def straight(text: str) -> str:
    """Typographic quotes as the source wrote them: the book's pages print "model's" with a
    curly apostrophe (Sphinx's smart quotes)."""
    return text.translate(str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}))


def squash(text: str) -> str:
    """Text without white space or ligatures: PDF extraction breaks lines (and joins words) where
    it likes, and returns "fi" as one glyph."""
    return re.sub(r"\s+", "", straight(unicodedata.normalize("NFKC", text)))


def chapter_titles() -> list[str]:
    titles = []
    for stem in book.existing_chapters():
        nb = json.loads((book.CHAPTERS_SRC / f"{stem}.ipynb").read_text(encoding="utf8"))
        first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
        source = "".join(first["source"]) if isinstance(first["source"], list) else first["source"]
        titles.append(re.search(r"^# (.+)$", source, re.M).group(1).strip())
    return titles


@pytest.fixture(scope="module")
def pdf():
    from bookkit.pdf import ensure_pdf
    path = ensure_pdf()
    reader = pypdf.PdfReader(str(path))
    return reader, page_texts(path, reader)


def page_texts(path, reader) -> list[str]:
    """Each page's text in the order it was drawn: poppler's ``pdftotext -raw`` where it is
    installed (`make browser-deps`), about 2 CPU-s for the whole book where pypdf's extract_text
    takes about 50 (its default reading order splits a wrapped code line; -raw keeps it whole)."""
    import shutil
    import subprocess
    if shutil.which("pdftotext") is None:
        return [page.extract_text() for page in reader.pages]
    out = subprocess.run(["pdftotext", "-raw", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, check=True)
    texts = out.stdout.split("\f")[:len(reader.pages)]  # a form feed ends each page
    assert len(texts) == len(reader.pages), f"pdftotext gave {len(texts)} pages for {len(reader.pages)}"
    return texts


def top_level_sections(reader) -> list[tuple[str, int]]:
    """(title, first page index) of each page of the book, from the PDF outline."""
    outline = reader.outline
    # Chromium nests everything under the document title: one level down are the book's pages
    entries = outline[1] if len(outline) == 2 and isinstance(outline[1], list) else outline
    return [(e.title, reader.get_destination_page_number(e)) for e in entries if not isinstance(e, list)]


def test_page_count(pdf):
    reader, _ = pdf
    n = len(book.existing_chapters())
    # a chapter prints as roughly 10-30 A4 pages; far fewer means content was cut, far more that
    # something (a table, an output) broke into one line per page
    assert 5 * n <= len(reader.pages) <= 50 * n, f"{len(reader.pages)} pages for {n} chapters"


def test_every_chapter_title_is_in_the_text_and_the_outline(pdf):
    reader, texts = pdf
    text = squash("".join(texts))
    outline = {squash(title) for title, _ in top_level_sections(reader)}
    for title in chapter_titles():
        assert squash(title) in text, f"chapter {title!r} is not in the PDF"
        assert squash(title) in outline, f"chapter {title!r} has no bookmark in the PDF outline"


def _code_and_output_text(stem: str) -> str:
    """Everything a chapter prints as code or program output (never typeset, by design)."""
    nb = json.loads((book.CHAPTERS_SRC / f"{stem}.ipynb").read_text(encoding="utf8"))
    join = lambda t: "".join(t) if isinstance(t, list) else (t or "")
    parts = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            parts.append(join(cell["source"]))
            for out in cell.get("outputs", []):
                parts += [join(out.get("text")), join(out.get("data", {}).get("text/plain")),
                          join(out.get("data", {}).get("text/html"))]
    return "\n".join(parts)


def test_no_raw_math(pdf):
    """TeX in the prose is typeset; the same characters may appear only as often as the chapter's
    code and program output contain them (a model trained on the book's prose prints `$d_k$`)."""
    reader, texts = pdf
    sections = top_level_sections(reader)
    ends = [start for _, start in sections[1:]] + [len(texts)]
    stem_of = {squash(title): stem for title, stem in zip(chapter_titles(), book.existing_chapters())}
    raw = []
    for (title, start), end in zip(sections, ends):
        if squash(title) in {squash(t) for t in SYNTAX_PAGES}:
            continue
        stem = stem_of.get(squash(title))
        allowed = Counter(RAW_MATH.findall(_code_and_output_text(stem))) if stem else Counter()
        found = Counter(RAW_MATH.findall("\n".join(texts[start:end])))
        raw += [(title, tex, n) for tex, n in (found - allowed).items()]
    assert not raw, f"math left as TeX (section, text, times): {raw[:10]}"


def test_raw_math_pattern_catches_untypeset_tex():
    for tex in ["$$\\frac{QK^\\top}{\\sqrt{d_k}}$$", "where $d_k$ is", "\\(x\\)", "\\begin{aligned}"]:
        assert RAW_MATH.search(tex), tex
    for typeset in ["softmax(QK⊤/√dk)V", "costs $5 per hour", "O(n²d)"]:
        assert not RAW_MATH.search(typeset), typeset


def test_solutions_are_printed(pdf):
    """Each solution's last line of code (its answer, which the exercise stub lacks) is in the PDF."""
    _, texts = pdf
    text = squash("".join(texts))
    missing = []
    for stem in book.existing_chapters():
        nb = json.loads((book.CHAPTERS_SRC / f"{stem}.ipynb").read_text(encoding="utf8"))
        for cell in nb["cells"]:
            if "solution" in cell.get("metadata", {}).get("tags", []):
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                lines = [l for l in source.splitlines() if l.strip() and not l.strip().startswith("#")]
                if lines and squash(lines[-1]) not in text:
                    missing.append(f"{stem}: {lines[-1].strip()}")
    assert not missing, f"{len(missing)} solutions are not in the PDF: {missing[:5]}"


def test_dist_zip_holds_the_site_and_the_pdf(pdf, tmp_path):
    """`make dist`: one folder with the whole offline site, the PDF and the changelog."""
    import zipfile
    from bookkit import dist
    html = book.ensure_built()
    out = dist.write_zip(html=html, out_dir=tmp_path)
    names = set(zipfile.ZipFile(out).namelist())
    root = out.stem
    assert {f"{root}/html/index.html", f"{root}/book.pdf", f"{root}/CHANGELOG.md"} <= names
    site = {f"{root}/html/{f.relative_to(html)}" for f in html.rglob("*") if f.is_file() and f.name != ".build-inputs"}
    assert site <= names, f"missing from the zip: {sorted(site - names)[:5]}"


# -- print quality (issue 27) -------------------------------------------------------------------
def _read_pgm(path):
    import numpy as np
    data = path.read_bytes()
    magic, size, maxval, pixels = data.split(b"\n", 3)
    w, h = map(int, size.split())
    return np.frombuffer(pixels, dtype=np.uint8)[:w * h].reshape(h, w)


def empty_box_at_bottom(img, dpi: int, margin_mm: float = 16) -> int:
    """Height in pixels of an empty framed box at the bottom of a page image (0 if none).

    From the lowest marked row of the text area upwards: rows that are mostly a box's light grey
    fill with no ink in them; if white paper lies directly above them, the box has no text on
    this page (its code moved to the next one). A box that ends with its code (ink above its
    bottom padding) is not flagged."""
    import numpy as np
    h, w = img.shape
    m = int(round(margin_mm / 25.4 * dpi))
    body = img[m:h - m, m // 2:w - m // 2]
    marked = np.where((body < 245).any(axis=1))[0]
    if not len(marked):
        return 0
    r, rows = marked[-1], 0
    while r >= 0 and ((body[r] >= 200) & (body[r] < 252)).mean() > 0.4 and not (body[r] < 150).any():
        rows, r = rows + 1, r - 1
    return rows if rows and r >= 0 and not (body[r] < 245).any() else 0


def test_empty_box_detector_on_drawn_pages():
    import numpy as np
    page = np.full((351, 248), 255, np.uint8)
    page[60:70, 30:200] = 0                      # a line of text
    empty = page.copy(); empty[300:313, 20:228] = 235          # a frame with nothing in it
    full = page.copy(); full[280:313, 20:228] = 235; full[285:290, 30:150] = 20  # a frame with code
    assert empty_box_at_bottom(empty, dpi=30) == 13
    assert empty_box_at_bottom(full, dpi=30) == 0 and empty_box_at_bottom(page, dpi=30) == 0


@pytest.fixture(scope="module")
def page_images(pdf, tmp_path_factory):
    import shutil
    import subprocess
    if shutil.which("pdftoppm") is None:
        if os.environ.get("CI"):
            pytest.fail("pdftoppm is missing: `make browser-deps` installs poppler-utils")
        pytest.skip("pdftoppm (poppler-utils) is missing")
    from bookkit.pdf import PDF
    out = tmp_path_factory.mktemp("pages")
    subprocess.run(["pdftoppm", "-r", "30", "-gray", str(PDF), str(out / "p")], check=True)
    return sorted(out.glob("p-*.pgm"))


def test_no_page_ends_in_an_empty_framed_box(page_images):
    bad = [(n + 1, rows) for n, p in enumerate(page_images) if (rows := empty_box_at_bottom(_read_pgm(p), dpi=30))]
    assert not bad, f"pages ending in an empty framed box (page, height at 30 dpi): {bad[:10]}"


def blank_pages(texts: list[str], images: list, margin_mm: dict) -> list[int]:
    """1-based numbers of the pages with nothing printed on them but the footer: no text besides
    the footer line (pypdf or pdftotext) and no ink inside the margins (a pdftoppm image at 30
    dpi: no pixel darker than 245 of 255, the paper's white being 255)."""
    dpi = 30
    px = dpi / 25.4
    blank = []
    for n, (text, path) in enumerate(zip(texts, images)):
        words = [l for l in text.splitlines() if l.strip() and "version" not in l]  # the footer names it
        if words:
            continue
        img = _read_pgm(path)
        top, bottom = round(margin_mm["top"] * px), round(margin_mm["bottom"] * px)
        left, right = round(margin_mm["left"] * px), round(margin_mm["right"] * px)
        if not (img[top:img.shape[0] - bottom, left:img.shape[1] - right] < 245).any():
            blank.append(n + 1)
    return blank


def test_blank_page_detector_on_drawn_pages(tmp_path):
    import numpy as np
    margins = {"top": 16.0, "bottom": 16.0, "left": 14.0, "right": 14.0}

    def pgm(img):
        path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.pgm"
        path.write_bytes(b"P5\n%d %d\n255\n" % (img.shape[1], img.shape[0]) + img.tobytes())
        return path

    paper = np.full((351, 248), 255, np.uint8)
    footer = paper.copy(); footer[340:345, 100:150] = 0   # the page number, in the bottom margin
    figure = paper.copy(); figure[40:300, 60:180] = 90     # a turned figure: ink, no text
    images = [pgm(footer), pgm(figure), pgm(paper)]
    texts = ["Transformers · version 1 · 3 / 9", "", "x = 1"]
    assert blank_pages(texts, images, margins) == [1]


def test_no_page_is_blank(pdf, page_images):
    """Two blank pages once stood before a turned figure and before "Writing a chapter": a forced
    page break right after another (or after a page that was already full) leaves an empty page."""
    from bookkit.pdf import MARGIN_MM
    _, texts = pdf
    assert len(page_images) == len(texts)
    blank = blank_pages(texts, page_images, MARGIN_MM)
    assert not blank, f"blank pages: {blank}"


SCREEN_LABEL = re.compile(r"^\s*(?:(?:Show|Hide) (?:code cell (?:source|output|content)|solution)|Static version: \d+)",
                          re.M)


def test_no_screen_only_labels_printed(pdf):
    """A toggle's label is a line of its own on screen ("Show code cell source"); the preface may
    still say in a sentence that solutions sit behind a Show solution toggle on the web."""
    _, texts = pdf
    found = [(n + 1, m.group(0).strip()) for n, t in enumerate(texts) for m in SCREEN_LABEL.finditer(t)]
    assert not found, f"screen-only labels printed (page, label): {found[:5]}"


def test_screen_label_pattern():
    assert SCREEN_LABEL.search("x = 1\nShow code cell source\n") and SCREEN_LABEL.search("Hide solution")
    assert not SCREEN_LABEL.search("A solution is behind a Show solution toggle here")


def test_contents_page_has_the_page_numbers_of_the_outline(pdf):
    """The contents page lists every page of the book with the page its heading is on."""
    from bookkit.pdf import PDF
    reader, texts = pdf
    entries = json.loads((PDF.parent / "contents.json").read_text())
    assert len(entries) >= len(book.existing_chapters()), "the contents lack chapters"
    assert all(e["number"] for e in entries), [e for e in entries if not e["number"]][:3]
    numbers = [e["number"] for e in entries]
    assert numbers == sorted(numbers) and numbers[0] >= 2
    contents = next(k for k, t in enumerate(texts) if "Contents" in t)
    printed = squash("".join(texts[contents:contents + 3]))
    for e in entries:
        assert squash(e["title"]) + str(e["number"]) in printed, f"{e['title']} ... {e['number']} not on the contents page"
        page_text = squash(texts[e["number"] - 1])
        assert squash(e["title"]) in page_text, f"{e['title']} is not on page {e['number']}"


def test_outline_titles_keep_their_spaces(pdf):
    reader, _ = pdf
    sections = top_level_sections(reader)
    titles = chapter_titles()
    outline = {straight(t) for t, _ in sections}
    for title in titles:
        assert straight(title) in outline, f"outline entry for {title!r} is not the title as written"
    from bookkit.pdf import outline_pages
    doubled = [t for t, _ in outline_pages(book.BOOK / "_build" / "pdf" / "book.pdf")
               if len(t) > 3 and len(t) % 2 == 0 and t[:len(t) // 2] == t[len(t) // 2:]]
    assert not doubled, f"outline entries doubled: {doubled[:5]}"


def test_wide_figures_run_along_their_own_page(pdf):
    """A row of panels (chapter 17's five strategies) is turned a quarter on a page of its own:
    such a page holds one image and almost no text."""
    reader, texts = pdf
    assert _turned_pages(reader, texts), "no wide figure got a page of its own"
    assert all(float(p.mediabox.width) < float(p.mediabox.height) for p in reader.pages), "A4 portrait throughout"


def _turned_pages(reader, texts) -> list[int]:
    """Pages with almost no text whose one image is wide: the turned figures' pages (a square
    figure can also end up alone on a page). The text is looked at first: listing a page's images
    decodes them, about a minute for the whole book."""
    from bookkit.pdf import WIDE_RATIO
    bare = [n for n, t in enumerate(texts) if len([l for l in t.splitlines() if l.strip()]) <= 1]
    return [n for n in bare if len(images := reader.pages[n].images) == 1
            and (lambda w, h: w / h > WIDE_RATIO)(*images[0].image.size)]


def test_turned_figures_fill_the_printable_page(pdf, page_images):
    """A turned figure is as long as the printable page (issue 27), not 1.36 times its length in
    the column: the ink of its page, inside the margins, runs at least 95% of the printable
    height (a fresh clone's whole book: 255-257 of 265 mm, the figures' own white edges about 1%;
    the old fixed 1100 px gave 242-245 mm, 92%; while a 12-column table stuck out of the column
    Chromium shrank every page and they ran 218 mm, 82%), stays within the printable width,
    prints nothing in the top margin, and keeps the image's aspect ratio (15%: the ink box leaves
    out the figure's white border)."""
    import numpy as np
    from bookkit.pdf import MARGIN_MM, printable_mm
    reader, texts = pdf
    turned = _turned_pages(reader, texts)
    assert turned, "no wide figure got a page of its own"
    dpi = 30
    px = dpi / 25.4  # pixels per mm
    width, height = printable_mm()
    top, bottom, left = (round(MARGIN_MM[k] * px) for k in ("top", "bottom", "left"))
    for n in turned:
        img = _read_pgm(page_images[n])
        assert not (img[:top] < 245).any(), f"page {n + 1}: the turned figure prints into the top margin"
        ys, xs = np.where(img[top:img.shape[0] - bottom] < 245)
        long, short = (ys.max() - ys.min() + 1) / px, (xs.max() - xs.min() + 1) / px  # mm
        assert long >= 0.95 * height, f"page {n + 1}: the turned figure is {long:.0f} of {height:.0f} mm long"
        assert short <= width and xs.min() >= left - 1, f"page {n + 1}: wider than the printable page"
        w, h = reader.pages[n].images[0].image.size
        assert abs(long / short / (w / h) - 1) < 0.15, f"page {n + 1}: {long:.0f} x {short:.0f} mm for a {w} x {h} image"


def test_nothing_is_wider_than_the_printed_column(pdf):
    """Anything wider than the column makes Chromium lay the whole book out wider and shrink
    every page (a 12-column table printed all pages at 88%): bookkit.pdf measures the page at the
    column's width before printing, and scales down (and names) what sticks out."""
    from bookkit.pdf import PDF, printable_px
    layout = json.loads((PDF.parent / "layout.json").read_text())
    assert layout["column"] == int(printable_px()[0])
    assert layout["width"] <= layout["column"], f"the printed page is {layout['width']} px wide: {layout['scaled'][:3]}"


def test_printable_area_is_a4_inside_the_margins_at_the_print_scale():
    from bookkit.pdf import printable_mm, printable_px
    assert printable_mm() == (182.0, 265.0)  # A4, 14 mm left and right, 16 mm top and bottom
    w, h = printable_px()
    assert round(w) == 809 and round(h) == 1178  # 182 mm and 265 mm at 96 px per inch / 0.85


def test_last_page_is_not_a_stray_line(pdf):
    _, texts = pdf
    lines = [l for l in texts[-1].splitlines() if l.strip() and "version" not in l]
    assert len(lines) >= 4, f"the last page holds only {lines}"


def test_fix_outline_appends_an_update_that_pypdf_and_poppler_read(tmp_path):
    """bookkit.pdf writes the outline's titles and the renumbered contents pages as an incremental
    update appended to Chromium's file: a small print, patched, reads back with the new titles,
    the patch's text on its pages and the rest unchanged, in pypdf (strict) and in poppler."""
    import subprocess
    from bookkit.browser import chromium
    from bookkit.pdf import fix_outline
    html = "".join(f"<h1>Part {k} windows and<br>dilation</h1><p>{'words ' * 500}</p>" for k in range(4))
    options = dict(format="A4", outline=True, tagged=True, display_header_footer=True, header_template="<div></div>",
                   footer_template="<div style='font-size:8px'><span class='pageNumber'></span></div>")
    with chromium() as browser:
        page = browser.new_page()
        page.set_content(f"<html><head><title>t</title></head><body>{html}</body></html>")
        page.pdf(path=str(tmp_path / "book.pdf"), **options)
        page.evaluate("() => document.querySelector('h1').textContent = 'Patched heading'")
        page.pdf(path=str(tmp_path / "patch.pdf"), page_ranges="1-1", **options)
    before = pypdf.PdfReader(str(tmp_path / "book.pdf"))
    n, titles = len(before.pages), [e.title for e in before.outline]
    assert titles[0] == "Part 0 windows anddilation"  # what fix_outline is for
    second = before.pages[1].extract_text()
    headings = [[f"Part {k} windows and dilation", f"Part {k}: windows and dilation"] for k in range(4)]
    assert fix_outline(tmp_path / "book.pdf", headings, patch=(tmp_path / "patch.pdf", 1, 1)) == 4
    after = pypdf.PdfReader(str(tmp_path / "book.pdf"), strict=True)
    assert len(after.pages) == n
    assert [e.title for e in after.outline] == [f"Part {k}: windows and dilation" for k in range(4)]
    assert [after.get_destination_page_number(e) for e in after.outline] == \
           [before.get_destination_page_number(e) for e in before.outline]
    assert "Patched heading" in after.pages[0].extract_text() and after.pages[1].extract_text() == second
    import shutil
    if shutil.which("pdftotext"):  # poppler-utils (`make browser-deps`): what the book's readers will use
        text = subprocess.run(["pdftotext", "-raw", str(tmp_path / "book.pdf"), "-"], capture_output=True,
                              text=True, check=True).stdout
        assert text.count("\f") == n and text.startswith("Patched heading")
