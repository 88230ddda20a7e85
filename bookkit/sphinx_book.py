"""Sphinx extension for the book (listed in book/_config.yml): version footer, page relinking.

- The version of ``transformer_lib`` (read from its ``__init__.py``, without importing torch)
  becomes Sphinx's ``version``/``release`` and is shown in every page's footer with a link to the
  changelog (CHANGELOG.md, copied into the site as _static/CHANGELOG.txt so that a browser shows it
  as text, offline).
- ``TLIB_JUPYTERHUB_URL`` in the environment sets the JupyterHub launch button's hub (a course's
  own hub); without it, and with book/_config.yml's empty ``jupyterhub_url``, the published book
  has no JupyterHub button.
- Book pages (the glossary, the guides) link chapters as ``chapters/NN-slug.ipynb#anchor``; a
  link to a chapter that parts.yml lists but that has not landed yet is turned into plain text
  (the same rule ``build_book.relink`` applies inside the chapters), so the page builds now and
  links by itself once the chapter exists (the book's pages are re-read on every build for this).
"""
from __future__ import annotations

import os
import re
import shutil

from . import build_book
from .conventions import ROOT

__all__ = ["library_version", "setup"]


def library_version() -> str:
    """``transformer_lib.__version__``, read from the source so that Sphinx need not import torch."""
    init = (ROOT / "transformer_lib" / "__init__.py").read_text(encoding="utf8")
    return re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", init, re.M).group(1)


CHANGELOG_IN_SITE = "_static/CHANGELOG.txt"


def _on_config_inited(app, config) -> None:
    version = library_version()
    config.version = config.release = version
    options = config.html_theme_options
    hub = os.environ.get("TLIB_JUPYTERHUB_URL", "").strip()
    if hub:
        options.setdefault("launch_buttons", {})["jupyterhub_url"] = hub


def _footer(version: str, changelog_href: str, base: str) -> str:
    return (f"{base} <span class='tlib-version'>Version {version} (transformer_lib {version}; "
            f"changes in <a href='{changelog_href}'>CHANGELOG.md</a>)</span>")


def _on_page_context(app, pagename, templatename, context, doctree) -> None:
    """Every page's footer: the version and a link to the changelog, relative to that page."""
    base = app.config.html_theme_options.get("extra_footer", "")
    href = context["pathto"](CHANGELOG_IN_SITE, 1)
    context["theme_extra_footer"] = _footer(library_version(), href, base)


def _copy_changelog(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        target = os.path.join(app.outdir, CHANGELOG_IN_SITE)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(ROOT / "CHANGELOG.md", target)


def _on_source_read(app, docname: str, source: list[str]) -> None:
    if docname.startswith("chapters/"):
        return  # chapters are relinked when build_book copies them
    parts = build_book._load_yaml(build_book.BOOK / "parts.yml")
    existing, planned = set(build_book.existing_chapters(parts)), set(build_book.planned_chapters(parts))
    source[0] = build_book.relink(source[0], existing, planned, folder="chapters/")


def _book_pages_outdated(app, env, added, changed, removed) -> list[str]:
    """Re-read the book's own pages on every build (a handful of small files): which of their
    chapter links are live depends on which chapters exist now, not on the page's own mtime."""
    return [d for d in env.found_docs if not d.startswith("chapters/") and d not in added | changed]


def setup(app):
    app.connect("config-inited", _on_config_inited)
    app.connect("html-page-context", _on_page_context)
    app.connect("build-finished", _copy_changelog)
    app.connect("source-read", _on_source_read)
    app.connect("env-get-outdated", _book_pages_outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
