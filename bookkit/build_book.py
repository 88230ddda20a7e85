"""Build the static HTML book into book/_build/html (what `make book` runs).

    python -m bookkit.build_book              # prepare, then jupyter-book build -W -n --keep-going
    python -m bookkit.build_book --prepare    # only steps 1-3 (for debugging the Sphinx input)

1. MathJax 3 from the npm registry (pinned) into book/_assets/node_modules, the parts a page
   needs copied to book/_assets/vendor/mathjax; Sphinx serves it as _static/mathjax. Nothing is
   loaded from a CDN. (Not a folder named _static: Jupyter Book 1 would add every .js in it to
   every page.)
2. The executed chapters, chapters/NN-slug.ipynb, copied to book/chapters/ (gitignored), with
   book-only edits: widget state dropped (the book shows each widget's static HTML control, no
   widget manager), solution cells collapsed behind "Show solution", links to sibling chapters'
   .md sources pointed at the notebooks, progress bars' carriage returns collapsed, the saved
   output of an exercise's check cell labelled as the reference solution's, and "Further reading"
   entries that are in book/references.bib linked to the References page. Only the
   .ipynb is copied, so no chapter is built twice, and nothing is executed: the outputs are the
   committed, nbval-tested ones. A cell with an unexpected error output fails the build.
3. book/_toc.yml from book/parts.yml: every listed chapter whose .md and .ipynb exist, every
   listed page.
4. jupyter-book build book -W -n --keep-going: a warning (a broken reference or citation, a
   missing figure, a malformed directive) fails the build.
5. Page weight: every image the pages carry inline (figures with a description, each frame of a
   static widget) is written once to _static/frames/<hash>.png and loaded from there, lazily, so
   a chapter page's HTML stays small and a widget's hidden frames load when first shown.

``ensure_built()`` (used by the tests) rebuilds only when an input changed since the last
successful build.
"""
from __future__ import annotations

import copy
import fnmatch
import html
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .conventions import (BOOK, CHAPTER_SLUG, CLAIM, REMOVE_CELL, CHAPTER_STEM, CHAPTERS as CHAPTERS_SRC, EXERCISE, HIDE_INPUT,
                          RAISES_EXCEPTION, ROOT, SOLUTION, is_check_cell, tags_of)
from .explainer.build import write_explainer

CHAPTERS_DST = BOOK / "chapters"
HTML = BOOK / "_build" / "html"
STAMP = HTML / ".build-inputs"
MATHJAX_VERSION = "3.2.2"
NPM_DIR = BOOK / "_assets"
MATHJAX_DST = BOOK / "_assets" / "vendor" / "mathjax"
# the parts of mathjax/es5 a page can load: the combined TeX->CHTML file, the extensions it
# autoloads, fonts, menu, accessibility and the speech engine the menu can switch on
MATHJAX_PARTS = ["tex-chtml.js", "input", "output", "ui", "a11y", "sre", "adaptors"]
# a Markdown link to a chapter source or notebook, from a chapter ([t](NN-slug.md#anchor)) or from a
# book page ([t](chapters/NN-slug.ipynb#anchor))
LINK_RE = re.compile(rf"\[([^\]]*)\]\((?:\./)?(?:(?:\.\./)?chapters/)?({CHAPTER_SLUG})\.(?:md|ipynb)(#[^)\s]*)?\)")


class BuildError(RuntimeError):
    """The book cannot be built: a broken chapter, or Sphinx reported an error or a warning."""


def _load_yaml(path: Path):
    import yaml
    return yaml.safe_load(path.read_text(encoding="utf8"))


def _write_if_changed(path: Path, text: str) -> None:
    """Keep mtimes (and so Sphinx's incremental rebuilds) stable when nothing changed."""
    if not path.exists() or path.read_text(encoding="utf8") != text:
        path.write_text(text, encoding="utf8")


# -- 1. MathJax -------------------------------------------------------------------------------
def ensure_mathjax() -> Path:
    stamp = MATHJAX_DST / ".version"
    if stamp.exists() and stamp.read_text().strip() == MATHJAX_VERSION:
        return MATHJAX_DST
    src = NPM_DIR / "node_modules" / "mathjax"
    installed = json.loads((src / "package.json").read_text())["version"] if (src / "package.json").exists() else None
    if installed != MATHJAX_VERSION:
        npm = shutil.which("npm")
        if npm is None:
            raise BuildError("npm is needed once, to install MathJax (Debian: apt-get install npm)")
        print(f"installing mathjax@{MATHJAX_VERSION} from npm into {NPM_DIR.relative_to(ROOT)}/node_modules", flush=True)
        subprocess.run([npm, "install", "--prefix", str(NPM_DIR), "--no-save", "--no-package-lock",
                        "--no-audit", "--no-fund", f"mathjax@{MATHJAX_VERSION}"], check=True)
    if MATHJAX_DST.exists():
        shutil.rmtree(MATHJAX_DST)
    MATHJAX_DST.mkdir(parents=True)
    for part in MATHJAX_PARTS:
        p = src / "es5" / part
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, MATHJAX_DST / part)
    (MATHJAX_DST / "LICENSE").write_text((src / "LICENSE").read_text())
    stamp.write_text(MATHJAX_VERSION + "\n")
    return MATHJAX_DST


# -- 2. chapters ------------------------------------------------------------------------------
def planned_chapters(parts: dict | None = None) -> list[str]:
    """Every chapter stem listed in parts.yml, in order."""
    parts = parts or _load_yaml(BOOK / "parts.yml")
    return [f.split("/", 1)[1] for p in parts["parts"] for f in p["files"] if f.startswith("chapters/")]


def existing_chapters(parts: dict | None = None) -> list[str]:
    """The planned chapters whose .md source and executed .ipynb both exist, in book order.

    A source without its notebook is a chapter still being written: it stays out (with a warning
    from prepare()); `make book` fails on it anyway, in its check-sync step."""
    return [s for s in planned_chapters(parts)
            if (CHAPTERS_SRC / f"{s}.md").exists() and (CHAPTERS_SRC / f"{s}.ipynb").exists()]


def unexecuted_chapters(parts: dict | None = None) -> list[str]:
    """Planned chapters with a .md source but no executed .ipynb yet."""
    return [s for s in planned_chapters(parts)
            if (CHAPTERS_SRC / f"{s}.md").exists() and not (CHAPTERS_SRC / f"{s}.ipynb").exists()]


def unplanned_chapters(parts: dict | None = None) -> list[str]:
    """Chapter sources in chapters/ that parts.yml does not list (the tests fail on these)."""
    planned = set(planned_chapters(parts))
    return sorted(p.stem for p in CHAPTERS_SRC.glob("*.md") if CHAPTER_STEM.match(p.stem) and p.stem not in planned)


def collapse_carriage_returns(text) -> str:
    """What a terminal shows of a stream: each line's text after its last carriage return.

    A progress bar (tqdm) rewrites its line with '\\r'; the notebook stores every state."""
    text = "".join(text) if isinstance(text, list) else text
    lines = []
    for line in text.split("\n"):
        parts = [p for p in line.split("\r") if p]
        lines.append(parts[-1] if parts else "")
    return "\n".join(lines)


def relink(text: str, existing: set[str], planned: set[str], folder: str = "") -> str:
    """Point links to chapter sources at the book's notebooks (``folder`` + ``NN-slug.ipynb``).

    A link to a chapter that parts.yml lists but that has not landed yet becomes plain text until
    it does; a link to an unknown chapter is left for Sphinx to report."""
    def one(m: re.Match) -> str:
        label, stem, anchor = m.group(1), m.group(2), m.group(3) or ""
        if stem in existing:
            return f"[{label}]({folder}{stem}.ipynb{anchor})"
        return label if stem in planned else m.group(0)
    return LINK_RE.sub(one, text)


def described_image(output: dict) -> None:
    """Give a PNG output that carries a description (``transformer_lib.plotting.show`` stores it in
    the output metadata as ``{"image/png": {"alt": ...}}``) an HTML twin ``<img alt=...>``:
    myst-nb takes an image's alt only from cell-level options, one per cell, while a cell may draw
    several figures, each with its own description. The HTML builder prefers text/html."""
    data = output.get("data", {})
    alt = output.get("metadata", {}).get("image/png", {}).get("alt")
    if "image/png" in data and alt and "text/html" not in data:
        png = "".join(data["image/png"]) if isinstance(data["image/png"], list) else data["image/png"]
        data["text/html"] = (f'<img class="tlib-figure" src="data:image/png;base64,{png.strip()}" '
                             f'alt="{html.escape(alt, quote=True)}"/>')


# what the book prints above a check cell's saved output: the book ran the reference solution
REFERENCE_OUTPUT_NOTE = ("What the check prints once the exercise is solved (this page ran the "
                         "reference solution; the stub as it stands gets NOT YET):")
_AUTHOR_YEAR = re.compile(r"(?P<name>[A-Z][\w'-]+)(?: et al\.|(?:(?:,| and| &) (?:[A-Z]\. )*[A-Z][\w'-]+)*)"
                          r" (?P<year>\((?P<y>\d{4})\))")


def bib_keys(bib: Path | None = None) -> dict[tuple[str, ...], str]:
    """{(first author's surname, year): key} of book/references.bib (the first entry per pair),
    plus {(surname, year, second author's surname or "solo")} for one- and two-author works, so
    that "Kudo (2018)" and "Kudo and Richardson (2018)" find different entries."""
    text = (bib or BOOK / "references.bib").read_text(encoding="utf8")
    keys: dict[tuple[str, ...], str] = {}

    def surname(person: str) -> str:
        last = person.split(",")[0] if "," in person else person.split()[-1]
        return re.sub(r"[{}\\\"'`^~]", "", last).split()[-1].lower()

    for m in re.finditer(r"@\w+\{([\w:-]+),(.*?)\n\}", text, re.S):
        author = re.search(r"\bauthor\s*=\s*\{(.*)\},?\s*$", m.group(2), re.M)
        year = re.search(r"\byear\s*=\s*\{?(\d{4})", m.group(2))
        if author and year:
            people = [a.strip() for a in author.group(1).split(" and ")]
            first, y = surname(people[0]), year.group(1)
            keys.setdefault((first, y), m.group(1))
            if len(people) <= 2:
                keys.setdefault((first, y, surname(people[1]) if len(people) == 2 else "solo"), m.group(1))
        title = re.search(r"\btitle\s*=\s*\{(.*)\},?\s*$", m.group(2), re.M)
        if title:
            keys.setdefault(("title", _plain_title(title.group(1))), m.group(1))
    return keys


def _plain_title(title: str) -> str:
    """A title reduced to lower-case words, for matching a chapter's italics with a BibTeX title."""
    return " ".join(re.sub(r"\$[^$]*\$|[^\w\s]", " ", re.sub(r"[{}]", "", title)).lower().split())


# "- A. Vaswani et al., *Attention Is All You Need*, NeurIPS 2017": initials, surnames, the title in
# italics, the year somewhere after it (not inside an arXiv number such as 1910.07467)
_INITIALS = r"(?:[A-Z][a-z]?\.(?:-[A-Z]\.)?\s)+"
_INITIALS_ITEM = re.compile(rf"^(?P<lead>\s*[-*]\s){_INITIALS}(?P<name>[A-Z][\w'-]+)"
                            rf"(?P<more>\set al\.|(?:,\s{_INITIALS}[A-Z][\w'-]+)*),\s\*[^*]+\*")
_YEAR = re.compile(r"(?<![\d.])(?:19|20)\d{2}(?![\d.]?\d)")


def _entry_key(keys: dict, name: str, year: str, others: list[str], et_al: bool) -> str | None:
    """The bibliography key of a work by ``name`` (+ ``others``' surnames) in ``year``."""
    if not et_al and len(others) <= 1:
        exact = keys.get((name.lower(), year, others[0].lower() if others else "solo"))
        if exact:
            return exact
    return keys.get((name.lower(), year))


def _link_initials_item(item: str, keys: dict) -> str:
    m = _INITIALS_ITEM.match(item)
    if not m:
        return item
    others = re.findall(r"[A-Z][\w'-]+(?=,|$)", re.sub(_INITIALS, "", m.group("more")))
    year = _YEAR.search(item, m.end())
    if not year:
        return item
    title = _plain_title(item[item.index("*", m.start("more")) + 1:m.end() - 1])
    # the title first: one first author can have two works in one year (Liu et al. 2020); then
    # author and year, since the title the chapter gives may be shortened
    key = (keys.get(("title", title))
           or _entry_key(keys, m.group("name"), year.group(0), others, "et al." in m.group("more")))
    if not key:
        return item
    return item[:year.start()] + f"{{cite:year}}`{key}`" + item[year.end():]


def link_further_reading(source: str, keys: dict[tuple[str, ...], str], in_section: bool) -> tuple[str, bool]:
    """In a chapter's "Further reading" section, "Vaswani et al. (2017)" becomes
    "Vaswani et al. ({cite:yearpar}`vaswani2017attention`)" and, in an entry written
    "A. Vaswani et al., *Attention Is All You Need*, 2017", the year becomes {cite:year}`...`: the
    year links to the entry on the References page, the text stays the chapter's. Only works in
    references.bib are linked. Returns the new source and whether the section continues into the
    next cell."""
    items: list[list[str]] = []  # a bullet and its indented continuation lines stay together
    for line in source.split("\n"):
        if items and in_section and line.startswith(" ") and line.strip() and items[-1][0] == "item":
            items[-1].append(line)
            continue
        if re.match(r"#{1,2} ", line):
            in_section = line.strip().lower().lstrip("#").strip() == "further reading"
            items.append(["plain", line])
        elif in_section and not line.lstrip().startswith(("```", ":")):
            items.append(["item", line])
        else:
            items.append(["plain", line])

    def one(m: re.Match) -> str:
        others = re.findall(r"(?:,| and| &) (?:[A-Z]\. )*([A-Z][\w'-]+)", m.group(0)[:m.start("year") - m.start(0)])
        # "DeepSeek-AI (2024), *DeepSeek-V3 ...*": a title in italics right after names the work,
        # when one author has two works in one year
        title = re.match(r"\s*,?\s*\*([^*]+)\*", m.string[m.end():])
        key = ((title and keys.get(("title", _plain_title(title.group(1)))))
               or _entry_key(keys, m.group("name"), m.group("y"), others, " et al." in m.group(0)))
        if key is None:
            return m.group(0)
        return m.group(0)[:m.start("year") - m.start(0)] + f"{{cite:yearpar}}`{key}`"

    out = []
    for kind, *lines in items:
        text = "\n".join(lines)
        if kind == "item":
            text = _link_initials_item(_AUTHOR_YEAR.sub(one, text), keys)
        out.append(text)
    return "\n".join(out), in_section


def label_reference_output(cell: dict) -> None:
    """Put a note before the saved output of an exercise's check cell: that output is what the
    reference solution printed ("PASS ..."), not what the reader's stub will print."""
    if not is_check_cell(cell) or not cell.get("outputs"):
        return
    note = {"output_type": "display_data", "metadata": {},
            "data": {"text/html": f"<p class='tlib-reference-output'><em>{html.escape(REFERENCE_OUTPUT_NOTE)}</em></p>",
                     "text/plain": REFERENCE_OUTPUT_NOTE}}
    cell["outputs"].insert(0, note)


def book_notebook(nb: dict, existing: set[str], planned: set[str],
                  keys: dict[tuple[str, str], str] | None = None) -> dict:
    """The book's copy of an executed chapter notebook (see the module docstring)."""
    nb = copy.deepcopy(nb)
    nb.get("metadata", {}).pop("widgets", None)
    keys = bib_keys() if keys is None else keys
    further = False
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            source, further = link_further_reading(relink(source, existing, planned), keys, further)
            cell["source"] = source
        elif cell["cell_type"] == "code":
            if EXERCISE not in tags_of(cell) and SOLUTION not in tags_of(cell):
                label_reference_output(cell)
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream":
                    out["text"] = collapse_carriage_returns(out["text"])
                described_image(out)
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if CLAIM in tags and REMOVE_CELL not in tags:
                tags.append(REMOVE_CELL)      # a claim check guards the prose; the reader sees the prose
            if SOLUTION in tags:
                if HIDE_INPUT not in tags:
                    tags.append(HIDE_INPUT)
                cell["metadata"].setdefault("mystnb", {}).update(
                    code_prompt_show="Show solution", code_prompt_hide="Hide solution")
    return nb


def error_cells(nb: dict) -> list[int]:
    """Indices of code cells with an error output that is not expected (`raises-exception`)."""
    return [n for n, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and any(o.get("output_type") == "error" for o in c.get("outputs", []))
            and RAISES_EXCEPTION not in tags_of(c)]


def prepare_chapters(parts: dict | None = None) -> list[str]:
    parts = parts or _load_yaml(BOOK / "parts.yml")
    stems = existing_chapters(parts)
    CHAPTERS_DST.mkdir(exist_ok=True)
    wanted = {f"{s}.ipynb" for s in stems}
    # chapter assets (e.g. chapters/figures/): everything that is not a source, notebook or cache
    skip = {".ipynb_checkpoints", "__pycache__", ".jupyter_cache"}
    for item in CHAPTERS_SRC.iterdir():
        if item.name in skip or item.suffix in {".md", ".ipynb", ".py", ".pyc"} or item.name.startswith("."):
            continue
        wanted.add(item.name)
        target = CHAPTERS_DST / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        elif not target.exists() or target.read_bytes() != item.read_bytes():
            shutil.copy2(item, target)
    for stale in CHAPTERS_DST.iterdir():
        if stale.name not in wanted:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    existing, planned = set(stems), set(planned_chapters(parts))
    keys = bib_keys()
    for s in stems:
        nb = json.loads((CHAPTERS_SRC / f"{s}.ipynb").read_text(encoding="utf8"))
        broken = error_cells(nb)
        if broken:
            raise BuildError(f"chapters/{s}.ipynb: cells {broken} raised an error (tag a cell "
                             "`raises-exception` if the error is the point); fix and `make chapters`")
        out = book_notebook(nb, existing, planned, keys)
        _write_if_changed(CHAPTERS_DST / f"{s}.ipynb", json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return stems


# -- 3. table of contents ---------------------------------------------------------------------
def make_toc(parts: dict | None = None) -> dict:
    """The sphinx-external-toc structure (jb-book format) for the chapters that exist now."""
    parts = parts or _load_yaml(BOOK / "parts.yml")
    existing = set(existing_chapters(parts))
    toc = {"format": "jb-book", "root": parts["root"], "parts": []}
    for part in parts["parts"]:
        files = []
        for f in part["files"]:
            if f.startswith("chapters/"):
                if f.split("/", 1)[1] in existing:
                    files.append(f)
            elif not any((BOOK / f"{f}{ext}").exists() for ext in (".md", ".ipynb")):
                raise FileNotFoundError(f"parts.yml lists the page {f!r}, but book/{f}.md does not exist")
            else:
                files.append(f)
        if files:
            toc["parts"].append({"caption": part["caption"], "chapters": [{"file": f} for f in files]})
    return toc


def write_toc(parts: dict | None = None) -> dict:
    import yaml
    toc = make_toc(parts)
    header = "# GENERATED by bookkit/build_book.py from book/parts.yml: edit parts.yml, not this file.\n"
    _write_if_changed(BOOK / "_toc.yml", header + yaml.safe_dump(toc, sort_keys=False))
    return toc


def prepare() -> list[str]:
    ensure_mathjax()
    parts = _load_yaml(BOOK / "parts.yml")
    unplanned = unplanned_chapters(parts)
    if unplanned:
        print(f"build_book: warning: {unplanned} are not in book/parts.yml and stay out of the book",
              flush=True)
    unexecuted = unexecuted_chapters(parts)
    if unexecuted:
        print(f"build_book: warning: {unexecuted} have no executed .ipynb yet and stay out of the book "
              "(run `make chapters`)", flush=True)
    stems = prepare_chapters(parts)
    write_toc(parts)
    return stems


# -- 4. build ---------------------------------------------------------------------------------
# The licences travel with every copy of the book: the site's root, the PDF (the page `licences`
# includes them) and `make dist`'s bundle (bookkit/dist.py).
LICENCE_FILES = ("LICENSE", "LICENSE-CONTENT.md", "THIRD-PARTY-NOTICES.md")


def has_notice(static_path: str, notices: str | None = None) -> bool:
    """True when a file of the built site's ``_static/`` (``static_path``, relative to it) is named
    in THIRD-PARTY-NOTICES.md, by its path, its name, a pattern (``mystnb.*.css``) or its folder
    (``vendor/fontawesome/``). tests/bookkit/test_book.py asks it of every file the build wrote."""
    notices = notices if notices is not None else (ROOT / "THIRD-PARTY-NOTICES.md").read_text()
    for token in re.findall(r"`([^`\s]+)`", notices):
        token = token.removeprefix("_static/")
        if token.endswith("/") and static_path.startswith(token):
            return True
        if fnmatch.fnmatch(static_path, token) or fnmatch.fnmatch(Path(static_path).name, token):
            return True
    return False


def copy_licences(out_dir: Path) -> None:
    for name in LICENCE_FILES:
        shutil.copyfile(ROOT / name, Path(out_dir) / (name + ".txt" if name == "LICENSE" else name))


def inputs_digest() -> str:
    """What the build depends on: the chapters' notebooks, every source file under book/ and this
    package (the build's own code)."""
    h = hashlib.sha1()
    generated = {CHAPTERS_DST, BOOK / "_build", BOOK / "_assets" / "node_modules", BOOK / "_assets" / "vendor"}
    files = sorted(CHAPTERS_SRC.glob("*.ipynb")) + sorted(CHAPTERS_SRC.glob("*.md")) \
        + sorted(Path(__file__).parent.glob("*.py")) \
        + sorted(p for p in (Path(__file__).parent / "explainer").glob("*.*") if p.is_file()) \
        + [ROOT / name for name in LICENCE_FILES]
    for p in sorted(BOOK.rglob("*")):
        if p.is_file() and not any(g == p or g in p.parents for g in generated) and p.name != "_toc.yml" \
                and "__pycache__" not in p.parts:
            files.append(p)
    for p in files:
        st = p.stat()
        h.update(f"{p.relative_to(ROOT)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def run_jupyter_book(builder: str = "html") -> None:
    """``jupyter-book build book --builder <builder> -W -n --keep-going`` on the prepared sources."""
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(BOOK), "--builder", builder,
           "-W", "-n", "--keep-going"]
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode != 0:
        raise BuildError(f"jupyter-book build --builder {builder} failed (exit {result.returncode}); "
                         "see the warnings above")


FRAMES = "_static/frames"
# attributes may hold a quoted '>' (an alt text saying "m > 1"): quoted values are skipped whole
_INLINE_PNG = re.compile(r"""<img\b((?:[^>"']|"[^"]*"|'[^']*')*?)\bsrc=(["'])data:image/png;base64,([A-Za-z0-9+/=\s]+)\2""")


def externalize_images(html_dir: Path = HTML, min_bytes: int = 2048) -> int:
    """Move every inline PNG (``<img src="data:image/png;base64,...">``) of the built pages into
    ``_static/frames/<sha1>.png``, loaded lazily: a browser fetches a hidden widget frame only when
    a control shows it. Returns the bytes taken out of the pages. Idempotent."""
    import base64
    frames = html_dir / FRAMES
    frames.mkdir(parents=True, exist_ok=True)
    saved = 0
    for page in html_dir.rglob("*.html"):
        text = page.read_text(encoding="utf8")
        if "data:image/png;base64," not in text:
            continue
        up = "../" * (len(page.relative_to(html_dir).parts) - 1)

        def one(m: re.Match) -> str:
            data = re.sub(r"\s", "", m.group(3))
            if len(data) < min_bytes:
                return m.group(0)
            png = base64.b64decode(data)
            name = hashlib.sha1(png).hexdigest()[:20] + ".png"
            target = frames / name
            if not target.exists():
                target.write_bytes(png)
            attrs = m.group(1) if "loading=" in m.group(1) else m.group(1) + 'loading="lazy" '
            return f'<img{attrs}src="{up}{FRAMES}/{name}"'
        new = _INLINE_PNG.sub(one, text)
        saved += len(text.encode()) - len(new.encode())
        page.write_text(new, encoding="utf8")
    return saved


def build() -> None:
    start = time.perf_counter()
    digest = inputs_digest()
    stems = prepare()
    print(f"building the book: {len(stems)} chapters ({', '.join(stems)})", flush=True)
    STAMP.unlink(missing_ok=True)
    try:
        run_jupyter_book("html")
    except BuildError:
        # An incremental build can fail on what an earlier build left: Sphinx's saved environment
        # (book/_build/.doctrees, shared with the one-page build of the PDF) says a page is up to
        # date while the HTML folder lacks its search index ("search index couldn't be loaded").
        # Build once more from nothing; a real problem in the sources fails again.
        print("incremental build failed: building the HTML from a clean folder", flush=True)
        shutil.rmtree(HTML, ignore_errors=True)
        shutil.rmtree(BOOK / "_build" / ".doctrees", ignore_errors=True)
        run_jupyter_book("html")
    externalize_images(HTML)
    write_explainer(HTML)  # explainer.html: the chapter-16 GPT live in the page (bookkit/explainer/)
    copy_licences(HTML)  # LICENSE, LICENSE-CONTENT.md, THIRD-PARTY-NOTICES.md beside index.html
    (HTML / ".nojekyll").touch()  # GitHub Pages: serve the _static/, _images/ folders as they are
    STAMP.write_text(digest + "\n")
    print(f"book built in {time.perf_counter() - start:.1f} s: {HTML.relative_to(ROOT)}/index.html", flush=True)


def is_stale() -> bool:
    return not STAMP.exists() or STAMP.read_text().strip() != inputs_digest()


def ensure_built() -> Path:
    """Build the book if it is missing or older than its inputs; return the HTML folder."""
    if is_stale():
        build()
    return HTML


if __name__ == "__main__":
    if sys.argv[1:] not in ([], ["--prepare"]):
        sys.exit(__doc__)
    try:
        print(prepare()) if sys.argv[1:] else build()
    except BuildError as e:
        sys.exit(f"build_book: {e}")
