"""Chapter pipeline: execute MyST chapters into their paired, executed notebooks.

    python -m bookkit.notebooks execute chapters/*.md     # .md -> executed .ipynb
    python -m bookkit.notebooks check-sync chapters/*.md  # .ipynb cells == .md cells?
    python -m bookkit.notebooks format chapters/*.md      # code cells to the book's width, .md and .ipynb
    python -m bookkit.notebooks fold-solutions chapters/*.ipynb  # solutions folded in JupyterLab, nothing run

Each chapter's source of truth is ``chapters/NN-slug.md`` (MyST Markdown, paired by jupytext
with ``ipynb,md:myst``). ``execute`` reads it, runs it in the chapters folder (the execution setup
of ``bookkit.conventions``), strips
volatile metadata (execution timestamps; widget model ids are renumbered deterministically) and
writes ``NN-slug.ipynb``, the baseline that nbval re-runs. Re-running an unchanged chapter leaves
git clean.

Solutions open folded: every cell tagged ``solution`` gets JupyterLab's
``"jupyter": {"source_hidden": true}`` (and ``outputs_hidden`` when it has outputs), so a learner
in `make lab` sees the exercise, its check and a collapsed bar, and reads the solution only after
clicking the bar. ``execute`` sets it; ``fold-solutions`` sets it on existing notebooks without
executing them (only that metadata changes). The web book hides the same cells behind its own
"Show solution" toggle (``hide-input``), and ``make student`` leaves them out.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

from .conventions import JUPYTEXT_FORMATS, KERNELSPEC, ROOT, SOLUTION, execute_notebook, is_chapter, tags_of

__all__ = ["execute_chapter", "cells_in_sync", "strip_volatile", "read_md", "format_code", "format_chapter",
           "fold_solutions", "fold_solutions_in_file", "CODE_WIDTH"]

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def read_md(path: str | Path):
    import jupytext
    return jupytext.read(str(path), fmt="md:myst")


def _cell_key(cell) -> tuple:
    return (cell["cell_type"], cell["source"].strip(), tuple(tags_of(cell)))


def cells_in_sync(md_path: str | Path, ipynb_path: str | Path | None = None) -> list[str]:
    """Return a list of differences between the .md chapter and its .ipynb (empty = in sync)."""
    import nbformat
    md_path = Path(md_path)
    ipynb_path = Path(ipynb_path) if ipynb_path else md_path.with_suffix(".ipynb")
    if not ipynb_path.exists():
        return [f"{ipynb_path} is missing: run `make chapters`"]
    a = [_cell_key(c) for c in read_md(md_path).cells]
    b = [_cell_key(c) for c in nbformat.read(str(ipynb_path), as_version=4).cells]
    problems = []
    if len(a) != len(b):
        problems.append(f"{md_path.name}: {len(a)} cells in .md vs {len(b)} in .ipynb")
    for n, (x, y) in enumerate(zip(a, b)):
        if x != y:
            problems.append(f"{md_path.name}: cell {n} differs ({x[0]}: {x[1][:60]!r} vs {y[1][:60]!r})")
            break
    return problems


def _coalesce_streams(outputs: list) -> list:
    """Merge consecutive stream outputs of the same name (stdout/stderr).

    The kernel flushes printed text on a timer, so where one cell's text is split into stream
    outputs depends on the machine's load; merging makes the saved notebook deterministic (nbval
    merges them the same way before comparing).
    """
    merged: list = []
    for out in outputs:
        if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            text = [merged[-1]["text"], out["text"]]
            merged[-1]["text"] = "".join("".join(t) if isinstance(t, list) else t for t in text)
        else:
            merged.append(out)
    return merged


def strip_volatile(nb, name: str):
    """Remove timestamps and make widget model ids deterministic; return nb.

    Execution counts stay: they are deterministic, and nbval treats a cell without one as unrun.
    """
    for n, cell in enumerate(nb.cells):
        cell.get("metadata", {}).pop("execution", None)
        if cell.get("outputs"):
            cell["outputs"] = _coalesce_streams(cell["outputs"])
        cell["id"] = hashlib.sha1(f"{n}:{cell['source']}".encode()).hexdigest()[:8]  # not random
    nb.metadata.pop("papermill", None)
    nb.metadata["kernelspec"] = KERNELSPEC
    widgets = nb.metadata.get("widgets", {}).get(WIDGET_STATE)
    if widgets:
        old_ids = list(widgets.get("state", {}))
        text = json.dumps(nb, sort_keys=True)
        for n, old in enumerate(old_ids):
            new = hashlib.sha1(f"{name}:{n}".encode()).hexdigest()[:32]
            text = text.replace(old, new)
        import nbformat
        nb = nbformat.from_dict(json.loads(text))
    return nb


def fold_solutions(nb) -> int:
    """Fold every ``solution`` cell in JupyterLab (source hidden; outputs too when it has any);
    return how many cells changed."""
    changed = 0
    for cell in nb["cells"]:
        if SOLUTION not in tags_of(cell):
            continue
        want = {"source_hidden": True}
        if cell.get("outputs"):
            want["outputs_hidden"] = True
        folded = cell.setdefault("metadata", {}).setdefault("jupyter", {})
        if any(folded.get(k) is not v for k, v in want.items()):
            folded.update(want)
            changed += 1
    return changed


def fold_solutions_in_file(ipynb_path: str | Path) -> int:
    """``fold_solutions`` on a saved notebook, rewritten only when a cell changed; nothing runs."""
    import nbformat
    nb = nbformat.read(str(ipynb_path), as_version=4)
    changed = fold_solutions(nb)
    if changed:
        nbformat.write(nb, str(ipynb_path))
    return changed


SANITIZE_CFG = ROOT / "tests" / "nbval_sanitize.cfg"


def _sanitizers() -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of the nbval sanitize file: timings and addresses."""
    import configparser
    if not SANITIZE_CFG.exists():
        return []
    cfg = configparser.ConfigParser()
    cfg.read(SANITIZE_CFG)
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def _comparable(nb) -> str:
    """The notebook as text with timings/addresses masked and images dropped."""
    import copy
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            out.get("data", {}).pop("image/png", None)
    text = json.dumps(nb, sort_keys=True)
    for pattern, replacement in _sanitizers():
        text = pattern.sub(replacement, text)
    return text


def equivalent_to_saved(nb, ipynb_path: Path) -> bool:
    """True when ``nb`` differs from the saved notebook only in measured timings (which vary from
    run to run; nbval masks them too) and in images (plots of those timings). Then the saved file
    is kept, so re-running an unchanged chapter leaves git clean."""
    import nbformat
    if not ipynb_path.exists():
        return False
    return _comparable(nbformat.read(str(ipynb_path), as_version=4)) == _comparable(nb)


def execute_chapter(md_path: str | Path, timeout: int = 900) -> float:
    """Execute one chapter .md into its .ipynb; return the wall time in seconds."""
    import nbformat

    md_path = Path(md_path).resolve()
    nb = read_md(md_path)
    nb.metadata["kernelspec"] = KERNELSPEC
    elapsed = execute_notebook(nb, md_path.parent, timeout=timeout)
    nb = strip_volatile(nb, md_path.stem)
    fold_solutions(nb)
    # jupytext's own metadata (text_representation) is volatile across versions: keep only formats
    nb.metadata["jupytext"] = {"formats": JUPYTEXT_FORMATS}
    out = md_path.with_suffix(".ipynb")
    if not equivalent_to_saved(nb, out):
        nbformat.write(nb, str(out))
    return elapsed


# -- format: code cells to the width of the book's column ------------------------------------
# 88 characters of code fit the chapter column at 1280 px in Chromium (91 measured, with
# book/_assets/css/book.css: 13 px code, a 13rem contents sidebar) and an A4 page in the PDF;
# tests/bookkit/test_book.py measures it again in the built book.
CODE_WIDTH = 88
_FENCE = re.compile(r"^(`{3,})\{code-cell\}[^\n]*\n", re.M)


def _wrap_comments(source: str, width: int) -> str:
    """Comments that black leaves too long: a comment line is re-wrapped, a trailing comment moves
    onto its own line(s) above its code line, at that line's indent. Code is never touched."""
    import io
    import textwrap
    import tokenize
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source + "\n").readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return source  # IPython magics and the like: leave as black left it
    comments = {t.start[0]: t for t in tokens if t.type == tokenize.COMMENT}
    out = []
    for n, line in enumerate(source.split("\n"), start=1):
        tok = comments.get(n)
        if tok is None or len(line) <= width:
            out.append(line)
            continue
        code = line[:tok.start[1]].rstrip()
        indent = re.match(r"\s*", line).group(0)
        text = tok.string.lstrip("#").strip()
        wrapped = textwrap.wrap(text, width=width - len(indent) - 2, break_long_words=False,
                                break_on_hyphens=False) or [""]
        out += [f"{indent}# {w}" for w in wrapped]
        if code:
            out.append(code)
    result = "\n".join(out)
    try:
        compile(result, "<cell>", "exec")
    except SyntaxError:
        return source
    return result


def format_code(source: str, width: int = CODE_WIDTH) -> str:
    """One code cell formatted by black at ``width`` (IPython magics kept), then its comments wrapped.

    A cell black cannot parse (a deliberate syntax error in a `raises-exception` cell) is returned
    unchanged. Idempotent: formatting the result again changes nothing."""
    import black
    mode = black.Mode(line_length=width, preview=True, unstable=True)
    try:
        new = black.format_cell(source, fast=False, mode=mode)
    except black.NothingChanged:
        new = source
    except Exception:  # black.InvalidInput, or a magic black does not know
        return source
    return _wrap_comments(new, width)


def _replace_md_code(text: str, old: list[str], new: list[str]) -> str:
    """The MyST text with the i-th code cell's source ``old[i]`` replaced by ``new[i]``, in place:
    the fences, cell options and every Markdown cell stay byte for byte."""
    out, pos = [], 0
    for a, b in zip(old, new):
        m = _FENCE.search(text, pos)
        if m is None:
            raise ValueError("the .md has fewer code-cell fences than jupytext reads cells")
        at = text.index(a, m.end()) if a else m.end()
        out.append(text[pos:at] + b)
        pos = at + len(a)
    return "".join(out) + text[pos:]


def format_chapter(md_path: str | Path, width: int = CODE_WIDTH) -> tuple[int, list[str]]:
    """Format every code cell of ``NN-slug.md`` and of its paired ``NN-slug.ipynb`` in place.

    Nothing is executed: outputs, execution counts and metadata stay as they are (black keeps
    the code's meaning: it checks that the syntax tree is unchanged), so the nbval baseline still
    holds. Each cell's id is recomputed as ``execute`` computes it, so re-executing an unchanged
    chapter afterwards leaves git clean. Returns (cells changed, lines still wider than ``width``).
    """
    import nbformat
    md_path = Path(md_path)
    ipynb_path = md_path.with_suffix(".ipynb")
    problems = cells_in_sync(md_path, ipynb_path)
    if problems:
        raise ValueError(f"{md_path}: .md and .ipynb out of sync, run `make chapters` first: {problems[0]}")
    md_nb = read_md(md_path)
    nb = nbformat.read(str(ipynb_path), as_version=4)
    old = [c.source for c in md_nb.cells if c.cell_type == "code"]
    new = [format_code(s, width) for s in old]
    changed = sum(a != b for a, b in zip(old, new))
    if changed:
        text = md_path.read_text(encoding="utf8")
        md_path.write_text(_replace_md_code(text, old, new), encoding="utf8")
        code_cells = iter(new)
        for n, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                src = next(code_cells)
                if src != cell.source.strip() and src != cell.source:
                    cell.source = src
                    cell["id"] = hashlib.sha1(f"{n}:{cell['source']}".encode()).hexdigest()[:8]
        nbformat.write(nb, str(ipynb_path))
        after = cells_in_sync(md_path, ipynb_path)
        if after:
            raise RuntimeError(f"{md_path}: formatting broke the pairing: {after[0]}")
    long_lines = [l for s in new for l in s.split("\n") if len(l) > width]
    return changed, long_lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit.notebooks")
    sub = parser.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("execute", help="execute chapter .md files into their .ipynb")
    ex.add_argument("paths", nargs="+")
    cs = sub.add_parser("check-sync", help="fail if a .ipynb's cells differ from its .md")
    cs.add_argument("paths", nargs="+")
    fm = sub.add_parser("format", help="format the code cells of chapter .md files and their .ipynb in place")
    fm.add_argument("paths", nargs="+")
    fm.add_argument("--width", type=int, default=CODE_WIDTH)
    fs = sub.add_parser("fold-solutions", help="fold the solution cells of executed .ipynb files (nothing is run)")
    fs.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    paths = [p for p in args.paths if is_chapter(p)]
    if args.cmd == "fold-solutions":
        for p in paths:
            if not str(p).endswith(".ipynb"):
                p = str(Path(p).with_suffix(".ipynb"))
            print(f"{p}: {fold_solutions_in_file(p)} solution cells folded", flush=True)
        return 0
    if args.cmd == "format":
        for p in paths:
            changed, long_lines = format_chapter(p, width=args.width)
            print(f"{p}: {changed} code cells reformatted; {len(long_lines)} lines still over {args.width} "
                  "(a string or name that cannot be split)", flush=True)
            for line in long_lines:
                print(f"    {line[:100]}")
        return 0
    if args.cmd == "execute":
        for p in paths:
            print(f"executing {p} ...", flush=True)
            print(f"  {execute_chapter(p):.1f} s", flush=True)
        return 0
    problems = [msg for p in paths for msg in cells_in_sync(p)]
    for msg in problems:
        print(msg)
    if problems:
        print("chapters out of sync: run `make chapters`")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
