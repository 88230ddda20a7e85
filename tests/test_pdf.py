"""The PDF of the whole book (`make pdf`): every chapter in it, math typeset, a sane length.

``bookkit.pdf.ensure_pdf()`` reuses book/_build/pdf/book.pdf when it is newer than the book's
inputs and builds it otherwise (about two minutes: Sphinx's one-page build, then Chromium prints
it). Without Chromium this module skips locally and fails under CI, like tests/test_browser.py.
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


def squash(text: str) -> str:
    """Text without white space or ligatures: PDF extraction breaks lines (and joins words) where
    it likes, and returns "fi" as one glyph."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


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
    reader = pypdf.PdfReader(str(ensure_pdf()))
    texts = [page.extract_text() for page in reader.pages]
    return reader, texts


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
