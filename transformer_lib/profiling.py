"""Measuring a call: wall time, peak memory, FLOPs, and the dependency chain of its ops.

The one home for measurement in the library: chapters and benchmarks time with
:func:`time_call` and measure memory with :func:`peak_memory` rather than writing their own.

* :func:`time_call` times a call on any device (it synchronizes CUDA / MPS before reading the
  clock, which is the classic mistake in GPU timing) and returns the fastest of a few repeats
  (on a shared machine the minimum is the least disturbed run) or, with
  ``statistic="median"``, their median (the typical run, what a benchmark table reports;
  :func:`median_time` is that shortcut). On the CPU it can also measure one thread's CPU time,
  which waiting for a core does not inflate.
* :func:`peak_memory` measures the extra memory a call needs at its peak: CUDA's allocator
  statistics on a GPU, the process's peak resident size on a Linux CPU.
* :func:`machine_info` describes the machine a measurement was taken on (for results files).
* :func:`count_flops` wraps ``torch.utils.flop_counter.FlopCounterMode``: FLOPs per sub-module,
  counted from the shapes of the matrix products actually dispatched. It counts 2 FLOPs per
  multiply-add and ignores element-wise work (softmax, norms, activations, bias adds).
* :func:`trace_ops` records every aten operation a call dispatches and, for each one, how many
  operations had to finish before it could start. The longest such chain is the call's
  *critical path*: no amount of hardware can finish the call in fewer dependent steps. It is a
  count, so it is exact and the same on every machine, unlike a timing.

Used by the chapters "RNN vs Transformer" (critical path, timings), "Where the compute goes"
(FLOPs measured vs the model in :mod:`transformer_lib.cost`) and "Sparse attention" (time and
peak memory of the kernels), and by the scripts in ``benchmarks/``.
"""
from __future__ import annotations

import ctypes
import os
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._checks import check_callable, check_device, check_module, check_timing

__all__ = ["time_call", "median_time", "synchronize", "peak_memory", "machine_info", "count_flops", "FlopCount",
           "trace_ops", "OpTrace"]

STATISTICS = {"min": min, "median": statistics.median}


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait until every queued kernel on ``device`` has finished (no-op on the CPU)."""
    kind = check_device("device", device, index_ok=True).type if device is not None else None
    if kind in (None, "cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
    if kind in (None, "mps") and getattr(torch.backends, "mps", None) is not None \
            and torch.backends.mps.is_available():
        torch.mps.synchronize()


def time_call(fn: Callable, *args, repeats: int = 5, warmup: int = 1, device=None,
              cpu_time: bool = False, statistic: str = "min", **kwargs) -> float:
    """Seconds taken by ``fn(*args, **kwargs)``: the minimum (or median) over ``repeats`` timed runs.

    ``warmup`` untimed runs come first (kernel selection, caches, lazy initialization). GPU
    kernels run asynchronously, so the device is synchronized before each clock read; without
    that a GPU timing measures only how long it took to *queue* the work.

    ``cpu_time=True`` (CPU only) measures the CPU time of one thread instead of the wall clock:
    torch is limited to one thread for the measurement and ``time.thread_time`` does not count
    the time the thread spends waiting for a core. Other programs still slow the thread through
    the shared caches and memory bandwidth, so on a busy machine the result still moves from run
    to run (dense attention's one-thread rounds in ``benchmarks/results/sparse.json`` span 25%).
    Use it to compare the *shares* of different operations; it is not the wall time a user sees
    on a multi-core machine.

    ``statistic``: ``"min"`` (default; the least disturbed run) or ``"median"`` (the typical run).
    """
    check_timing(fn, repeats, warmup, cpu_time, statistic, STATISTICS, device)
    synchronize(device)
    clock = time.thread_time if cpu_time else time.perf_counter
    threads = torch.get_num_threads()
    if cpu_time:
        torch.set_num_threads(1)
    try:
        for _ in range(warmup):
            fn(*args, **kwargs)
        times = []
        for _ in range(repeats):
            synchronize(device)
            start = clock()
            fn(*args, **kwargs)
            synchronize(device)
            times.append(clock() - start)
    finally:
        if cpu_time:
            torch.set_num_threads(threads)
    return STATISTICS[statistic](times)


def median_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1, device=None) -> float:
    """Median wall time of ``fn()`` in seconds: ``time_call(fn, statistic="median")``."""
    return time_call(fn, repeats=repeat, warmup=warmup, device=device, statistic="median")


# -- memory ------------------------------------------------------------------------------------------

_LIBC: list = []


def _libc():
    """glibc through ctypes, or None where the C library is not glibc."""
    if not _LIBC:
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt, libc.malloc_trim  # noqa: B018 - both must exist (glibc)
            _LIBC.append(libc)
        except (OSError, AttributeError):  # not glibc: nothing to do
            _LIBC.append(None)
    return _LIBC[0]


def _release_free_memory() -> None:
    """Make glibc give free memory back to the OS, so that reusing it shows up in the RSS.

    A freed tensor's pages often stay resident inside malloc's heap; a later allocation reuses
    them without the resident size growing, and its peak would be invisible. So, for the
    measured call, every block over 128 KiB gets its own mapping that is unmapped on free (by
    default glibc raises that threshold after large frees, up to 32 MiB), and ``malloc_trim(0)``
    returns the free heap pages to the OS first. :func:`_warm_allocator` undoes it afterwards.
    """
    libc = _libc()
    if libc is not None:
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD
        libc.malloc_trim(0)


def _warm_allocator() -> None:
    """Give malloc back the thresholds its own adjustment reaches in a long-running process.

    Once set, glibc's thresholds no longer adjust themselves, so leaving them at 128 KiB would
    make every later allocation over 128 KiB fault its pages in afresh (slowing, say, the timing
    that follows a measurement). Its automatic adjustment raises the mmap threshold to the largest
    freed block, at most 32 MiB, and the trim threshold to twice that: set both to that maximum.
    """
    libc = _libc()
    if libc is not None:
        libc.mallopt(-3, 32 * 2**20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 64 * 2**20)  # M_TRIM_THRESHOLD


def _rss_kib() -> tuple[int, int]:
    """(current, peak) resident set size of this process in KiB, from /proc/self/status."""
    with open("/proc/self/status") as f:
        fields = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(("VmRSS", "VmHWM"))}
    return fields["VmRSS"], fields["VmHWM"]


def peak_memory(fn: Callable[[], object], device=None) -> float | None:
    """Extra memory (bytes) that ``fn()`` needs at its peak, beyond what was live before it.

    On CUDA: ``torch.cuda`` peak-allocation statistics. On Linux CPUs: the process's peak
    resident set size (``VmHWM``), reset just before the call through ``/proc/self/clear_refs``,
    minus the resident size before it, after glibc has returned its free pages to the OS (see
    :func:`_release_free_memory`; afterwards :func:`_warm_allocator` restores warm thresholds).
    Python's ``tracemalloc`` would not see torch's buffers at all. Returns None where neither is
    available. Resolution: a few hundred KiB.
    """
    check_callable("fn", fn)
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - before)
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/clear_refs"):
        return None
    _release_free_memory()
    try:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current resident size
        except OSError:
            return None
        before, _ = _rss_kib()
        fn()
        _, peak = _rss_kib()
    finally:
        _warm_allocator()
    return float(max(0, peak - before) * 1024)


def machine_info() -> dict:
    """What a results file should say about where it was measured: CPU, cores, threads, torch,
    GPU if any, and the 1-minute load average (a shared machine's timings depend on it)."""
    cpu, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            info = {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in f if ":" in line)}
        cpu, flags = info.get("model name", cpu), info.get("flags", "").split()
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "avx512": "avx512f" in flags,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


@dataclass
class FlopCount:
    """FLOPs of one call: ``total`` and ``by_module`` (dotted module path -> FLOPs, parents included)."""
    total: int
    by_module: dict[str, int]
    by_op: dict[str, int]


def count_flops(module: torch.nn.Module, *args, **kwargs) -> FlopCount:
    """FLOPs of ``module(*args, **kwargs)`` (no gradients) counted by ``FlopCounterMode``.

    Only operations with a registered FLOP formula are counted (matmuls, convolutions and the
    GPU attention kernels). An operation without one counts zero, silently: on the CPU, the fused
    ``_scaled_dot_product_flash_attention_for_cpu`` kernel is such an operation, so the score
    and mixing products of ``F.scaled_dot_product_attention`` go missing there. Run the call inside
    ``probes.record_attention(layer, weights=True)``: the library's layers then take the explicit
    matmul path, which is counted.
    """
    from torch.utils.flop_counter import FlopCounterMode

    check_module(module, "module")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(*args, **kwargs)
    counts = counter.get_flop_counts()
    root = type(module).__name__
    by_module = {}
    for name, ops in counts.items():
        if name == "Global":
            continue
        short = name[len(root) + 1:] if name.startswith(root + ".") else ("" if name == root else name)
        by_module[short] = int(sum(ops.values()))
    by_op = Counter()
    for op, value in counts.get("Global", {}).items():
        by_op[str(op)] += int(value)
    return FlopCount(total=int(counter.get_total_flops()), by_module=by_module, by_op=dict(by_op))


@dataclass
class OpTrace:
    """What :func:`trace_ops` saw.

    ``ops``: number of compute operations dispatched (views excluded), roughly the number of
    kernel launches on a GPU. ``depth``: the longest chain of operations in which each one needs
    the previous one's output (the critical path). ``counts``: operations by name.
    """
    ops: int
    depth: int
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def parallelism(self) -> float:
        """ops / depth: how many operations could run side by side on average."""
        return self.ops / max(self.depth, 1)


class _DepthMode(TorchDispatchMode):
    """Give every tensor storage the length of the longest chain of ops that produced it.

    Depth is tracked per storage, so an in-place write through a view also raises the depth of
    the tensor it views. Views themselves are free: they add no step to the chain.
    """

    def __init__(self):
        super().__init__()
        self.depth: dict[int, int] = {}
        self.ops = 0
        self.max_depth = 0
        self.counts: Counter = Counter()

    @staticmethod
    def _key(t: torch.Tensor) -> int | None:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # pragma: no cover - exotic tensor subclasses
            return None
        return storage.data_ptr() if storage.nbytes() > 0 else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        before = max((self.depth.get(self._key(a), 0) for a in inputs), default=0)
        is_view = bool(getattr(func, "is_view", False))
        d = before if is_view else before + 1
        if not is_view:
            self.ops += 1
            self.counts[str(func.overloadpacket.__name__)] += 1
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor):
                key = self._key(o)
                if key is not None:
                    self.depth[key] = d
        self.max_depth = max(self.max_depth, d)
        return out


def trace_ops(fn: Callable, *args, **kwargs) -> OpTrace:
    """Run ``fn(*args, **kwargs)`` without gradients and return its :class:`OpTrace`.

    Inputs and parameters start at depth 0; each non-view operation's output sits one step
    deeper than its deepest input. For an RNN over n tokens the depth grows like n (each step
    waits for the last); for a Transformer layer it is the same at every n.

    A fused kernel counts as one operation, whatever it does inside: on a GPU, cuDNN runs a
    whole ``nn.RNN`` as one kernel that still loops over the n steps internally, so read the
    depth as a count of *dispatched* dependent operations.
    """
    check_callable("fn", fn)
    mode = _DepthMode()
    with torch.no_grad(), mode:
        fn(*args, **kwargs)
    return OpTrace(ops=mode.ops, depth=mode.max_depth, counts=dict(mode.counts))
