"""Shared fixtures: devices (CUDA parametrizations skip cleanly without a GPU), seeding, the
hypothesis profiles, and each test's tier (see "tiers" below). This folder is on ``sys.path``
(pytest puts a conftest's folder there), so helpers such as ``_servers.py`` import from any test
folder.

Hypothesis profiles: with ``CI`` set (CI runs ``.ci/run`` with CI=true) the "ci" profile is loaded:
``derandomize=True`` draws the same examples on every run, so a submission can never pass or fail
by chance. Local runs keep the "dev" profile, which explores new examples each run. Both print the
``@reproduce_failure`` blob of a failing example, and the plugin prints the seed to rerun it with
``--hypothesis-seed``. Pick one by hand with ``HYPOTHESIS_PROFILE=ci|dev``. Neither has a
deadline: a test's speed is not what it checks, and on a loaded two-core machine one example of
test_distributed's rank partition took 288 ms against Hypothesis's default 200 ms deadline.
"""
import itertools
import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True, database=None, deadline=None)
settings.register_profile("dev", print_blob=True, deadline=None)
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


# -- tiers ----------------------------------------------------------------------------------------
# Every test belongs to one tier, a pytest marker given here from the file's location and name (no
# test is marked by hand). `make test` runs the tiers side by side, one pytest each; `make test-unit`,
# `make test-fast`, ... run one; `pytest -m unit` selects one by hand. The markers are registered in
# pyproject.toml.
#   unit      tests/test_*.py: the library, its exercises' checkers, the environment files
#   chapters  chapters/*.ipynb through nbval, and the tests/bookkit checks of the chapters' sources
#             and executed notebooks (sync, template, prose numbers, chapter numbers, figures)
#   book      the built HTML book and the PDF (tests/bookkit/test_book.py, test_pdf.py)
#   browser   what runs in Chromium: the built book's pages, the explainer page, the slide decks
#   course    the course and its servers: nbgrader course, grading sandbox and limits, the teaching
#             kit (student copies, progress), and deploy/ (tests/deploy: the hub, the lab)
# `slow` is added to the unit files that take a minute or more each (compiled kernels, torchrun
# processes, the pretrained models); `make test-fast` is the unit tier without them.
TIERS = ("unit", "chapters", "book", "browser", "course")
BOOKKIT_TIERS = {"test_book": "book", "test_pdf": "book",
                 "test_browser": "browser", "test_explainer": "browser", "test_slides": "browser",
                 "test_course": "course", "test_course_guide": "course", "test_grading_limits": "course",
                 "test_process_limit": "course", "test_teaching": "course"}
SLOW_UNIT_FILES = {"test_sparse", "test_distributed", "test_quantization", "test_smollm2", "test_extensions", "test_config",
                   "test_speculative", "test_evaluation_lm_eval"}
ROOT = Path(__file__).resolve().parents[1]


def tier_of(path: Path) -> str:
    """The tier of a test file (or notebook) from where it lies: see TIERS above."""
    try:
        parts = path.resolve().relative_to(ROOT).parts
    except ValueError:  # a file outside the checkout
        return "unit"
    if parts[0] == "chapters":
        return "chapters"
    if parts[:2] == ("tests", "deploy"):
        return "course"
    if parts[:2] == ("tests", "bookkit"):
        if path.stem.startswith("test_grading"):  # the sandboxed grader: its limits and attacks
            return "course"
        return BOOKKIT_TIERS.get(path.stem, "chapters")
    return "unit"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(Path(item.path))
        item.add_marker(tier)
        if tier == "unit" and Path(item.path).stem in SLOW_UNIT_FILES:
            item.add_marker("slow")


def pytest_terminal_summary(terminalreporter):
    """Each tier's CPU time under its summary line, so that a `make test` log tells which tier's
    work grew (its wall time also counts the waits and the other tiers sharing the cores):
    this process, and the child processes it waited for (kernels, browsers, servers, compilers)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    terminalreporter.write_line(f"CPU time: {own.ru_utime + own.ru_stime:.0f} s in this pytest process, "
                                f"{children.ru_utime + children.ru_stime:.0f} s in the child processes it waited for")


# -- parity with torch.nn: helpers of test_multihead, test_layers and test_model -------------------

def lengths_and_masks(B, L, device, causal):
    """Random key lengths (>= 1) -> (our bool mask, torch attn_mask, torch key_padding_mask)."""
    import transformer_lib as tl  # here: the tiers that never build a model need not import the library
    lengths = torch.randint(1, L + 1, (B,))
    lengths[0] = L
    ours = tl.padding_mask(lengths, L, device=device)  # (B, 1, 1, L)
    kpm = ~ours[:, 0, 0, :]  # torch: True = pad
    attn = None
    if causal:
        c = tl.causal_mask(L, device=device)
        ours = tl.combine_masks(ours, c)
        attn = tl.to_torch_mha_mask(c)  # torch: True = blocked
    return ours, attn, kpm


def to_bf(x, batch_first):
    return x if batch_first else x.transpose(0, 1)


# (batch_first, norm_first, activation) of every layer and Transformer checked against torch.nn
CONFIGS = list(itertools.product([True, False], [False, True], ["relu", "gelu"]))
