"""Teaching kit: student copies without solutions that still run, instructor copies, progress.

The slides are tested in tests/bookkit/test_slides.py."""
import builtins
import symtable

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from bookkit import copies, progress
from bookkit.conventions import CHAPTERS, chapter_files, is_check_cell, tags_of

NOTEBOOKS = chapter_files(CHAPTERS)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    written = copies.write_student(CHAPTERS, out)
    assert len(written) == len(NOTEBOOKS)
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_copy_has_no_solutions(student_dir, path):
    full = nbformat.read(str(path), as_version=4)
    student = nbformat.read(str(student_dir / path.name), as_version=4)
    text = nbformat.writes(student)
    solutions = [c for c in full.cells if "solution" in c.metadata.get("tags", [])]
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
    for cell in solutions:
        assert cell.source.strip() not in text, f"solution text survived in {path.name}"
    assert "PASS [" not in text, "a check output from the solved notebook survived"
    for cell in student.cells:
        if cell.cell_type == "code" and ("exercise" in cell.metadata.get("tags", []) or is_check_cell(cell)):
            assert cell.outputs == []
    kept = lambda nb: sum(len(c.get("outputs", [])) for c in nb.cells if c.cell_type == "code"
                          and "solution" not in c.metadata.get("tags", []) and not is_check_cell(c)
                          and "exercise" not in c.metadata.get("tags", []))
    assert kept(student) == kept(full), "other outputs must be kept"


# -- student copies still run ---------------------------------------------------------------------
# nbval already executes every chapter once. Executing every student copy again (about four minutes
# of `make test`) would only find one thing nbval cannot: a cell that uses a name which only a
# removed solution cell defined. A static pass finds exactly that in every chapter, and two
# chapters' student copies are still executed end to end.
IPYTHON_NAMES = {"get_ipython", "display", "In", "Out", "_", "__", "___", "exit", "quit"}
EXECUTED_STUDENT_COPIES = ("01-attention", "04-masking")


def _scopes(table):
    yield table
    for child in table.get_children():
        yield from _scopes(child)


def _cell_names(source: str) -> tuple[set[str], set[str]]:
    """(names the cell binds at top level, global names it reads in any scope)."""
    code = TransformerManager().transform_cell(source)  # %magics and !shell lines become Python
    top = symtable.symtable(code, "<cell>", "exec")
    binds = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    uses = {s.get_name() for scope in _scopes(top) for s in scope.get_symbols()
            if s.is_referenced() and (scope is top or s.is_global())}
    return binds, uses


def unbound_names(nb) -> list[tuple[int, list[str]]]:
    """(cell index, names) for every code cell that reads a name no earlier cell (nor itself) binds."""
    bound = set(dir(builtins)) | IPYTHON_NAMES
    problems = []
    for n, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        binds, uses = _cell_names(cell.source)
        if uses - bound - binds:
            problems.append((n, sorted(uses - bound - binds)))
        bound |= binds
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_copy_reads_no_name_only_a_solution_defined(student_dir, path):
    student = nbformat.read(str(student_dir / path.name), as_version=4)
    assert unbound_names(student) == []


def test_the_static_pass_finds_a_missing_stub(student_dir):
    """Without its exercise stubs a student copy reads names nothing defines: the pass must say so."""
    student = nbformat.read(str(student_dir / NOTEBOOKS[1].name), as_version=4)
    assert unbound_names(student) == []
    student.cells = [c for c in student.cells if "exercise" not in tags_of(c)]
    assert unbound_names(student), "removing every stub went unnoticed"


@pytest.mark.parametrize("stem", EXECUTED_STUDENT_COPIES)
def test_student_notebooks_execute_and_report_not_yet(student_dir, stem):
    verdicts = progress.notebook_progress(student_dir / f"{stem}.ipynb", execute=True)
    assert verdicts and all(v == "not yet" for v in verdicts.values()), verdicts


def test_progress_on_the_solved_chapters_reads_all_passed():
    rows = progress.progress_table(CHAPTERS, execute=False)
    assert rows and all(status == "passed" for _, _, status in rows)


def test_instructor_copy(tmp_path):
    written = copies.write_instructor(CHAPTERS, tmp_path)
    assert {p.name for p in written} >= {p.name for p in NOTEBOOKS}
    assert all((tmp_path / p.with_suffix(".md").name).exists() for p in NOTEBOOKS)
