"""Solutions open folded in JupyterLab (``jupyter.source_hidden``) and one command folds existing
notebooks without running them (tests/deploy/test_lab.py clicks one open in a real JupyterLab)."""
import json

import nbformat
import pytest

from bookkit import notebooks
from bookkit.conventions import CHAPTERS, SOLUTION, chapter_files, tags_of


def _nb():
    return nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f(x):\n    ...", metadata={"tags": ["exercise"]}),
        nbformat.v4.new_code_cell("def f(x):\n    return x", metadata={"tags": [SOLUTION, "hide-input"]}),
        nbformat.v4.new_code_cell("f(1)", metadata={"tags": [SOLUTION]},
                                  outputs=[nbformat.v4.new_output("stream", text="1\n")]),
        nbformat.v4.new_code_cell("check('x', f)"),
    ])


def test_fold_solutions_hides_solution_sources_only():
    nb = _nb()
    assert notebooks.fold_solutions(nb) == 2
    meta = [c["metadata"].get("jupyter") for c in nb.cells]
    assert meta == [None, {"source_hidden": True}, {"source_hidden": True, "outputs_hidden": True}, None]
    assert notebooks.fold_solutions(nb) == 0  # idempotent


def test_fold_command_rewrites_metadata_only_and_runs_nothing(tmp_path):
    path = tmp_path / "01-some-chapter.ipynb"
    nb = _nb()
    nb.cells[1]["execution_count"] = 7
    nbformat.write(nb, str(path))
    assert notebooks.main(["fold-solutions", str(path)]) == 0
    after = json.loads(path.read_text())
    before = json.loads(nbformat.writes(nb))
    assert after["cells"][1]["metadata"]["jupyter"] == {"source_hidden": True}
    for cell_before, cell_after in zip(before["cells"], after["cells"]):
        cell_after["metadata"].pop("jupyter", None)
        assert cell_before == cell_after  # sources, outputs, execution counts untouched
    mtime = path.stat().st_mtime_ns
    notebooks.main(["fold-solutions", str(path)])
    assert path.stat().st_mtime_ns == mtime  # nothing to fold: not rewritten


@pytest.mark.parametrize("ipynb", chapter_files(CHAPTERS), ids=lambda p: p.stem)
def test_every_chapter_opens_its_solutions_folded(ipynb):
    nb = json.loads(ipynb.read_text())
    open_ = [i for i, c in enumerate(nb["cells"]) if SOLUTION in tags_of(c)
             and not c["metadata"].get("jupyter", {}).get("source_hidden")]
    assert not open_, (f"{ipynb.name}: solution cells {open_} open unfolded in JupyterLab: "
                       f"python -m bookkit.notebooks fold-solutions {ipynb.relative_to(CHAPTERS.parent)}")
