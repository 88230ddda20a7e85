"""Pick a device once and seed every random number generator.

The book runs the same code on a CUDA GPU, an Apple-silicon GPU (MPS) or a plain CPU, so the
choice is made in exactly one place. Chapters call :func:`get_device` and :func:`seed_everything`
at the top; nothing else in the library guesses the device.
"""
from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

from ._checks import check_device, check_int

__all__ = ["get_device", "seed_everything", "cpu_threads"]


def get_device(prefer: str | None = None) -> torch.device:
    """Return the best available device: CUDA, then MPS, then CPU.

    ``prefer`` (or the environment variable ``TLIB_DEVICE``) forces a choice, e.g. ``"cpu"`` to
    reproduce the book's CPU numbers on a GPU machine.
    """
    if prefer is not None and prefer != "":  # "" (an unset variable passed on) means no preference
        return check_device("prefer", prefer)
    if os.environ.get("TLIB_DEVICE"):
        return check_device("TLIB_DEVICE", os.environ["TLIB_DEVICE"])
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices) and return a seeded CPU ``torch.Generator``.

    The returned generator is handy for code that wants its own stream of random numbers
    without disturbing the global one.
    """
    check_int("seed", seed, 0, 2**32 - 1)  # NumPy's legacy seed range, the narrowest of the three
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA and MPS
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def cpu_threads(count: int):
    """Run the block with ``count`` CPU threads for torch, then restore the previous setting.

    Training a tiny model on one thread is a deliberate choice: its matrix products are
    below the size at which a second thread pays for its
    synchronisation, and on a busy machine the threads' waits on each other make a step many
    times slower. One thread also makes the printed losses identical on machines with different
    core counts.
    """
    check_int("count", count)
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
