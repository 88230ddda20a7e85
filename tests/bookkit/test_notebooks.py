"""Chapter pipeline: .md and .ipynb in sync, volatile metadata stripped, template followed."""
import re

import nbformat
import pytest

from bookkit import conventions
from bookkit.notebooks import cells_in_sync

CHAPTERS = conventions.chapter_files(conventions.CHAPTERS, ".md")
CONTENT = [p for p in CHAPTERS if not p.name.startswith("00-")]


def test_chapters_exist():
    assert CHAPTERS and CHAPTERS[0].name == "00-how-to-use.md"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_pairing_in_sync(md):
    assert cells_in_sync(md) == []


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_executed_and_stripped(md):
    nb = nbformat.read(str(md.with_suffix(".ipynb")), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), "not executed: run `make chapters`"
    assert not any("execution" in c.metadata for c in nb.cells), "execution timestamps left in"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{md.name} has error outputs"
    assert nb.metadata.get("jupytext", {}).get("formats") == conventions.JUPYTEXT_FORMATS


@pytest.mark.parametrize("md", CONTENT, ids=lambda p: p.stem)
def test_template(md):
    text = md.read_text()
    for heading in ("## Exercises", "## Summary", "## Further reading"):
        assert re.search(rf"^{re.escape(heading)}", text, re.M), f"{md.name} lacks '{heading}'"
    assert re.search(r"question", text, re.I) and re.search(r"short answer", text, re.I)
    assert len(re.findall(r"\bexplore\(", text)) >= 2, f"{md.name}: fewer than two widgets"
    assert len(set(conventions.check_names(text))) >= 3, f"{md.name}: fewer than three exercises"
    assert re.search(r"seed_everything\(", text), f"{md.name} is not seeded"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_widget_cells_are_tagged(md):
    nb = nbformat.read(str(md.with_suffix(".ipynb")), as_version=4)
    for c in nb.cells:
        if c.cell_type == "code" and re.search(r"^explore\(|\n\s*explore\(", c.source):
            assert conventions.NBVAL_IGNORE_OUTPUT in conventions.tags_of(c), f"{md.name}: untagged widget cell"


def test_rerun_differing_only_in_timings_keeps_the_saved_notebook(tmp_path):
    from bookkit.notebooks import equivalent_to_saved
    md = CHAPTERS[0]
    saved = nbformat.read(str(md.with_suffix(".ipynb")), as_version=4)
    path = tmp_path / "nb.ipynb"
    cell = nbformat.v4.new_code_cell("print(t)", outputs=[nbformat.v4.new_output("stream", text="took 12.5 ms\n")])
    saved.cells.append(cell)
    nbformat.write(saved, str(path))
    rerun = nbformat.read(str(path), as_version=4)
    rerun.cells[-1].outputs[0]["text"] = "took 13.1 ms\n"
    assert equivalent_to_saved(rerun, path)
    rerun.cells[-1].outputs[0]["text"] = "took 13.1 ms, accuracy 0.91\n"
    assert not equivalent_to_saved(rerun, path)


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_cell_tags_come_from_the_vocabulary(md):
    """A misspelt tag (`solutions`, `hide_input`) would silently do nothing in every tool."""
    nb = nbformat.read(str(md.with_suffix(".ipynb")), as_version=4)
    unknown = {t for c in nb.cells for t in conventions.tags_of(c)} - conventions.TAGS
    assert not unknown, f"{md.name}: tags outside bookkit.conventions.TAGS: {unknown}"


def test_the_library_never_imports_the_tooling():
    """transformer_lib is what a reader learns from; bookkit is the book's machinery on top of it."""
    offenders = [str(p.relative_to(conventions.ROOT)) for p in (conventions.ROOT / "transformer_lib").rglob("*.py")
                 if re.search(r"^\s*(from|import)\s+bookkit\b", p.read_text(encoding="utf8"), re.M)]
    assert offenders == []
