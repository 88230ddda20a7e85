"""Offline reveal.js decks a lecturer can project: one deck per chapter, from its key points.

    python -m bookkit.slides chapters/*.ipynb --out dist/slides      # what `make slides` runs

A chapter is written to be read, not projected: one slide per heading gives slides that scroll.
A deck is built from the parts of a chapter that work on a screen across a room:

1. the title and the chapter's question;
2. its short answer (whole sentences, at most ``MAX_WORDS`` words per slide);
3. its key points, at most ``MAX_BULLETS`` to a slide;
4. per section: its display equations (``MAX_EQUATIONS`` to a slide), every figure (one to a
   slide, with its description as the caption; a widget shows its default setting) and short
   code (at most ``MAX_CODE_LINES`` lines, with its printed output when that is short too). Long
   code, exercises, solutions and checks stay in the notebook: the deck names the notebook;
5. the summary.

A slide that would hold only a heading is not made. Headings keep their case (the theme's
upper-casing turned $d_k$ into D_K). Math is typeset by a local MathJax 3; reveal.js and MathJax
come from npm (installed once into ``build/slide-assets``) and are copied next to the decks, so a
deck opens from the file system with no network.

Why not nbconvert's reveal exporter: it maps cells to slides through ``slideshow`` metadata the
chapters do not carry (so it would still need a deck notebook built as here), and its template
loads MathJax 2 (``MathJax.Hub``) and require.js, two more offline copies, for a page this
module writes in 30 lines. tests/bookkit/test_slides.py opens every deck in Chromium and checks that each
slide fits the projector's 1280 x 720 frame.
"""
from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .conventions import (CLAIM, EXERCISE, HIDE_INPUT, REMOVE_CELL, REMOVE_INPUT, ROOT, SOLUTION, is_chapter,
                          is_check_cell, tags_of)

__all__ = ["notebook_to_slides", "build_decks", "ensure_assets", "REVEAL", "MATHJAX", "WIDTH", "HEIGHT"]

REVEAL = "reveal.js@5.2.1"
MATHJAX = "mathjax@3.2.2"
ASSET_CACHE = ROOT / "build" / "slide-assets"
WIDTH, HEIGHT = 1280, 720         # a projector's 16:9 frame; reveal.js scales it to the screen
MAX_WORDS = 70                    # of prose on one slide
MAX_BULLETS = 4
MAX_EQUATIONS = 3
MAX_CODE_LINES = 12
MAX_OUTPUT_LINES = 8
SKIP_SECTIONS = {"exercises", "further reading"}


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
_ROLE = re.compile(r"\{(\w+(?::\w+)?)\}`([^`]*)`")
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)


def _myst_to_commonmark(text: str) -> str:
    """MyST admonitions become block quotes, roles plain text, links their text."""
    def directive(m):
        body = "\n".join(l for l in m.group(2).splitlines() if not l.startswith(":"))
        quoted = "\n".join("> " + l for l in body.strip().splitlines())
        return f"> **{m.group(1).capitalize()}**\n>\n{quoted}\n"
    text = _DIRECTIVE.sub(directive, text)
    text = _ROLE.sub(lambda m: m.group(2), text)
    return re.sub(r"(?<!!)\[([^\]]+)\]\([^)]*\)", r"\1", text)  # a link leads nowhere on a projector


def _words(text: str) -> int:
    return len(re.sub(r"\$[^$]*\$", "x", text).split())


def _sentences_in_chunks(paragraph: str, limit: int = MAX_WORDS) -> list[str]:
    """Whole sentences, at most ``limit`` words a chunk (a longer sentence stands alone)."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z(*`$])", " ".join(paragraph.split()))
    chunks, current = [], []
    for sentence in parts:
        if current and _words(" ".join(current + [sentence])) > limit:
            chunks.append(" ".join(current))
            current = []
        current.append(sentence)
    if current:
        chunks.append(" ".join(current))
    return chunks


def _bullets(text: str) -> list[str]:
    """The top-level list items of a Markdown block, each as one line."""
    items: list[str] = []
    for line in text.splitlines():
        if re.match(r"^[-*] ", line):
            items.append(line[2:].strip())
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
    return items


def _labelled(source: str, label: str) -> str | None:
    """The paragraph (or list) after a bold label such as **Short answer.**"""
    m = re.search(rf"\*\*{re.escape(label)}\.?\*\*\.?(.*?)(?=\n\s*\n\*\*|\n#|\Z)", source, re.S)
    return m.group(1).strip() if m else None


def _figures(cell) -> list[tuple[str, str]]:
    """(img src, description) of each figure a code cell shows; a static widget gives its
    default panel's figure."""
    found = []
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        text_html = data.get("text/html", "")
        text_html = "".join(text_html) if isinstance(text_html, list) else text_html
        if "tlib-widget" in text_html:
            panel = re.search(r"<div class='tlib-panel' data-key='[\d-]+'>(.*?)</div>", text_html, re.S)
            img = re.search(r"<img class='tlib-figure' alt=\"([^\"]*)\" src='([^']+)'", panel.group(1)) if panel else None
            if img:
                found.append((img.group(2), html.unescape(img.group(1))))
        elif "image/png" in data:
            png = data["image/png"]
            png = ("".join(png) if isinstance(png, list) else png).strip()
            alt = out.get("metadata", {}).get("image/png", {}).get("alt", "")
            found.append((f"data:image/png;base64,{png}", alt))
    return found


def _text_output(cell) -> str:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stdout":
            texts.append(out.get("text", ""))
        elif out.get("output_type") == "execute_result" and "text/plain" in out.get("data", {}) \
                and "text/html" not in out["data"] and "image/png" not in out["data"]:
            texts.append(out["data"]["text/plain"])
    text = "".join("".join(t) if isinstance(t, list) else t for t in texts)
    return "\n".join(l.split("\r")[-1] for l in text.rstrip("\n").split("\n"))


def _slide(title: str, body: str, cls: str = "") -> str:
    heading = f"<h2>{title}</h2>\n" if title else ""
    return f"<section{f' class={cls!r}' if cls else ''}>\n{heading}{body}\n</section>"


def notebook_to_slides(nb, title: str) -> list[str]:
    """The slides (each a ``<section>``) of an executed chapter notebook."""
    md = _markdown()
    render = lambda t: md.render(_myst_to_commonmark(t))
    inline = lambda t: md.renderInline(_myst_to_commonmark(t))
    cells = [c for c in nb.cells if REMOVE_CELL not in tags_of(c)]
    first = next((c.source for c in cells if c.cell_type == "markdown"), "")
    heading = re.search(r"^# (.+)$", first, re.M)
    chapter = heading.group(1).strip() if heading else title
    slides = []
    question = _labelled(first, "The question")
    if not question:  # a chapter without the usual opening: its first paragraph, cut at a sentence
        intro = re.split(r"\n\s*\n", first.split("\n", 1)[1].strip() if "\n" in first else "")[0] if heading else ""
        question = _sentences_in_chunks(intro)[0] if intro.strip() and not intro.startswith(("#", "```")) else None
    slides.append(_slide("", f"<h1>{inline(chapter)}</h1>\n"
                             + (f"<p class='question'>{inline(question)}</p>" if question else ""), "title"))
    answer = _labelled(first, "Short answer")
    if answer:
        chunks = _sentences_in_chunks(answer)
        for k, chunk in enumerate(chunks):
            more = f" ({k + 1}/{len(chunks)})" if len(chunks) > 1 else ""
            slides.append(_slide(f"Short answer{more}", f"<p>{inline(chunk)}</p>"))
    points = _bullets(_labelled(first, "Key points") or "")
    groups = [points[i:i + MAX_BULLETS] for i in range(0, len(points), MAX_BULLETS)]
    for k, group in enumerate(groups):
        more = f" ({k + 1}/{len(groups)})" if len(groups) > 1 else ""
        slides.append(_slide(f"Key points{more}", "<ul>" + "".join(f"<li>{inline(b)}</li>" for b in group) + "</ul>"))

    section, skip, long_code = "", False, 0
    blocks = []  # (cell, text): a Markdown cell split at its "## " headings
    for k, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            blocks.append((cell, None))
            continue
        text = cell.source
        if k == 0 and text == first:  # the title cell: only what follows its first section heading
            at = re.search(r"^## ", text, re.M)
            text = text[at.start():] if at else ""
        for chunk in re.split(r"(?m)^(?=## )", text):
            if chunk.strip():
                blocks.append((cell, chunk))
    for cell, text in blocks:
        tags = tags_of(cell)
        if cell.cell_type == "markdown":
            h2 = re.match(r"## (.+)$", text, re.M)
            if h2:
                section = h2.group(1).strip()
                skip = section.lower() in SKIP_SECTIONS
            if skip:
                continue
            if section.lower() == "summary":
                items = _bullets(text)
                groups = [items[i:i + MAX_BULLETS] for i in range(0, len(items), MAX_BULLETS)]
                for k, group in enumerate(groups):
                    more = f" ({k + 1}/{len(groups)})" if len(groups) > 1 else ""
                    slides.append(_slide(f"Summary{more}", "<ul>" + "".join(f"<li>{inline(b)}</li>" for b in group)
                                         + "</ul>"))
                continue
            equations = [m.group(0) for m in _DISPLAY.finditer(text)]
            for i in range(0, len(equations), MAX_EQUATIONS):
                slides.append(_slide(inline(section), "\n".join(render(e) for e in equations[i:i + MAX_EQUATIONS])))
            continue
        if skip or SOLUTION in tags or EXERCISE in tags or CLAIM in tags or is_check_cell(cell):
            continue
        for src, alt in _figures(cell):
            caption = f"<p class='caption'>{html.escape(alt)}</p>" if alt else ""
            slides.append(_slide(inline(section), f"<img src='{src}' alt='{html.escape(alt or 'figure', quote=True)}'/>"
                                 f"{caption}", "figure"))
        if HIDE_INPUT in tags or REMOVE_INPUT in tags or not cell.source.strip():
            continue
        lines = cell.source.strip().split("\n")
        if len(lines) > MAX_CODE_LINES:
            long_code += 1
            continue
        printed = _text_output(cell)
        out_lines = printed.split("\n") if printed else []
        body = f"<pre><code class='language-python'>{html.escape(cell.source.strip())}</code></pre>"
        if out_lines and len(out_lines) <= MAX_OUTPUT_LINES and max(map(len, out_lines)) <= 100:
            body += f"\n<pre class='output'>{html.escape(printed)}</pre>"
        slides.append(_slide(inline(section), body, "code"))
    notebook = f"chapters/{title}.ipynb"
    slides.append(_slide("In the notebook", f"<p>The exercises, the full code ({long_code} longer cells) and the "
                                            f"live widgets are in <code>{html.escape(notebook)}</code>.</p>"))
    return slides


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="_assets/reveal/reveal.css">
<link rel="stylesheet" href="_assets/reveal/theme/white.css">
<style>
.reveal h1, .reveal h2, .reveal h3 {{ text-transform: none; }}
.reveal .slides section {{ text-align: left; font-size: 0.62em; }}
.reveal .slides section.title {{ text-align: center; }}
.reveal .slides section.title h1 {{ font-size: 2.2em; }}
.reveal .slides section.title p.question {{ font-size: 1.1em; text-align: left; }}
.reveal h2 {{ font-size: 1.55em; margin-bottom: 0.5em; }}
.reveal ul {{ display: block; }} .reveal li {{ margin: 0.35em 0; }}
.reveal pre {{ font-size: 0.72em; width: 100%; box-shadow: none; margin: 0.3em 0; }}
.reveal pre code {{ max-height: none; overflow: visible; white-space: pre; padding: 0.5em; }}
.reveal pre.output {{ background: #f4f4f4; padding: 0.4em 0.5em; font-size: 0.66em; white-space: pre; }}
.reveal section.figure img {{ display: block; margin: 0 auto; max-height: 500px; max-width: 100%; }}
.reveal p.caption {{ font-size: 0.7em; color: #444; margin-top: 0.3em; }}
</style>
<script>window.MathJax={{tex:{{inlineMath:[['\\\\(','\\\\)']],displayMath:[['\\\\[','\\\\]']]}}}};</script>
<script src="_assets/mathjax/tex-chtml-full.js"></script>
</head><body><div class="reveal"><div class="slides">
{sections}
</div></div>
<script src="_assets/reveal/reveal.js"></script>
<script>Reveal.initialize({{hash:true, center:false, width:{width}, height:{height}, margin:0.04, slideNumber:true}});</script>
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
        sections = "\n".join(notebook_to_slides(nb, path.stem))
        deck = out / f"{path.stem}.html"
        deck.write_text(_PAGE.format(title=html.escape(path.stem), sections=sections, width=WIDTH, height=HEIGHT))
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
