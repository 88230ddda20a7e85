"""Shared fixtures: devices (CUDA parametrizations skip cleanly without a GPU), seeding, and the
hypothesis profiles.

Hypothesis profiles: with ``CI`` set (CI runs ``.ci/run`` with CI=true) the "ci" profile is loaded:
``derandomize=True`` draws the same examples on every run, so a submission can never pass or fail
by chance. Local runs keep the "dev" profile, which explores new examples each run. Both print the
``@reproduce_failure`` blob of a failing example, and the plugin prints the seed to rerun it with
``--hypothesis-seed``. Pick one by hand with ``HYPOTHESIS_PROFILE=ci|dev``.
"""
import os

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


def group_of(nodeid: str) -> str:
    """The scheduling group of a test id: its file's stem, or the folder it shares with others."""
    stem = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    return SHARED_FOLDERS.get(stem, stem)


@pytest.hookimpl(tryfirst=True)  # before xdist's own scheduler factory
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        """Load-scope scheduling whose scope is the group of ``group_of``."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return FileGroups(config, log)


# The longest groups go first (each worker takes the next group in collection order when it is
# free), so that no long group starts last while the other worker sits idle. As measured by
# --durations on the 2-core machine.
LONGEST_FIRST = ["book/_build", "test_course", "test_hub", "17-generating-text.ipynb", "test_smollm2",
                 "test_distributed", "test_quantization", "test_exercises_answers", "test_sparse_tiles",
                 "test_sparse"]


def pytest_collection_modifyitems(config, items):
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable: file order kept
