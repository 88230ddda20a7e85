"""A class is graded in bounded time and disk whatever its submissions do (issue 40): one
sleeps just under the cell limit in every cell and just under the call limit in every call,
one floods its output with gigabytes, one fills every place it can write. Real nbgrader on
chapter 1, one ``nbgrader autograde`` process, short limits so that the bounds show quickly:

- time: a submission's cells *and* checks share ``notebook_timeout`` (here NOTEBOOK_TIMEOUT);
  the class's bound is (kernel start + notebook_timeout + probe_timeout) per submission;
- output: at most ``output_limit`` bytes kept per cell (bookkit.grading.OUTPUT_LIMIT);
- disk: the sandbox's /tmp is a tmpfs of ``HOME_BYTES``, /dev/shm one of ``SHM_BYTES``, one file
  at most ``FILE_BYTES``, and the kernel's folder on the grader's disk is killed past
  ``FOLDER_BYTES`` (and removed after).

The instructor's solutions, graded last in the same process, still score full marks.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")
from nbgrader.api import Gradebook  # noqa: E402

from _submissions import without_demonstrations  # noqa: E402
from bookkit import course, grading  # noqa: E402
from test_course import answer_cells, answer_names, solved  # noqa: E402
from test_grading_attacks import released_course  # noqa: E402

A = "01-attention"
N = 4
CELL_TIMEOUT, CALL_TIMEOUT, NOTEBOOK_TIMEOUT, PROBE = 5, 4, 30, 10
FLOOD_BYTES = 2 * 2**30

# 64 KiB a message: ZMQ's high-water mark (1000 messages) keeps at most 64 MiB in the socket; what
# ipykernel's I/O thread has not yet sent can still pile up on a busy machine (see the flood test).
FLOOD = ("import sys\n_chunk = 'x' * 2**16\n"
         f"for _ in range({FLOOD_BYTES // 2**16}):\n    sys.stdout.write(_chunk)\n    sys.stdout.flush()\n")
FILL = ("import os, glob\nfrom ipykernel import get_connection_file\n_written = {}\n"
        "for _where in ['/tmp/home', '/dev/shm', os.path.dirname(get_connection_file())]:\n"
        "    _n = 0\n    try:\n        while _n < 4000:\n"
        "            with open(os.path.join(_where, f'fill-{_n}'), 'wb') as _f:\n"
        "                _f.write(b'x' * 2**26)\n            _n += 1\n"
        "    except OSError as _err:\n        _written[_where] = (_n, type(_err).__name__)\n"
        "print('filled', _written)\n")


def build(student: str, release, source):
    if student == "solutions":
        return without_demonstrations(solved(release, source))
    nb = without_demonstrations(solved(release, source, positions=[]))
    if student == "sleepy":  # code cells sleep just under the cell limit; the instructor's answers, each
        # call slept just under the call limit: every check passes, so every test input is called
        nb = without_demonstrations(solved(release, source))
        code = [c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]
        for cell in code[:2]:
            cell.source = f"import time\ntime.sleep({CELL_TIMEOUT - 0.5})\n" + cell.source
        for cell, (_, answer) in zip(answer_cells(nb), answer_names(source)):
            cell.source += (f"\nimport time\n_{answer} = {answer}\n"
                            f"def {answer}(*a, **k):\n    time.sleep({CALL_TIMEOUT - 0.2})\n    return _{answer}(*a, **k)\n")
        # and every check cell moved to the end: no code cell of the student's runs between the
        # checks, where a grader that watched the time only before cells would see it run out
        graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        nb.cells = [c for c in nb.cells if c not in graded] + graded
    if student == "flood":
        answer_cells(nb)[0].source = FLOOD + answer_cells(nb)[0].source
    if student == "fill":
        answer_cells(nb)[0].source = FILL + answer_cells(nb)[0].source
    return nb


STUDENTS = ["fill", "flood", "sleepy", "solutions"]  # graded in this order


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    root, release, source = released_course(tmp_path_factory, "limits-course")
    for student in STUDENTS:
        out = root / "submitted" / student / A / f"{A}.ipynb"
        out.parent.mkdir(parents=True)
        nbformat.write(build(student, release, source), str(out))
    start = time.perf_counter()
    result = grading.autograde_class(root, A, timeout=900, extra=[
        f"--SandboxedExecute.timeout={CELL_TIMEOUT}", f"--SandboxedExecute.call_timeout={CALL_TIMEOUT}",
        f"--SandboxedExecute.notebook_timeout={NOTEBOOK_TIMEOUT}", f"--SandboxedExecute.probe_timeout={PROBE}"])
    seconds = time.perf_counter() - start
    print(f"\nautograde of {len(STUDENTS)} submissions with limits: {seconds:.1f} s")
    return {"root": root, "result": result, "seconds": seconds}


def _scores(root: Path, student: str) -> list[float]:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course.COURSE_ID) as gb:
        sub = gb.find_submission_notebook(A, A, student)
        return [g.score for g in sorted(sub.grades, key=lambda g: g.name) if g.max_score]


def _timing(log: str) -> tuple[float, float]:
    """(notebook cells, checks) seconds from SandboxedExecute's log line."""
    found = re.search(r"notebook cells ([\d.]+) s, checks ([\d.]+) s", log)
    assert found, log[-2000:]
    return float(found.group(1)), float(found.group(2))


def test_every_attack_scores_zero_and_the_solutions_full_marks(limited):
    for student in ("fill", "flood"):
        assert _scores(limited["root"], student) == [0] * N, student
    assert sum(_scores(limited["root"], "sleepy")) < N  # it ran out of time before its last checks
    assert _scores(limited["root"], "solutions") == [1] * N


def test_a_submission_that_sleeps_everywhere_is_stopped_at_its_time(limited):
    """Cells and checks together stay within the submission's time (plus one probe of a hung
    kernel and the bookkeeping of a call). Its two sleeping cells and the slowed checks of four
    exercises (all at the end of the notebook) take over a minute unbounded."""
    cells, checks = _timing(limited["result"]["sleepy"]["log"])
    assert cells + checks <= NOTEBOOK_TIMEOUT + PROBE + 5, (cells, checks)


def test_a_flood_of_output_is_cut_at_the_limit(limited):
    """The grader keeps at most ``output_limit`` bytes of the cell's output (a note says the
    rest was dropped) while the flood runs until the cell's time limit: the autograded notebook
    stays small and the submission's time bounded."""
    page = limited["root"] / "autograded" / "flood" / A / f"{A}.ipynb"
    assert page.stat().st_size < 2 * grading.OUTPUT_LIMIT + 2**20
    nb = nbformat.read(str(page), 4)
    outputs = answer_cells(nb)[0].outputs
    text = "".join(o.get("text", "") for o in outputs)
    # On a busy machine the kernel can die first: ipykernel queues what the cell prints in its own
    # memory until its I/O thread sends it, and a slow grader lets gigabytes queue up to the
    # kernel's address-space limit. The submission then ends the same way (its kernel gone, the
    # rest of its cells not run, 0 points: test_every_attack_scores_zero...), in the same bound.
    died = [o for o in outputs if o.get("ename") == "DeadKernelError"]
    assert "dropped the rest" in text or died, outputs
    kept = sum(len(o.get("text", "")) for o in outputs if o.get("name") == "stdout")
    assert kept <= grading.OUTPUT_LIMIT  # nbgrader's LimitOutput trims the saved copy too; this is what the grader held
    cells, checks = _timing(limited["result"]["flood"]["log"])
    assert cells + checks <= NOTEBOOK_TIMEOUT + PROBE + 5


def test_what_a_submission_writes_is_bounded_and_removed(limited):
    nb = nbformat.read(str(limited["root"] / "autograded" / "fill" / A / f"{A}.ipynb"), 4)
    printed = "".join(o.get("text", "") for o in answer_cells(nb)[0].outputs)
    # the tmpfs home and /dev/shm filled up (ENOSPC) at their sizes; the kernel's own folder was
    # cut by the watcher (the kernel killed mid-cell, so nothing is printed) or by ENOSPC/EFBIG
    assert "filled" not in printed or ("'/tmp/home': (" in printed and "'/dev/shm': (" in printed)
    home = re.search(r"'/tmp/home': \((\d+)", printed)
    if home:
        assert int(home.group(1)) * 2**26 <= grading.HOME_BYTES
    log = limited["result"]["fill"]["log"]
    # Three endings, all bounded: the watcher killed the kernel past FOLDER_BYTES ("wrote more
    # than" in the log), every place refused a write (ENOSPC/EFBIG, "filled" printed), or, on a
    # machine whose disk is busy (another process deleting gigabytes), writing to the page cache
    # is throttled and the cell reaches its time limit first (CellTimeoutError).
    timed_out = any(o.get("ename") == "CellTimeoutError" for o in answer_cells(nb)[0].outputs)
    assert "wrote more than" in log or "filled" in printed or timed_out, (log[-2000:], printed)
    cells, checks = _timing(log)
    assert cells + checks <= NOTEBOOK_TIMEOUT + PROBE + 5, (cells, checks)
    assert not list(Path("/tmp").glob("tlib-grade-*/kernel/fill-*")), "a kernel folder was left behind"
