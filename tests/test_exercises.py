"""The chapters and the registry agree: every check a chapter calls is registered and used, and the
executed notebooks show PASS. The checkers against their test data: tests/test_exercises_answers.py."""
import re
from pathlib import Path

import nbformat
import pytest

from bookkit.conventions import chapter_files
from transformer_lib.exercises import REGISTRY, check

CHAPTERS = chapter_files(Path(__file__).resolve().parents[1] / "chapters", ".md")
CHECK_CALL = re.compile(r"""check\(\s*["']([\w.]+)["']""")


def test_registry_is_not_empty():
    assert "intro.mean_of_squares" in REGISTRY


def _crashes(*args, **kwargs):
    raise RuntimeError("boom")


def test_a_crashing_answer_reports_not_yet(capsys):
    result = check("intro.mean_of_squares", _crashes)
    assert not result.passed and "RuntimeError" in result.message
    assert "NOT YET [intro.mean_of_squares]" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no exercise named"):
        check("no.such", None)


def _check_names(path):
    return CHECK_CALL.findall(path.read_text())


def test_every_exercise_is_used_in_a_chapter_and_every_check_is_registered():
    used = {name for p in CHAPTERS for name in _check_names(p)}
    assert used, "no chapter calls check()"
    assert not used - set(REGISTRY), f"chapters check unregistered exercises: {used - set(REGISTRY)}"
    assert not set(REGISTRY) - used, f"registered exercises no chapter uses: {set(REGISTRY) - used}"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_solutions_pass_in_the_executed_notebook(md):
    """The executed baseline shows PASS for every check, and nbval re-runs it in `make test`."""
    names = _check_names(md)
    nb = nbformat.read(str(md.with_suffix(".ipynb")), as_version=4)
    text = "\n".join(out.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for out in c.get("outputs", []) if out.get("output_type") == "stream")
    for name in names:
        assert f"PASS [{name}]" in text, f"{md.name}: the solution of {name} does not pass"
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert sum("solution" in t for t in tags) >= len(set(names)), f"{md.name}: a check without a solution cell"
    assert sum("exercise" in t for t in tags) >= len(set(names)), f"{md.name}: a check without an exercise stub"
