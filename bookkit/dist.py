"""A zip of the offline web book and the PDF, for readers who cannot run a server.

    python -m bookkit.dist          # writes dist/transformers-interactively-<version>.zip (`make dist`)

The zip holds one folder, ``transformers-interactively-<version>/``, with ``html/`` (open
``html/index.html`` in a browser: everything, MathJax and the explainer's model included, is
local and works from disk), ``book.pdf``, ``CHANGELOG.md`` and the licences (``LICENSE`` for
the code, ``LICENSE-CONTENT.md`` for the prose and figures, ``THIRD-PARTY-NOTICES.md``). It packs what `make book` and `make pdf` built; it builds nothing itself.
"""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from . import build_book, pdf
from .conventions import ROOT
from .sphinx_book import library_version

__all__ = ["DIST", "write_zip"]

DIST = ROOT / "dist"


def write_zip(html: Path = build_book.HTML, pdf_path: Path = pdf.PDF, out_dir: Path = DIST) -> Path:
    for need in (html / "index.html", pdf_path):
        if not need.exists():
            raise FileNotFoundError(f"{need.relative_to(ROOT)} is missing: run `make book` and `make pdf` first")
    name = f"transformers-interactively-{library_version()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{name}.zip"
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(html.rglob("*")):
            if f.is_file() and f.name != ".build-inputs":
                zf.write(f, f"{name}/html/{f.relative_to(html)}")
        zf.write(pdf_path, f"{name}/book.pdf")
        zf.write(ROOT / "CHANGELOG.md", f"{name}/CHANGELOG.md")
        for licence in build_book.LICENCE_FILES:
            zf.write(ROOT / licence, f"{name}/{licence}")
    return out


if __name__ == "__main__":
    try:
        path = write_zip()
    except FileNotFoundError as e:
        sys.exit(f"bookkit.dist: {e}")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1e6:.1f} MB)")
