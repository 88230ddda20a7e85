"""Starting N training processes from Python, and joining a process group from ``torchrun``.

Data parallelism runs one *process* per device, each with its own copy of the model; the
processes talk through ``torch.distributed`` (chapter 18). On a cluster ``torchrun`` starts them;
inside a notebook :func:`launch` does, so a chapter can run a 2- or 4-rank experiment in a cell.

Teaching choices, and why:

* **forkserver, not spawn.** ``spawn`` re-imports torch in every process (about 2 s each here);
  a forkserver imports it once and forks workers from that clean, single-threaded process, so
  the second launch of a chapter costs a fraction of a second.
* **A FileStore, not a TCP port.** The ranks find each other through a file in a temporary
  folder (no port to pick, nothing that could clash with another run), and gloo's own
  connections stay on the loopback interface (``GLOO_SOCKET_IFNAME=lo``).
* **One thread per rank** (``OMP_NUM_THREADS=1``): N ranks on a small machine would otherwise
  fight over its cores, and one thread gives the same numbers everywhere.
* **Bounded.** :func:`launch` waits at most ``timeout`` seconds, then stops every worker it
  started by its process id and raises; a failing rank's traceback is raised in the caller.
"""
from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from .._checks import check_callable, check_int, check_number

__all__ = ["launch", "init_from_env", "LOOPBACK_ENV"]

LOOPBACK_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
_PRELOAD = ["torch", "torch.distributed", "torch.distributed.fsdp", "torch.nn.parallel", "transformer_lib",
            "transformer_lib.distributed"]


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _worker(fn: Callable, rank: int, world_size: int, folder: str, args: tuple) -> None:
    """One rank: join the group through the FileStore, run ``fn(rank, world_size, *args)``, save
    its result (or its traceback) where :func:`launch` reads it."""
    os.environ.update(LOOPBACK_ENV)
    torch.set_num_threads(1)
    out = Path(folder) / f"rank{rank}.pt"
    try:
        dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world_size)
        result = fn(rank, world_size, *args)
        dist.barrier()
        dist.destroy_process_group()
        torch.save({"result": result}, out)
    except BaseException:  # noqa: BLE001 -- sent back to the caller, who raises it
        torch.save({"error": traceback.format_exc()}, out)
        raise


def launch(fn: Callable, world_size: int, *args, timeout: float = 60.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes joined in one gloo group
    and return the list of their return values (rank order).

    ``fn`` must be importable (defined in a module, not in a notebook cell) and return something
    ``torch.save`` can write (numbers, lists, dicts, tensors). At most ``timeout`` seconds: then
    every worker is killed by its pid and ``TimeoutError`` is raised.
    """
    check_int("world_size", world_size, 1, 64)
    check_callable("fn", fn)
    check_number("timeout (seconds)", timeout, 0, low_open=True)
    ctx = _context()
    with tempfile.TemporaryDirectory(prefix="tlib-dist-") as folder:
        procs = [ctx.Process(target=_worker, args=(fn, r, world_size, folder, args), daemon=True)
                 for r in range(world_size)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                p.join(max(0.0, deadline - time.monotonic()))
            if any(p.is_alive() for p in procs):
                raise TimeoutError(f"{fn.__name__} on {world_size} ranks did not finish within {timeout} s")
        finally:
            for p in procs:  # stop only what we started, by pid
                if p.is_alive():
                    p.kill()
                    p.join(5)
        outputs, errors = [], []
        for r in range(world_size):
            path = Path(folder) / f"rank{r}.pt"
            saved = torch.load(path, weights_only=False) if path.exists() else {"error": "no result written"}
            if "error" in saved:
                errors.append((r, saved["error"]))
            outputs.append(saved.get("result"))
    if errors:  # the rank that failed first, then the ranks that lost their connection to it
        errors.sort(key=lambda e: "closed by peer" in e[1] or "Connection reset" in e[1])
        raise RuntimeError("\n".join(f"rank {r} of {world_size} failed:\n{text}" for r, text in errors))
    return outputs


def choose_backend(cuda_devices: int, local_world_size: int) -> str:
    """NCCL when every process on this machine gets a GPU of its own, else gloo on the CPU: NCCL
    cannot run two ranks on one GPU, so two processes on a one-GPU machine train on the CPU."""
    return "nccl" if cuda_devices >= local_world_size >= 1 else "gloo"


def init_from_env() -> tuple[int, int]:
    """Join the process group ``torchrun`` describes in the environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT) with gloo on CPU, NCCL when every rank has a GPU. Returns
    ``(rank, world_size)``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    backend = choose_backend(torch.cuda.device_count() if os.environ.get("TLIB_DEVICE", "") != "cpu" else 0,
                             local_world_size)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()
