"""The whole book as one PDF, printed by Chromium from the one-page HTML build.

    python -m bookkit.pdf            # writes book/_build/pdf/book.pdf (what `make pdf` runs)

Why Chromium and not LaTeX: the PDF then shows exactly what the tested web book shows. MathJax
typesets the math (the same local copy), code keeps its highlighting, figures and the static
widgets (in their default setting) print as they are, and HTML tables stay tables. Jupyter
Book's LaTeX builder would need about a gigabyte of TeX packages, drops the widgets' HTML
outputs and the tables that are HTML, and would be a second renderer to keep in step.
Chromium is already what tests/bookkit/test_browser.py uses.

Steps: ``build_book.prepare()`` (chapters and table of contents, as for the site), Sphinx's
``singlehtml`` builder into book/_build/singlehtml (every page in one document), then Chromium
(Playwright, /usr/bin/chromium) opens it from 127.0.0.1, waits for MathJax, opens every
solution (each appears right after its exercise, labelled "Solution") and prints A4 pages with
page numbers, a PDF outline from the headings and tagged (accessible) structure. The print
layout itself is CSS: ``@media print`` in book/_assets/css/book.css.

What the page needs before it prints (``_PREPARE_JS``):

- page numbers on the contents page (the book theme's print table of contents, after the
  title: one line per page of the book under its part's caption): the book is printed once, the page where each page of the book starts is read
  from that PDF's outline, written into the contents, and the book printed again (the numbers sit
  on lines that are already there, so nothing moves: the second print lays out the book only
  up to the page after the contents and renders only the contents pages (``page_ranges``), and
  ``_patch_pages`` puts them over the first print's, in an incremental update of the file);
- the headings' texts, for ``fix_outline``, which rewrites the outline Chromium made from them
  ("windows and" + "dilation" became "windows anddilation", a wrapped heading came out twice);
- a code cell of at most ``KEEP_LINES`` lines marked ``tlib-keep``: it moves whole to the next
  page instead of leaving its empty frame at the bottom of this one; a longer cell breaks, its
  frame repeated on both pages (``box-decoration-break: clone``);
- a figure more than ``WIDE_RATIO`` times wider than tall (a row of panels) turned a quarter on a
  page of its own and as long as the printable page (``printable_px``: about 1.43 times its
  length across the column; Chromium lays every page out at one width, so a landscape page would
  not widen it);
- display equations scaled to the printed column (book/_assets/js/fit-math.js), with the window
  as wide as that column;
- nothing wider than the column: if anything still is, Chromium lays the whole book out wider and
  shrinks every page to fit (a 12-column table once printed all 457 pages at 88%), so what sticks
  out is scaled down to the column (CSS ``zoom``), named in layout.json and on the build's output.
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path

from . import build_book
from .browser import chromium, serve, wait_for_mathjax
from .sphinx_book import library_version

__all__ = ["SINGLEHTML", "PDF", "KEEP_LINES", "WIDE_RATIO", "PAGE_MM", "MARGIN_MM", "SCALE", "printable_mm",
           "printable_px", "build_singlehtml", "print_pdf", "build_pdf", "ensure_pdf", "outline_pages"]

SINGLEHTML = build_book.BOOK / "_build" / "singlehtml"
PDF = build_book.BOOK / "_build" / "pdf" / "book.pdf"
_FOOTER = ("<div style='font-size:8px; width:100%; text-align:center; color:#555'>"
           "<span class='title'></span> &middot; version {version} &middot; "
           "<span class='pageNumber'></span> / <span class='totalPages'></span></div>")


def build_singlehtml() -> Path:
    """Every page of the book in one HTML document (book/_build/singlehtml/index.html)."""
    build_book.prepare()
    build_book.run_jupyter_book("singlehtml")
    build_book.externalize_images(SINGLEHTML)  # a 30 MB page of base64 loads too slowly to print
    return SINGLEHTML / "index.html"


KEEP_LINES = 40     # a code cell this short moves whole to the next page rather than break
WIDE_RATIO = 2.6    # a figure this much wider than tall prints on a landscape page

# The printed page: A4, these margins (the footer sits in the bottom one), everything at SCALE.
PAGE_MM = (210.0, 297.0)
MARGIN_MM = {"top": 16.0, "bottom": 16.0, "left": 14.0, "right": 14.0}
SCALE = 0.85
_TURN_FILL = 0.98   # of the printable length: a turned figure that rounds to one pixel more would push a blank page


def printable_mm() -> tuple[float, float]:
    """(width, height) in mm of the part of a page the book is printed on (inside the margins)."""
    return (PAGE_MM[0] - MARGIN_MM["left"] - MARGIN_MM["right"], PAGE_MM[1] - MARGIN_MM["top"] - MARGIN_MM["bottom"])


def printable_px() -> tuple[float, float]:
    """(width, height) of the printable area in CSS pixels of the printed layout: Chromium lays the
    page out at 96 px per inch divided by ``SCALE``, so at A4 the column is about 809 px wide and
    1178 px tall (the window is set to this size before the page is prepared)."""
    px = 96 / 25.4 / SCALE
    w, h = printable_mm()
    return (w * px, h * px)


_PREPARE_JS = """(args) => {
  const [parts, keepLines, wideRatio, [boxWidth, boxHeight]] = args;
  // headings: one space where the source had a line break (the PDF outline is made from them)
  document.querySelectorAll('h1, h2, h3, h4').forEach(h => h.childNodes.forEach(n => {
    if (n.nodeType === 3) n.textContent = n.textContent.replace(/\\s+/g, ' '); }));
  // short code cells move whole; long ones break with their frame on both pages
  document.querySelectorAll('div.cell_input, div.cell_output > div.output').forEach(c => {
    const pre = c.querySelector('pre');
    const lines = pre ? pre.textContent.split('\\n').length : 0;
    if (lines && lines <= keepLines) c.classList.add('tlib-keep');
  });
  // wide figures (not a widget's frames): turned a quarter, a page each, as large as the page
  // allows with the aspect ratio kept: its length runs down the page, its height across it
  document.querySelectorAll('article div.cell_output img').forEach(i => {
    const ratio = i.naturalHeight ? i.naturalWidth / i.naturalHeight : 0;
    if (ratio > wideRatio && !i.closest('.tlib-widget') && i.parentElement.querySelectorAll('img').length === 1) {
      i.parentElement.classList.add('tlib-wide-figure');
      i.parentElement.style.setProperty('--tlib-turned', Math.floor(Math.min(boxHeight, boxWidth * ratio)) + 'px');
    }
  });
  // the contents page (the book theme's print table of contents): a page-number slot per entry
  const entries = [...document.querySelectorAll('#jb-print-toc a[href^="#document-"]')];
  entries.forEach(a => { if (!a.nextElementSibling || !a.nextElementSibling.classList.contains('tlib-page')) {
    const n = document.createElement('span'); n.className = 'tlib-page'; a.after(n); a.parentElement.classList.add('tlib-entry'); } });
  if (window.tlibFitMath) window.tlibFitMath();
  // what still sticks out of the column (the window is the column's width) is scaled down to it
  const root = document.documentElement, edge = root.clientWidth + 1, scaled = [];
  for (let pass = 0; pass < 3 && root.scrollWidth > edge; pass++) {
    document.querySelectorAll('article *').forEach(e => {
      const r = e.getBoundingClientRect();
      if (r.width > 0 && r.right > edge && e.parentElement.getBoundingClientRect().right <= edge) {
        const zoom = Math.floor((edge - 1 - r.left) / r.width * 100) / 100 * (parseFloat(e.style.zoom) || 1);
        e.style.zoom = String(zoom);
        scaled.push([e.tagName.toLowerCase(), (e.closest('section[id]') || {}).id || '', e.textContent.replace(/\\s+/g, ' ').trim().slice(0, 60), zoom]);
      }
    });
  }
  const layout = {column: root.clientWidth, width: root.scrollWidth, scaled: scaled};
  const headings = [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => {
    const bare = h.cloneNode(true), shown = h.cloneNode(true);
    [bare, shown].forEach(c => c.querySelectorAll('.headerlink').forEach(e => e.remove()));
    bare.querySelectorAll('mjx-container, .math').forEach(e => e.remove());
    shown.querySelectorAll('mjx-container').forEach(e => {
      const mml = e.querySelector('mjx-assistive-mml'); e.replaceWith(mml ? mml.textContent : ''); });
    const clean = t => t.replace(/\\s+/g, ' ').trim();
    return [clean(bare.textContent), clean(shown.textContent)];
  });
  return [entries.map(a => [a.getAttribute('href').slice('#document-'.length), a.textContent.replace(/\\s+/g, ' ').trim()]),
          headings, layout];
}"""

_NUMBER_JS = """(pages) => {
  document.querySelectorAll('#jb-print-toc a[href^="#document-"]').forEach((a, k) => {
    a.nextElementSibling.textContent = pages[k] === null ? '' : String(pages[k]); });
}"""


# the page from the book's page ``doc`` on, removed: everything after its marker in the article
_CUT_JS = """(doc) => {
  const mark = document.getElementById('document-' + doc), article = mark && mark.closest('article');
  if (!article) return false;
  const range = document.createRange();
  range.setStartBefore(mark);
  range.setEndAfter(article.lastChild);
  range.deleteContents();
  return true;
}"""


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def outline_pages(pdf_path: Path) -> list[tuple[str, int]]:
    """(title, 1-based page) of every entry of the PDF's outline, depth first."""
    from pypdf import PdfReader
    reader = PdfReader(str(pdf_path))
    found: list[tuple[str, int]] = []

    def walk(entries):
        for e in entries:
            if isinstance(e, list):
                walk(e)
            else:
                found.append((e.title, reader.get_destination_page_number(e) + 1))
    walk(reader.outline)
    return found


def _contents_numbers(entries: list[list[str]], pdf_path: Path) -> list[int | None]:
    """The page on which each contents entry's title first appears in the outline, in order."""
    outline = outline_pages(pdf_path)
    numbers, at = [], 0
    for _, title in entries:
        want = _squash(title)
        hit = next((k for k in range(at, len(outline)) if want in _outline_candidates(outline[k][0])), None)
        numbers.append(outline[hit][1] if hit is not None else None)
        at = hit + 1 if hit is not None else at
    return numbers


def _outline_candidates(title: str) -> list[str]:
    """``title`` without white space, and with a repeated first part dropped: Chromium writes a
    heading that wraps as line 1 + line 1 + line 2 ("SummarySummary" when it does not wrap)."""
    want = _squash(title)
    out = [want]
    for i in range(1, len(want) // 2 + 1):
        if want[:i] == want[i:2 * i]:
            out.append(want[i:])
    return out


def fix_outline(pdf_path: Path, headings: list[list[str]], patch: tuple[Path, int, int] | None = None) -> int:
    """Give each PDF outline entry its heading's text as the page has it.

    Chromium builds an entry from the heading's printed lines and joins them without a space
    ("windows and" + "dilation" -> "windows anddilation"), repeats a wrapped heading's first line
    and leaves out inline math. ``headings`` holds (text without math, text with math as plain
    characters) for every heading of the page; an entry is matched to the heading whose text
    without math equals it once white space is ignored. Returns how many entries were rewritten.
    ``patch`` (pdf, first, count): pages drawn over the book's in the same pass (``_patch_pages``).

    The changes are appended to the file as an incremental update (PDF 1.7, 7.5.6): the changed
    outline entries and pages, the patch's content streams and resources, a cross-reference
    section for them and a trailer pointing at the previous one. Only those objects are read and
    written; rewriting the whole book with pypdf's writer (every one of its ~200,000 objects, most
    of them the tagged structure) took about 45 CPU-s."""
    from pypdf import PdfReader
    from pypdf.generic import NameObject, TextStringObject
    reader = PdfReader(str(pdf_path))
    changed: dict[int, tuple[int, object]] = {}   # object number -> (generation, new object)
    next_id = [int(reader.trailer["/Size"])]
    if patch is not None:
        _patch_pages(reader, *patch, changed, next_id)
    texts = {}
    for key, text in headings:
        texts.setdefault(_squash(key), text)
    count = 0

    def walk(ref):
        nonlocal count
        while ref is not None:
            item = ref.get_object()
            title = str(item.get("/Title", ""))
            match = next((texts[c] for c in _outline_candidates(title) if c in texts), None)
            if match is not None and match != title:
                item[NameObject("/Title")] = TextStringObject(match)
                changed[ref.idnum] = (ref.generation, item)
                count += 1
            if "/First" in item:
                walk(item.raw_get("/First"))
            ref = item.raw_get("/Next") if "/Next" in item else None

    root = reader.trailer["/Root"]
    outlines = root.get("/Outlines")
    if outlines is not None and "/First" in outlines.get_object():
        walk(outlines.get_object().raw_get("/First"))
    if changed:
        _append_update(pdf_path, reader, changed, next_id[0])
    return count


def _append_update(pdf_path: Path, reader, changed: dict, size: int) -> None:
    """Append ``changed`` ({number: (generation, object)}) to ``pdf_path`` as an incremental update."""
    import io
    from pypdf.generic import ArrayObject, DictionaryObject, NameObject, NumberObject
    data = pdf_path.read_bytes()
    prev = int(re.findall(rb"startxref\s+(\d+)", data[-2048:])[-1])
    out = io.BytesIO()
    base = len(data) + 1   # after the newline that separates the update from the original
    offsets = {}
    for num in sorted(changed):
        gen, obj = changed[num]
        offsets[num] = (base + out.tell(), gen)
        out.write(f"{num} {gen} obj\n".encode())
        obj.write_to_stream(out)
        out.write(b"\nendobj\n")
    xref = base + out.tell()
    out.write(b"xref\n0 1\n0000000000 65535 f\r\n")   # the free list's head, as in every section
    nums = sorted(offsets)
    k = 0
    while k < len(nums):   # one subsection per run of consecutive object numbers
        j = k
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.write(f"{nums[k]} {j - k + 1}\n".encode())
        for n in nums[k:j + 1]:
            out.write(f"{offsets[n][0]:010d} {offsets[n][1]:05d} n\r\n".encode())
        k = j + 1
    trailer = DictionaryObject({NameObject("/Size"): NumberObject(size), NameObject("/Prev"): NumberObject(prev)})
    for key in ("/Root", "/Info", "/ID"):
        if key in reader.trailer:
            value = reader.trailer.raw_get(key)
            trailer[NameObject(key)] = ArrayObject(value) if isinstance(value, list) else value
    out.write(b"trailer\n")
    trailer.write_to_stream(out)
    out.write(f"\nstartxref\n{xref}\n%%EOF\n".encode())
    with open(pdf_path, "ab") as f:
        f.write(b"\n" + out.getvalue())


def _parts_of_pages() -> dict[str, str]:
    toc = build_book.make_toc()
    return {c["file"]: p["caption"] for p in toc["parts"] for c in p["chapters"]}


def _patch_pages(reader, patch: Path, first: int, count: int, changed: dict, next_id: list[int]) -> None:
    """Draw ``patch``'s first ``count`` pages (a print of pages ``first``.. of the same document) on
    ``reader``'s pages from ``first`` (1-based) on: each keeps its page object, so the outline, the
    named destinations and the links (which did not move) still point at it. The patch's content
    streams and resources are copied in under new object numbers (from ``next_id``); the pages
    and those objects go into ``changed``."""
    from pypdf import PdfReader
    from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject, StreamObject
    source = PdfReader(str(patch))
    numbers: dict[int, int] = {}   # the patch's object number -> the book's

    def copy(obj):
        if isinstance(obj, IndirectObject):
            if obj.idnum not in numbers:
                numbers[obj.idnum] = next_id[0]
                next_id[0] += 1
                changed[numbers[obj.idnum]] = (0, copy(obj.get_object()))
            return IndirectObject(numbers[obj.idnum], 0, reader)
        if isinstance(obj, StreamObject):
            new = obj.__class__()
            new._data = obj._data
            for key, value in obj.items():
                new[NameObject(key)] = copy(value)
            return new
        if isinstance(obj, DictionaryObject):
            return DictionaryObject({NameObject(k): copy(v) for k, v in obj.items()})
        if isinstance(obj, ArrayObject):
            return ArrayObject(copy(v) for v in obj)
        return obj

    for k, page in enumerate(source.pages[:count]):
        target = reader.pages[first - 1 + k]
        for key in ("/Contents", "/Resources"):
            target[NameObject(key)] = copy(page.raw_get(key))
        ref = target.indirect_reference
        changed[ref.idnum] = (ref.generation, target)


def print_pdf(html_dir: Path = SINGLEHTML, out: Path = PDF) -> Path:
    """Print ``html_dir/index.html`` to ``out`` with Chromium, then the contents pages again with
    their numbers read from that print (only they change: the numbers sit on lines already there)."""
    from pypdf import PdfReader
    out.parent.mkdir(parents=True, exist_ok=True)
    options = dict(format="A4", scale=SCALE, print_background=True, outline=True, tagged=True,
                   prefer_css_page_size=True, margin={k: f"{v}mm" for k, v in MARGIN_MM.items()},
                   display_header_footer=True, header_template="<div></div>",
                   footer_template=_FOOTER.format(version=library_version()))
    width, height = printable_px()
    with serve(html_dir) as site, chromium() as browser:
        # the window is the printed column, so that equations are fitted to it and overflow is seen
        page = browser.new_page(viewport={"width": int(width), "height": int(height)})
        page.set_default_timeout(600_000)  # the whole book in one page: minutes on a busy machine
        page.emulate_media(media="print")
        page.goto(f"{site}/index.html", wait_until="load")
        wait_for_mathjax(page)
        # solutions: open each one where it stands, after its exercise
        page.evaluate("() => document.querySelectorAll('div.cell.tag_solution details').forEach(d => d.open = true)")
        # every image that prints, loaded and decoded; a widget's hidden frames (most of the book's
        # images: one per setting of its controls) never print and stay unloaded
        page.evaluate("async () => { const shown = [...document.images].filter(i => i.checkVisibility());"
                      " shown.forEach(i => i.loading = 'eager');"
                      " await Promise.all(shown.map(i => i.decode().catch(() => null))); }")
        box = [width, height * _TURN_FILL]
        entries, headings, layout = page.evaluate(_PREPARE_JS, [_parts_of_pages(), KEEP_LINES, WIDE_RATIO, box])
        for tag, section, text, zoom in layout["scaled"]:
            print(f"bookkit.pdf: a <{tag}> in #{section} is wider than the printed column, printed at {zoom:.0%}: "
                  f"{text!r}", flush=True)
        page.pdf(path=str(out), **options)
        numbers = _contents_numbers(entries, out)
        texts = [p.extract_text() for p in PdfReader(str(out)).pages[:min(filter(None, numbers))]]
        first = next(k for k, t in enumerate(texts) if "Contents" in t) + 1
        last = min(filter(None, numbers)) - 1
        page.evaluate(_NUMBER_JS, numbers)
        # The second print needs only the pages up to the contents' last + 1: the book from the
        # first page of the book that starts after those is cut off (pages are laid out in order,
        # so nothing before it moves), and the footer's page count is the first print's, written
        # in. Laying out the whole book again took about 30 CPU-s; the check below still compares
        # the page after the contents with the first print's.
        cut = next((doc for (doc, _), n in zip(entries, numbers) if n is not None and n > last + 1), None)
        if cut is not None:
            page.evaluate(_CUT_JS, cut)
        total = len(PdfReader(str(out)).pages)
        again = dict(options, footer_template=options["footer_template"].replace(
            "<span class='totalPages'></span>", f"<span>{total}</span>"))
        with tempfile.TemporaryDirectory() as tmp:
            patch = Path(tmp) / "contents.pdf"
            # one page more than the contents: it must come out as before (nothing moved)
            page.pdf(path=str(patch), page_ranges=f"{first}-{last + 1}", **again)
            page.close()
            patched = PdfReader(str(patch)).pages
            if len(patched) != last + 2 - first or _squash(patched[-1].extract_text()) != _squash(texts[last]):
                raise build_book.BuildError(f"writing the contents page numbers moved page {last + 1}")
            fix_outline(out, headings, patch=(patch, first, last + 1 - first))
    (out.parent / "contents.json").write_text(json.dumps(
        [{"page": doc, "title": title, "number": n} for (doc, title), n in zip(entries, numbers)], indent=1) + "\n")
    (out.parent / "layout.json").write_text(json.dumps(layout, indent=1) + "\n")
    return out


def build_pdf(out: Path = PDF) -> Path:
    start = time.perf_counter()
    digest = build_book.inputs_digest()
    stamp = out.parent / ".build-inputs"
    stamp.unlink(missing_ok=True)
    build_singlehtml()
    print_pdf(out=out)
    stamp.write_text(digest + "\n")
    from pypdf import PdfReader
    pages = len(PdfReader(str(out)).pages)
    print(f"PDF written in {time.perf_counter() - start:.1f} s: {out.relative_to(build_book.ROOT)} ({pages} pages)",
          flush=True)
    return out


def ensure_pdf() -> Path:
    """Build the PDF if it is missing or older than the book's inputs; return its path."""
    stamp = PDF.parent / ".build-inputs"
    if not PDF.exists() or not stamp.exists() or stamp.read_text().strip() != build_book.inputs_digest():
        build_pdf()
    return PDF


if __name__ == "__main__":
    try:
        build_pdf()
    except (build_book.BuildError, FileNotFoundError) as e:
        sys.exit(f"bookkit.pdf: {e}")
