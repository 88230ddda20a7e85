"""Teaching kit: student copies without solutions that still run, instructor copies, slides, progress."""
import re

import nbformat
import pytest

from bookkit import copies, progress, slides
from bookkit.conventions import CHAPTERS, chapter_files, is_check_cell

NOTEBOOKS = chapter_files(CHAPTERS)
URL_ATTR = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_notebooks_execute_and_report_not_yet(student_dir, path):
    verdicts = progress.notebook_progress(student_dir / path.name, execute=True)
    assert all(v == "not yet" for v in verdicts.values()), verdicts


def test_progress_on_the_solved_chapters_reads_all_passed():
    rows = progress.progress_table(CHAPTERS, execute=False)
    assert rows and all(status == "passed" for _, _, status in rows)


def test_instructor_copy(tmp_path):
    written = copies.write_instructor(CHAPTERS, tmp_path)
    assert {p.name for p in written} >= {p.name for p in NOTEBOOKS}
    assert all((tmp_path / p.with_suffix(".md").name).exists() for p in NOTEBOOKS)


def test_slides_deck_is_offline(tmp_path):
    nb_path = NOTEBOOKS[0]
    deck = slides.build_decks([nb_path], tmp_path)[0]
    page = deck.read_text()
    nb = nbformat.read(str(nb_path), as_version=4)
    headings = sum(len(re.findall(r"(?m)^#{1,3} ", c.source)) for c in nb.cells if c.cell_type == "markdown")
    assert page.count("<section>") == headings
    assert not URL_ATTR.search(page), "the deck references an external URL"
    for ref in re.findall(r"""(?:src|href)=["']([^"']+)["']""", page):
        if not ref.startswith("data:"):
            assert (tmp_path / ref).exists(), f"missing local asset {ref}"
    for css in tmp_path.glob("_assets/**/*.css"):
        assert not re.search(r"url\(\s*['\"]?https?:", css.read_text()), f"{css.name} loads a remote resource"
    assert "\\(" in page  # math is left for the local MathJax
