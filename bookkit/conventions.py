"""The chapter conventions, written down once for every tool in ``bookkit``.

A chapter is ``chapters/NN-slug.md`` (MyST Markdown, the source of truth) paired by jupytext with
``NN-slug.ipynb`` (the executed baseline nbval re-runs). Cells carry tags from a small vocabulary
(``TAGS``); an exercise's check cell calls ``check("chNN.name", answer)``, and the checker prints
``PASS [name]`` or ``NOT YET [name]``. Every tool that executes a chapter does it the same way:
``execute_notebook`` (kernel ``python3``, ``store_widget_state=True``, ``TLIB_DEVICE=cpu`` unless
the caller's environment says otherwise).

The notebook pipeline, the student copies, the slides, the progress report and the book build
import these names instead of repeating them; ``book/authoring.md`` describes the same rules in
prose for chapter authors.
"""
from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ROOT", "CHAPTERS", "BOOK", "CHAPTER_SLUG", "CHAPTER_STEM", "JUPYTEXT_FORMATS", "is_chapter",
           "chapter_files", "chapter_label", "is_appendix", "chapter_heading", "TAGS", "SOLUTION", "EXERCISE", "HIDE_INPUT", "REMOVE_INPUT", "REMOVE_CELL",
           "NBVAL_IGNORE_OUTPUT", "RAISES_EXCEPTION", "CLAIM", "tags_of", "CHECK_CALL", "VERDICT", "check_names",
           "is_check_cell", "KERNEL_NAME", "KERNELSPEC", "EXECUTION_DEFAULTS", "execute_notebook"]

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
BOOK = ROOT / "book"

# -- chapter files ------------------------------------------------------------------------------
# A numbered chapter is NN-slug (two digits); an appendix is L-slug (one capital letter). Appendices
# stand outside the number sequence, so adding chapter 18 never renumbers one.
CHAPTER_SLUG = r"(?:\d\d|[A-Z])-[a-z0-9-]+"  # NN-slug or L-slug, then lower-case words
CHAPTER_STEM = re.compile(rf"^{CHAPTER_SLUG}$")
JUPYTEXT_FORMATS = "ipynb,md:myst"           # the .md/.ipynb pairing of every chapter


def is_chapter(path: str | Path) -> bool:
    """True for ``NN-slug.md`` / ``L-slug.md`` (and their .ipynb, any folder), False for other files."""
    return bool(CHAPTER_STEM.match(Path(path).stem))


def chapter_files(folder: str | Path, suffix: str = ".ipynb") -> list[Path]:
    """The chapter files ``NN-slug<suffix>`` of a folder in number order, then the appendices
    ``L-slug<suffix>`` in letter order."""
    return sorted((p for p in Path(folder).glob(f"*{suffix}") if is_chapter(p)), key=_order)


def _order(path: Path) -> tuple[int, str]:
    label = chapter_label(path)
    return (0, label) if label.isdigit() else (1, label)


def chapter_label(path: str | Path) -> str:
    """``"12"`` for ``12-transformer-architecture``, ``"A"`` for ``A-random-forests``."""
    stem = Path(path).stem
    if not CHAPTER_STEM.match(stem):
        raise ValueError(f"path: expected a chapter file NN-slug or L-slug, got {stem!r}")
    return stem.split("-", 1)[0]


def is_appendix(path: str | Path) -> bool:
    return not chapter_label(path).isdigit()


def chapter_heading(path: str | Path) -> str:
    """How a chapter's title starts, and how the text refers to it: ``"12."`` / ``"Appendix A."``.

    The one place chapter numbers come from: every title line must start with this (a test checks
    titles, the table of contents and every "chapter N" reference against the file names)."""
    label = chapter_label(path)
    return f"{int(label)}." if label.isdigit() else f"Appendix {label}."


# -- cell tags ----------------------------------------------------------------------------------
SOLUTION = "solution"                        # the worked answer: collapsed in the book, gone from student copies
EXERCISE = "exercise"                        # the stub a reader fills in: outputs cleared in student copies
HIDE_INPUT = "hide-input"                    # show the output, fold the code (book and slides)
REMOVE_INPUT = "remove-input"                # show the output only
REMOVE_CELL = "remove-cell"                  # set-up code that neither the book nor the slides show
NBVAL_IGNORE_OUTPUT = "nbval-ignore-output"  # output varies (widgets, timings): nbval runs it, compares nothing
RAISES_EXCEPTION = "raises-exception"        # the error is the point: expected by nbval and the book build
CLAIM = "claim"                              # checks a sentence of the prose (transformer_lib.evidence.claim):
                                             # hidden in the book and slides, kept in every notebook copy
TAGS = {SOLUTION, EXERCISE, HIDE_INPUT, REMOVE_INPUT, REMOVE_CELL, NBVAL_IGNORE_OUTPUT, RAISES_EXCEPTION, CLAIM}


def tags_of(cell) -> list[str]:
    """A cell's tags (a nbformat node or a plain dict)."""
    return cell.get("metadata", {}).get("tags", [])


# -- exercises: the check call and its verdict ---------------------------------------------------
CHECK_CALL = re.compile(r"""\bcheck\(\s*["']([\w.]+)["']""")   # check("ch01.softmax_rows", answer)
VERDICT = re.compile(r"^(PASS|NOT YET) \[([\w.]+)\]", re.M)     # what transformer_lib.exercises prints


def _source(cell) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def check_names(source: str) -> list[str]:
    """The exercise names checked in a cell's (or a chapter's) source, in order."""
    return CHECK_CALL.findall(source)


def is_check_cell(cell) -> bool:
    return cell["cell_type"] == "code" and bool(CHECK_CALL.search(_source(cell)))


# -- executing a notebook -------------------------------------------------------------------------
KERNEL_NAME = "python3"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": KERNEL_NAME}
# the book's numbers were printed on a CPU: a chapter runs there unless the environment says otherwise
EXECUTION_DEFAULTS = {"TLIB_DEVICE": "cpu"}


@contextmanager
def _environment(values: dict[str, str]):
    """Set environment variables (inherited by the kernel) for the duration of a block."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class NoWidgetMimic:
    """Mixin for an nbclient client (or nbconvert/nbgrader preprocessor): widgets the kernel opens
    are not mimicked. nbclient's handler returns an ``OutputWidget`` for an ``ipywidgets.Output``,
    which sends the widget's state to the kernel on the shell socket mid-cell while the client
    polls that socket for the cell's reply (nbclient #312); without it a widget's outputs become
    the cell's own. Used by bookkit.grading and by ``execute_notebook(widgets=False)``."""

    def on_comm_open_jupyter_widget(self, msg):
        return None


def execute_notebook(nb, folder: str | Path, timeout: int = 900, allow_errors: bool = False,
                     env: dict[str, str] | None = None, widgets: bool = True) -> float:
    """Run ``nb`` (a nbformat notebook, changed in place) in ``folder``; return the wall time in s.

    ``widgets=True`` (the chapters' baselines) stores the widgets' state for the static book
    (``store_widget_state=True`` is required then: with False, nbclient crashes on ``interact``).
    ``widgets=False`` (reading a reader's progress) mimics no widget: nbclient's mimic of an
    ``ipywidgets.Output`` sends the widget's state to the kernel on the shell socket mid-cell while
    it waits on that socket for the reply, the hang bookkit.grading avoids the same way (nbclient
    #312; a chapter-1 student copy waited out the 600 s timeout in CI). ``env`` is set for the kernel
    on top of ``EXECUTION_DEFAULTS`` (which yield to the caller's own environment variables)."""
    from nbclient import NotebookClient

    class NoWidgetClient(NoWidgetMimic, NotebookClient):
        pass

    values = {k: v for k, v in EXECUTION_DEFAULTS.items() if k not in os.environ} | dict(env or {})
    client = (NotebookClient if widgets else NoWidgetClient)(
        nb, timeout=timeout, kernel_name=KERNEL_NAME, store_widget_state=widgets,
        allow_errors=allow_errors, resources={"metadata": {"path": str(folder)}})
    with _environment(values):
        start = time.perf_counter()
        client.execute()
        return time.perf_counter() - start
