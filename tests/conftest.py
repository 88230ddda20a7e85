"""Shared fixtures: devices (CUDA parametrizations skip cleanly without a GPU), seeding."""
import pytest
import torch

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
