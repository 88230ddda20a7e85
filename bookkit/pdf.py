"""The whole book as one PDF, printed by Chromium from the one-page HTML build.

    python -m bookkit.pdf            # writes book/_build/pdf/book.pdf (what `make pdf` runs)

Why Chromium and not LaTeX: the PDF then shows exactly what the tested web book shows. MathJax
typesets the math (the same local copy), code keeps its highlighting, figures and the static
widgets (in their default setting) print as they are, and HTML tables stay tables. Jupyter
Book's LaTeX builder would need about a gigabyte of TeX packages, drops the widgets' HTML
outputs and the tables that are HTML, and would be a second renderer to keep in step.
Chromium is already what tests/test_browser.py uses.

Steps: ``build_book.prepare()`` (chapters and table of contents, as for the site), Sphinx's
``singlehtml`` builder into book/_build/singlehtml (every page in one document), then Chromium
(Playwright, /usr/bin/chromium) opens it from 127.0.0.1, waits for MathJax, opens every
solution (each appears right after its exercise, labelled "Solution") and prints A4 pages with
page numbers, a PDF outline from the headings and tagged (accessible) structure. The print
layout itself is CSS: ``@media print`` in book/_assets/css/book.css.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from . import build_book
from .browser import chromium, serve, wait_for_mathjax
from .sphinx_book import library_version

__all__ = ["SINGLEHTML", "PDF", "build_singlehtml", "print_pdf", "build_pdf", "ensure_pdf"]

SINGLEHTML = build_book.BOOK / "_build" / "singlehtml"
PDF = build_book.BOOK / "_build" / "pdf" / "book.pdf"
_FOOTER = ("<div style='font-size:8px; width:100%; text-align:center; color:#555'>"
           "<span class='title'></span> &middot; version {version} &middot; "
           "<span class='pageNumber'></span> / <span class='totalPages'></span></div>")


def build_singlehtml() -> Path:
    """Every page of the book in one HTML document (book/_build/singlehtml/index.html)."""
    build_book.prepare()
    build_book.run_jupyter_book("singlehtml")
    return SINGLEHTML / "index.html"


def print_pdf(html_dir: Path = SINGLEHTML, out: Path = PDF) -> Path:
    """Print ``html_dir/index.html`` to ``out`` with Chromium."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with serve(html_dir) as site, chromium() as browser:
        page = browser.new_page()
        page.emulate_media(media="print")
        page.goto(f"{site}/index.html", wait_until="load")
        wait_for_mathjax(page)
        # solutions: open each one where it stands, after its exercise
        page.evaluate("() => document.querySelectorAll('div.cell.tag_solution details').forEach(d => d.open = true)")
        page.evaluate("async () => { await Promise.all([...document.images].map(i => i.decode().catch(() => null))); }")
        page.pdf(path=str(out), format="A4", scale=0.85, print_background=True, outline=True, tagged=True,
                 margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"},
                 display_header_footer=True, header_template="<div></div>",
                 footer_template=_FOOTER.format(version=library_version()))
        page.close()
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
