"""Shared fixtures: devices (CUDA parametrizations skip cleanly without a GPU), seeding, and the
hypothesis profiles.

Hypothesis profiles: with ``CI`` set (CI runs ``.ci/run`` with CI=true) the "ci" profile is loaded:
``derandomize=True`` draws the same examples on every run, so a submission can never pass or fail
by chance. Local runs keep the "dev" profile, which explores new examples each run. Both print the
``@reproduce_failure`` blob of a failing example, and the plugin prints the seed to rerun it with
``--hypothesis-seed``. Pick one by hand with ``HYPOTHESIS_PROFILE=ci|dev``.
"""
import os
import resource

import pytest
import torch
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True, database=None)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="no CUDA device"))]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True, scope="session")
def _no_torch_fastpath():
    # torch.nn's encoder/MHA "fast path" (eval mode) returns zeros at padded positions through
    # nested tensors; the math path is the reference the library must match.
    prev = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(prev)


# -- parallel runs ---------------------------------------------------------------------------------
# `make test` runs every test and every chapter in one `pytest -n 2 --dist loadgroup` (pytest-xdist).
# A group is one test file or one notebook, and files that share a folder on disk form one group, so
# that a module's fixtures (a built book, a course, a hub) are made once, on one worker, and never
# twice at the same time. The groups are applied by the scheduler below rather than by
# `xdist_group` marks: pytest 9 keeps an item's node id where pytest-xdist 3.8 cannot add the
# mark's "@group" suffix, so marked tests of one file were spread over both workers.
SHARED_FOLDERS = {
    "test_book": "book/_build", "test_browser": "book/_build", "test_pdf": "book/_build",
}

# Seconds each group takes on one process of the 2-core CI machine while the other process is busy
# too, as the summary below prints them after a `make test`. The scheduler hands the longest group
# still waiting to whichever process is free first (longest processing time first, within 4/3 of
# the best split when the estimates are right), so that no long group starts last while the other
# process idles. A group missing here is expected to take DEFAULT_SECONDS (see expected_seconds).
# From the summary of a fresh-clone `CI=true bash .ci/run` (2026-12-02, AMD EPYC, 2 cores; pytest
# 1046 s, the two processes 1013 and 1019 s), rounded; groups of about 20 s or less take the default.
GROUP_SECONDS = {
    "book/_build": 700, "test_course": 240, "test_hub": 150, "test_sparse": 90, "test_slides": 60,
    "test_distributed": 60, "test_explainer": 50, "17-generating-text.ipynb": 35,
    "05-positional-encoding.ipynb": 33, "test_quantization": 32, "test_grading_limits": 30,
    "16-training-a-gpt.ipynb": 27, "23-induction-heads.ipynb": 27, "A-random-forests.ipynb": 26,
    "24-circuits.ipynb": 25, "18-distributed-training.ipynb": 25, "test_lab": 22,
}
DEFAULT_SECONDS = 20


def group_of(nodeid: str) -> str:
    """The scheduling group of a test id: its file's stem, or the folder it shares with others."""
    stem = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    return SHARED_FOLDERS.get(stem, stem)


def expected_seconds(group: str) -> float:
    """GROUP_SECONDS of the group, else of the longest listed name it starts with (the parts of a
    split file, test_course_*.py, count as long as the whole: a short group started early costs
    nothing, a long one started last costs its length), else DEFAULT_SECONDS."""
    known = [name for name in GROUP_SECONDS if group.startswith(name)]
    return GROUP_SECONDS[max(known, key=len)] if known else DEFAULT_SECONDS


@pytest.hookimpl(tryfirst=True)  # before xdist's own scheduler factory
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        """Load-scope scheduling whose scope is the group of ``group_of``, in collection order
        (longest first, see ``pytest_collection_modifyitems``), a process's next group sent only
        when its current group is down to its last test."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            # xdist would queue the groups by their number of tests (many short notebook cells
            # before the course's few long tests); keep the order of the collection instead
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _reschedule(self, node) -> None:
            # xdist sends the next group while the last two tests of this one are still to run,
            # so a process could hold a long group behind a long last test while the other one
            # finished and idled; one test is the least a worker needs (it must know the test
            # after the one it runs)
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return FileGroups(config, log)


def pytest_collection_modifyitems(config, items):
    # stable: a group's tests keep their file order, and groups of equal estimate their collection order
    items.sort(key=lambda item: -expected_seconds(group_of(item.nodeid)))


# What each group took, on which process: one line per process at the end of a parallel run, so
# that GROUP_SECONDS can be set from a real run (groups under 10 s are summed as "others"). Each
# group shows its seconds and, after the slash, the CPU seconds of the worker and of the processes
# it started and reaped (a kernel, a build; not a hub's user servers), which a busy machine does
# not inflate.
_GROUP_TIMES: dict = {}
_CPU_AT = [0.0]


def _cpu_s() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid, location):
    _CPU_AT[0] = _cpu_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    now = _cpu_s()  # the phase (setup, call, teardown) that just ended
    outcome.get_result().user_properties.append(("cpu_s", now - _CPU_AT[0]))
    _CPU_AT[0] = now


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)  # set by pytest-xdist on the controller's copy of a report
    if node is not None:
        key = (node.gateway.id, group_of(report.nodeid))
        wall, cpu = _GROUP_TIMES.get(key, (0.0, 0.0))
        _GROUP_TIMES[key] = (wall + report.duration, cpu + dict(report.user_properties).get("cpu_s", 0.0))


def pytest_terminal_summary(terminalreporter):
    if not _GROUP_TIMES:
        return
    terminalreporter.section("test groups per process: seconds/CPU seconds")
    for worker in sorted({w for w, _ in _GROUP_TIMES}):
        groups = sorted(((t, g) for (w, g), t in _GROUP_TIMES.items() if w == worker), reverse=True)
        big = [f"{g} {wall:.0f}/{cpu:.0f}" for (wall, cpu), g in groups if wall >= 10]
        small = [t for t, _ in groups if t[0] < 10]
        rest = f", {len(small)} others {sum(w for w, _ in small):.0f}/{sum(c for _, c in small):.0f}" if small else ""
        wall, cpu = sum(t[0] for t, _ in groups), sum(t[1] for t, _ in groups)
        terminalreporter.write_line(f"{worker} {wall:.0f}/{cpu:.0f} s: {', '.join(big)}{rest}")
