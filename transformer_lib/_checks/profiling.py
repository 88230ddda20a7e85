"""Devices and measurements (device, profiling): device names, what a timer is asked to time."""
from __future__ import annotations

import torch

from .scalars import check_bool, check_callable, check_choice, check_int

DEVICE_EXAMPLES = "('cpu', 'cuda', 'cuda:1', 'mps')"


def check_device(name: str, device, index_ok: bool = False) -> torch.device:
    """A device: a name torch knows (``"cpu"``, ``"cuda:1"``), a ``torch.device``, or with
    ``index_ok`` a CUDA index. Returned as a ``torch.device``. Another type is a TypeError, a
    name torch does not know a ValueError."""
    kinds = (str, torch.device, int) if index_ok else (str, torch.device)
    if isinstance(device, bool) or not isinstance(device, kinds):
        raise TypeError(f"{name} must be a device name such as 'cpu' or 'cuda', got {type(device).__name__}")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{name} must name a device {DEVICE_EXAMPLES}, got {device!r}") from None


def check_timing(fn, repeats, warmup, cpu_time, statistic, statistics, device) -> None:
    """A call to time: ``fn`` callable, ``repeats`` >= 1 and ``warmup`` >= 0 integers, ``cpu_time``
    a bool, ``statistic`` one of ``statistics``; CPU time measures the CPU, not another device."""
    check_callable("fn", fn)
    check_int("repeats", repeats, 1)
    check_int("warmup", warmup, 0)
    check_bool("cpu_time", cpu_time)
    kind = None if device is None else check_device("device", device, index_ok=True).type
    check_choice("statistic", statistic, tuple(statistics))
    if cpu_time and kind not in (None, "cpu"):
        raise ValueError(f"cpu_time=True measures CPU work; it cannot time a {kind} device")
