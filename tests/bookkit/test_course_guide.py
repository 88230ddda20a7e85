"""The course guide names real exercises (all of them) and real make targets."""
import re
from pathlib import Path

from transformer_lib.exercises import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "book" / "course-guide.md").read_text()


def test_every_exercise_named_in_the_guide_exists_and_all_are_assigned():
    named = set(re.findall(r"`([a-z_0-9]+\.[a-z_0-9]+)`", GUIDE))
    prefixes = {n.split(".")[0] for n in REGISTRY}
    mentioned = {n for n in named if n.split(".")[0] in prefixes}
    assert not mentioned - set(REGISTRY), f"the guide names unknown exercises: {mentioned - set(REGISTRY)}"
    assert not set(REGISTRY) - mentioned, f"exercises the guide never assigns: {set(REGISTRY) - mentioned}"


def test_make_targets_in_the_guide_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in set(re.findall(r"`make (\w+)`", GUIDE)):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target} is not a Makefile target"
    assert "python -m bookkit.progress" in GUIDE


def test_grading_figures_in_the_guide_are_the_measured_ones():
    """The guide's table of grading times is benchmarks/results/grading.json, row by row."""
    import json
    results = json.loads((ROOT / "benchmarks" / "results" / "grading.json").read_text())
    section = GUIDE[GUIDE.index("**Grading a class in reasonable time.**"):]
    for run in results["runs"]:
        row = (f"| {run['jobs']} | {run.get('prestart', 0)} | {run['submissions']} | {run['total_s']} | "
               f"{run['per_submission_s']} | {run['kernel_start_s']} | {run['cells_s']} | {run['checks_s']} | "
               f"{run['nbgrader_other_s']} | {run['cpu_s']} | {run['cpu_per_submission_s']} | "
               f"{run['load_1min_before']}-{run['load_1min_after']} |")
        assert row in section, f"the guide does not show the measured run {row}"
    assert results["machine"]["date"] in section
