"""A fork bomb in a submission is stopped at the sandbox's process cap (bookkit/process_limit.py),
scores nothing, and leaves the grader, the next submission and the machine working.

Real nbgrader on chapter 1: one submission starts a fork bomb in its first answer cell (every
process keeps forking past refused forks, so that only the cap can bound it), graded in the
same ``nbgrader autograde`` process as the instructor's solutions. Bounded: each of the bomb's
processes stops after ``REFUSALS`` refused forks or ``BOMB_SECONDS``, the cell limit is
``CELL_TIMEOUT``, the whole autograde ``AUTOGRADE_TIMEOUT``; what it started dies with its
sandbox's pid namespace and its control group.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader")
from nbgrader.api import Gradebook  # noqa: E402

from _submissions import BOUNDED_FORKS, without_demonstrations  # noqa: E402
from bookkit import course, grading, process_limit  # noqa: E402

ASSIGNMENT = "01-attention"
EXERCISES = 4
CAP = 64                 # processes and threads a kernel may have in this test
BOMB_SECONDS = 40          # at most; under the cell limit below
REFUSALS = 3               # a refused fork costs the whole copy of the kernel's memory map first
CELL_TIMEOUT = 60
AUTOGRADE_TIMEOUT = 900
MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\n", re.M)
# each process forks until the cap has refused it REFUSALS times or BOMB_SECONDS have passed: on
# a loaded machine a bomb bounded by time alone could end before it reached the cap (seen at load
# ~20, with the next submission's kernel starting beside it). Linux checks the pids cap only after
# it has copied the forking process's page tables, so each refusal of a kernel with torch loaded
# costs CPU: with 20 refusals a process the bomb ran out its 40 s (642 refusals, load ~20); with 3
# it ended in 10 s (159 refusals, load ~19), the cap as binding
FORK_BOMB = (f"import os, time\n_end, _refused = time.time() + {BOMB_SECONDS}, 0\n"
             f"while time.time() < _end and _refused < {REFUSALS}:\n    try:\n        os.fork()\n"
             "    except OSError:\n        _refused += 1\n")


requires_cap = pytest.mark.skipif(
    not grading.bwrap_available() or (os.geteuid() == 0 and process_limit.pids_root() is None),
    reason="needs bwrap, and (as root) a writable pids control group")


def _processes() -> int:
    return sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())


def _groups() -> list[str]:
    root = process_limit.pids_root()
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root else []


def test_bad_caps_are_refused():
    with pytest.raises(ValueError, match="processes"):
        grading.sandbox_command(["true"], writable=[], processes=0)
    with pytest.raises(ValueError, match="limit"):
        process_limit.ProcessGroup(Path("/nonexistent"), 2)


@requires_cap
def test_forks_past_the_cap_are_refused_in_the_sandbox():
    """200 forks asked for, at most CAP tasks granted (the interpreter itself is one), and the
    group records the refusals; the group is gone afterwards."""
    before = _groups()
    cmd = grading.sandbox_command([sys.executable, "-c", BOUNDED_FORKS], writable=[], processes=CAP)
    parent = process_limit.pids_root()
    group = process_limit.ProcessGroup(parent, CAP) if parent else None
    try:
        proc = subprocess.run(process_limit.joining_command(cmd, group) if group else cmd,
                              capture_output=True, text=True, timeout=120)
        forked, refused = map(int, proc.stdout.split())
        assert proc.returncode == 0, proc.stderr
        assert forked < CAP and forked + refused == 200
        if group:
            assert group.refused_forks() >= refused
    finally:
        if group:
            group.close()
    assert not set(_groups()) - set(before)


@pytest.fixture(scope="module")
def bombed(tmp_path_factory):
    from test_grading_attacks import A, released_course  # the session's generated course of chapter 1, copied
    assert A == ASSIGNMENT
    root, release, source = released_course(tmp_path_factory, "forkbomb-course")
    answers = [MARKERS.sub("", c.source) for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for student in ("aforkbomb", "solutions"):  # graded in this order, in one process
        nb = without_demonstrations(nbformat.from_dict(release))
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        if student == "solutions":
            for cell, answer in zip(cells, answers):
                cell.source = answer
        else:
            cells[0].source = FORK_BOMB + cells[0].source
        out = root / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        out.parent.mkdir(parents=True)
        nbformat.write(nb, str(out))
    peak, done = [_processes()], threading.Event()
    baseline = peak[0]

    def watch():  # the machine's process count while grading runs, every 0.2 s
        while not done.wait(0.2):
            peak.append(_processes())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.perf_counter()
    try:
        result = grading.autograde_class(
            root, ASSIGNMENT, timeout=AUTOGRADE_TIMEOUT,
            extra=[f"--SandboxedExecute.max_processes={CAP}", f"--SandboxedExecute.timeout={CELL_TIMEOUT}",
                   "--SandboxedExecute.call_timeout=20"])
    finally:
        done.set()
        watcher.join(5)
    return {"root": root, "result": result, "seconds": time.perf_counter() - start, "baseline": baseline,
            "peak": max(peak)}


def _scores(root: Path, student: str) -> list[float]:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course.COURSE_ID) as gb:
        sub = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return [g.score for g in sorted(sub.grades, key=lambda g: g.name) if g.max_score]


@requires_cap
def test_a_fork_bomb_scores_zero_and_the_next_submission_is_graded(bombed):
    assert _scores(bombed["root"], "aforkbomb") == [0] * EXERCISES
    assert _scores(bombed["root"], "solutions") == [1] * EXERCISES


@requires_cap
def test_the_fork_bomb_hit_the_cap_and_the_machine_kept_its_processes(bombed):
    log = bombed["result"]["aforkbomb"]["log"]
    refused = re.search(r"refused (\d+) forks at its cap of (\d+) processes", log)
    if process_limit.pids_root() is not None:  # the control group counted the refusals
        assert refused and int(refused.group(1)) > 0 and int(refused.group(2)) == CAP, log[-2000:]
    # at most two kernels at once (with SandboxedExecute.prestart the next one is already up), each
    # capped; other users of the machine come and go, hence the margin
    assert bombed["peak"] - bombed["baseline"] < 2 * CAP + 100
    # every group this run's kernels ran in is removed (other graders on the machine, such as
    # test_course in the other test process, share the parent: theirs come and go meanwhile)
    if process_limit.pids_root() is not None:
        ours = {name for r in bombed["result"].values()
                for name in re.findall(r"the kernel's control group: (kernel-[0-9a-f]+)", r["log"])}
        assert len(ours) >= 2, "the log names no control group of the two submissions' kernels"
        assert not ours & set(_groups()), f"left behind: {sorted(ours & set(_groups()))}"
    assert bombed["seconds"] < AUTOGRADE_TIMEOUT


# -- cgroup v2: the path logic on a fake tree -------------------------------------------------------
# This machine mounts cgroup v1 only (its pids controller is bound to the v1 hierarchy, so a
# cgroup2 mount here would list no pids controller), and unmounting v1 would break every other
# job on it. So the v2 branch of pids_root is tested on a folder laid out like /sys/fs/cgroup
# under cgroup2: which files it reads, what it writes to delegate the controller, which folder it
# returns, and that it prefers v2 over v1. That the kernel then enforces pids.max on v2 is not
# tested here.

def _fake_v2(root: Path, controllers: str = "cpuset cpu io memory pids", subtree: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text(subtree + "\n")
    (root / "cgroup.procs").write_text("")
    return root


def test_v2_root_delegates_pids_and_returns_the_grading_group(tmp_path, monkeypatch):
    root = _fake_v2(tmp_path / "cgroup", subtree="memory")
    group = root / process_limit.GROUP
    group.mkdir()  # a real cgroupfs fills a new group with its control files; the fake one has one
    (group / "cgroup.subtree_control").write_text("\n")
    assert process_limit.pids_root(root) == group
    assert (root / "cgroup.subtree_control").read_text() == "+pids\n"  # the root delegates pids
    assert (group / "cgroup.subtree_control").read_text() == "+pids\n"  # and the group, to its kernels
    # what a real cgroupfs then shows; a second grader finds pids delegated and writes nothing
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    (group / "cgroup.subtree_control").write_text("pids\n")

    def no_write(self, *args, **kwargs):
        raise AssertionError(f"wrote {self}")

    monkeypatch.setattr(Path, "write_text", no_write)
    assert process_limit.pids_root(root) == group


def test_v2_without_a_pids_controller_falls_back_to_v1_or_none(tmp_path):
    root = _fake_v2(tmp_path / "cgroup", controllers="cpu memory")
    assert process_limit.pids_root(root) is None  # no v2 pids, no v1 hierarchy
    (root / "pids").mkdir()
    (root / "pids" / "cgroup.procs").write_text("")
    assert process_limit.pids_root(root) == root / "pids" / process_limit.GROUP  # the v1 layout
    both = _fake_v2(tmp_path / "both")
    (both / "pids").mkdir()
    (both / "pids" / "cgroup.procs").write_text("")
    (both / process_limit.GROUP).mkdir()
    (both / process_limit.GROUP / "cgroup.subtree_control").write_text("pids\n")
    (both / "cgroup.subtree_control").write_text("pids\n")
    assert process_limit.pids_root(both) == both / process_limit.GROUP  # v2 is preferred


def test_v2_root_that_refuses_the_delegation_is_not_used(tmp_path):
    root = _fake_v2(tmp_path / "cgroup")
    (root / "cgroup.subtree_control").chmod(0o444)
    if os.access(root / "cgroup.subtree_control", os.W_OK):  # root ignores file modes: a folder in its place
        (root / "cgroup.subtree_control").chmod(0o644)
        (root / "cgroup.subtree_control").unlink()
        (root / "cgroup.subtree_control").mkdir()
    assert process_limit.pids_root(root) is None


def test_a_process_group_on_a_v2_layout_sets_the_cap_and_reads_refusals(tmp_path):
    parent = tmp_path / process_limit.GROUP
    parent.mkdir()
    group = process_limit.ProcessGroup(parent, 64)
    assert group.path.parent == parent and group.path.name.startswith("kernel-")
    assert (group.path / "pids.max").read_text() == "64\n"
    assert group.refused_forks() == 0  # no pids.events yet
    (group.path / "pids.events").write_text("max 17\n")  # cgroup v2 and v1 both write "max N"
    assert group.refused_forks() == 17
    (group.path / "cgroup.procs").write_text("")
    assert group.members() == []
    cmd = process_limit.joining_command(["python", "-c", "pass"], group)
    assert cmd[:3] == ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"'] and cmd[3] == str(group.procs)
