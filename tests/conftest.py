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
# For `pytest -n 2 --dist loadgroup` (pytest-xdist): each test file is one group, so its module
# fixtures (a built book, a course, a hub) would be made once on one worker, and files that share a
# folder on disk form one group. NOT YET WORKING: with xdist 3.8 the groups were not applied (tests
# of one file ran on both workers), so `make test` runs these tests in one process for now.
SHARED_FOLDERS = {
    "test_book": "book/_build", "test_browser": "book/_build", "test_pdf": "book/_build",
}


# The longest groups go first (xdist hands groups out in collection order), so that no long group
# starts last while the other worker sits idle. Longest first, as measured by --durations.
LONGEST_FIRST = ["test_course", "book/_build", "test_hub", "test_smollm2", "test_distributed",
                 "test_quantization", "test_exercises_answers", "test_sparse_tiles", "test_sparse"]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the marks into groups
def pytest_collection_modifyitems(config, items):
    def group(item):
        return SHARED_FOLDERS.get(item.path.stem, item.path.stem)

    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group(item), len(rank)))  # stable: file order kept within a group
