"""Offline reveal.js slide decks from the chapters: one slide per heading.

    python -m bookkit.slides chapters/*.ipynb --out dist/slides

Rule: every Markdown heading (#, ##, ###) starts a new slide; the text, code and outputs below it
fill the slide (it scrolls when long). Solution cells are left out; cells tagged ``hide-input``
show their output only; widgets appear in their static (precomputed) form. reveal.js and MathJax
are copied next to the decks from npm packages installed once into ``build/slide-assets`` (npm
registry only), so a deck opens from the file system with no network.
"""
from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .conventions import HIDE_INPUT, REMOVE_CELL, REMOVE_INPUT, ROOT, SOLUTION, is_chapter, tags_of

__all__ = ["notebook_to_slides", "build_decks", "ensure_assets", "REVEAL", "MATHJAX"]

REVEAL = "reveal.js@5.2.1"
MATHJAX = "mathjax@3.2.2"
ASSET_CACHE = ROOT / "build" / "slide-assets"


def ensure_assets(cache: Path = ASSET_CACHE) -> Path:
    """Install reveal.js and MathJax from npm into ``cache`` (once); return node_modules."""
    modules = cache / "node_modules"
    if not (modules / "reveal.js" / "dist" / "reveal.js").exists() or not (modules / "mathjax" / "es5").exists():
        cache.mkdir(parents=True, exist_ok=True)
        if shutil.which("npm") is None:
            raise RuntimeError("npm is needed once to fetch reveal.js and MathJax for the slides")
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(cache),
                        REVEAL, MATHJAX], check=True)
    return modules


def _copy_assets(modules: Path, out: Path) -> None:
    dest = out / "_assets"
    if (dest / "reveal" / "reveal.js").exists():
        return
    (dest / "reveal").mkdir(parents=True, exist_ok=True)
    for name in ("reveal.js", "reveal.css"):
        shutil.copy2(modules / "reveal.js" / "dist" / name, dest / "reveal" / name)
    theme = modules / "reveal.js" / "dist" / "theme"
    (dest / "reveal" / "theme").mkdir(exist_ok=True)
    shutil.copy2(theme / "white.css", dest / "reveal" / "theme" / "white.css")  # local fonts only
    shutil.copytree(theme / "fonts" / "source-sans-pro", dest / "reveal" / "theme" / "fonts" / "source-sans-pro",
                    dirs_exist_ok=True)
    mj = dest / "mathjax"
    mj.mkdir(parents=True, exist_ok=True)
    shutil.copy2(modules / "mathjax" / "es5" / "tex-chtml-full.js", mj / "tex-chtml-full.js")
    shutil.copytree(modules / "mathjax" / "es5" / "output" / "chtml" / "fonts", mj / "output" / "chtml" / "fonts",
                    dirs_exist_ok=True)


def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    def math(content: str, config: dict) -> str:
        body = html.escape(content)
        return f"\\[{body}\\]" if config.get("display_mode") else f"\\({body}\\)"

    return MarkdownIt("commonmark").enable("table").use(dollarmath_plugin, renderer=math)


_DIRECTIVE = re.compile(r"```\{(\w[\w-]*)\}[^\n]*\n(.*?)```", re.S)
_ROLE = re.compile(r"\{(\w+)\}`([^`]*)`")


def _myst_to_commonmark(text: str) -> str:
    """Turn MyST admonition directives into block quotes and roles into plain text."""
    def directive(m):
        body = "\n".join(l for l in m.group(2).splitlines() if not l.startswith(":"))
        quoted = "\n".join("> " + l for l in body.strip().splitlines())
        return f"> **{m.group(1).capitalize()}**\n>\n{quoted}\n"
    text = _DIRECTIVE.sub(directive, text)
    return _ROLE.sub(lambda m: m.group(2), text)


def _outputs_html(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(f"<pre class='output'>{html.escape(out.get('text', ''))}</pre>")
        elif kind in ("display_data", "execute_result"):
            data = out.get("data", {})
            if "text/html" in data:
                parts.append(data["text/html"])
            elif "image/png" in data:
                parts.append(f"<img alt='figure' src='data:image/png;base64,{data['image/png'].strip()}'/>")
            elif "text/plain" in data:
                parts.append(f"<pre class='output'>{html.escape(data['text/plain'])}</pre>")
    return "\n".join(parts)


def notebook_to_slides(nb, title: str) -> list[str]:
    """The slides (HTML of each <section>) of a notebook."""
    md = _markdown()
    slides: list[list[str]] = [[]]
    for cell in nb.cells:
        tags = tags_of(cell)
        if SOLUTION in tags or REMOVE_CELL in tags:
            continue
        if cell.cell_type == "markdown":
            chunks = re.split(r"(?m)^(?=#{1,3} )", cell.source)
            for chunk in chunks:
                if not chunk.strip():
                    continue
                if re.match(r"#{1,3} ", chunk) and any(slides[-1]):
                    slides.append([])
                slides[-1].append(md.render(_myst_to_commonmark(chunk)))
        elif cell.cell_type == "code":
            if HIDE_INPUT not in tags and REMOVE_INPUT not in tags:
                slides[-1].append(f"<pre><code class='language-python'>{html.escape(cell.source)}</code></pre>")
            slides[-1].append(_outputs_html(cell))
    return ["\n".join(s) for s in slides if any(p.strip() for p in s)]


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="_assets/reveal/reveal.css">
<link rel="stylesheet" href="_assets/reveal/theme/white.css">
<style>.reveal .slides section{{height:100%;overflow-y:auto;text-align:left;font-size:0.55em}}
.reveal pre{{font-size:0.8em;width:100%}} .reveal img{{max-height:420px}} .reveal table{{font-size:0.8em}}</style>
<script>window.MathJax={{tex:{{inlineMath:[['\\\\(','\\\\)']],displayMath:[['\\\\[','\\\\]']]}}}};</script>
<script src="_assets/mathjax/tex-chtml-full.js"></script>
</head><body><div class="reveal"><div class="slides">
{sections}
</div></div>
<script src="_assets/reveal/reveal.js"></script>
<script>Reveal.initialize({{hash:true, center:false, width:1100, height:750}});</script>
</body></html>
"""


def build_decks(notebooks: list[str | Path], out: str | Path, modules: Path | None = None) -> list[Path]:
    import nbformat
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _copy_assets(modules or ensure_assets(), out)
    written = []
    for path in map(Path, notebooks):
        nb = nbformat.read(str(path), as_version=4)
        sections = "\n".join(f"<section>\n{s}\n</section>" for s in notebook_to_slides(nb, path.stem))
        deck = out / f"{path.stem}.html"
        deck.write_text(_PAGE.format(title=html.escape(path.stem), sections=sections))
        written.append(deck)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit.slides")
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--out", default="dist/slides")
    args = parser.parse_args(argv)
    notebooks = [p for p in args.notebooks if is_chapter(p) and p.endswith(".ipynb")]
    decks = build_decks(notebooks, args.out)
    print(f"wrote {len(decks)} decks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
