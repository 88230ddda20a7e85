"""transformer_lib.device: one place that picks the device, seeds every generator, sets threads."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from transformer_lib.device import cpu_threads, get_device, seed_everything


def test_prefer_and_the_environment_force_a_device(monkeypatch):
    monkeypatch.delenv("TLIB_DEVICE", raising=False)
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setenv("TLIB_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    assert get_device("meta") == torch.device("meta")  # prefer wins over the environment


def test_without_a_choice_the_best_available_device_is_picked(monkeypatch):
    monkeypatch.delenv("TLIB_DEVICE", raising=False)
    mps = getattr(torch.backends, "mps", None)
    expected = ("cuda" if torch.cuda.is_available() else
                "mps" if mps is not None and mps.is_available() else "cpu")
    assert get_device().type == expected


def test_bad_device_names_name_their_source(monkeypatch):
    monkeypatch.delenv("TLIB_DEVICE", raising=False)
    with pytest.raises(TypeError, match="prefer"):
        get_device(3)
    with pytest.raises(ValueError, match="prefer"):
        get_device("gpu please")
    monkeypatch.setenv("TLIB_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="TLIB_DEVICE"):
        get_device()


def _draws(generator: torch.Generator) -> tuple:
    return (random.random(), float(np.random.rand()), torch.rand(3).tolist(),
            torch.rand(2, generator=generator).tolist())


def test_seed_everything_makes_every_generator_repeat():
    first = _draws(seed_everything(123))
    second = _draws(seed_everything(123))
    other = _draws(seed_everything(124))
    assert first == second
    assert all(a != b for a, b in zip(first, other))
    assert isinstance(seed_everything(2**32 - 1), torch.Generator)  # the top of NumPy's range


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True])
def test_seeds_outside_numpys_range_are_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        seed_everything(seed)


def test_cpu_threads_sets_and_restores_even_after_an_error():
    before = torch.get_num_threads()
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"):
        with cpu_threads(1):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("count", [0, -2, 1.0, True])
def test_cpu_threads_needs_a_positive_count(count):
    before = torch.get_num_threads()
    with pytest.raises(ValueError, match="count"):
        with cpu_threads(count):
            pass
    assert torch.get_num_threads() == before


def test_cpu_threads_restores_the_setting_even_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with cpu_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before
